"""The whole post-mortem: read what a finished job left behind, build the snapshot, write it."""

from __future__ import annotations

import base64
import dataclasses
import datetime as _dt
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmdiag._version import __version__
from slurmdiag.errors import SlurmdiagError
from slurmdiag.hostlist import expand_hostlist
from slurmdiag.post_mortem.cores import CoreSearch, CoreStack, search_cores
from slurmdiag.post_mortem.logs import RankLogs, files_under, per_rank_files, read_rank_logs
from slurmdiag.post_mortem.record import SlurmRecord, read_slurm_record
from slurmdiag.post_mortem.verdicts import first_cause, postmortem_verdicts
from slurmdiag.safeio import decimal_int, job_uid
from slurmdiag.slurm.discover import job_ref_from_user
from slurmdiag.slurm.sacct import (
    AcctRecord,
    expand_filename_pattern,
    output_paths_from_submit_line,
    signal_name,
)
from slurmdiag.snapshot import (
    Frame,
    Job,
    LogFinding,
    Node,
    Rank,
    Sample,
    Snapshot,
    ThreadStack,
)
from slurmdiag.transport.run import Runner, run_command
from slurmdiag.vocabulary import NodeStatus

# NCCL's default TORCH_FR_DUMP_TEMP_FILE; a site's own prefix is passed with --flight-recorder.
DEFAULT_FR_PREFIX = "/tmp/nccl_trace_rank_"
MAX_FR_BYTES = 64 * 1024 * 1024


class LogsGone(SlurmdiagError):
    exit_code = 9
    default_hint = "pass the job's log with --log FILE (several allowed)"


@dataclass(frozen=True)
class PostmortemResult:
    snapshot: Snapshot
    analysis: Any
    out_dir: Path | None


def _job(record: SlurmRecord) -> Job:
    j = record.job
    nodes: tuple[str, ...] = ()
    if j.nodes and j.nodes not in ("None assigned", "(null)"):
        try:
            nodes = tuple(expand_hostlist(j.nodes))
        except ValueError:
            nodes = (j.nodes,)
    het = record.components[0] if record.components else j
    return Job(id=j.job_id, state=j.state, user=j.user, name=j.name, nodes=nodes, ntasks=j.ntasks,
               start_time=j.start, run_time=f"{j.elapsed_s} s" if j.elapsed_s is not None else None,
               time_limit=j.time_limit, work_dir=j.work_dir, stdout=j.stdout, stderr=j.stderr,
               het_job_id=het.het_job_id,
               het_job_offset=None if record.components or het.het_offset is None
               else str(het.het_offset))


def _log_paths(record: SlurmRecord, job_id: str, logs: Sequence[str]) -> list[tuple[str, int | None]]:
    paths: list[tuple[str, int | None]] = []
    for path in logs:
        if os.path.isdir(path):
            paths.extend((f, None) for f in files_under(path))
        else:
            paths.append((path, None))
    job = record.job
    # a het job's components each have their own files (%j is the component's own id)
    for part in (record.components or (job,)):
        for candidate in (part.stdout, part.stderr, *output_paths_from_submit_line(part)):
            if candidate and candidate not in logs:
                entry = (expand_filename_pattern(candidate, part), None)
                if entry not in paths:
                    paths.append(entry)
    if not logs and not (job.stdout or job.stderr or job.submit_line) and job.work_dir:
        # sacct before 23.02 has no StdOut: sbatch's default name in the working directory
        paths.append((os.path.join(job.work_dir, f"slurm-{job.job_id}.out"), None))
    for directory in dict.fromkeys(d for d in (job.work_dir, *(os.path.dirname(p) for p in logs)) if d):
        for part in (record.components or (job,)):
            paths.extend(per_rank_files(directory, part.job_id))
    return paths


def _het_task_bases(record: SlurmRecord) -> dict[str, int]:
    """node -> the first rank of its het component in the step that spans every component:
    srun numbers a het step's tasks per component in its ``task N`` lines (component 1's first
    task is ``task 0``), SLURM_PROCID runs on over them. ``srun --het-group=0,1`` is step S in
    each component; of such steps the widest. A step of one component only (a second srun in
    the leader) says nothing of the others' numbering. No spanning step: no mapping."""
    labels = [c.label for c in record.components]
    tasks: dict[str, dict[str, int]] = {}  # step id -> component label -> its tasks there
    for s in record.steps:
        if (s.step or "").isdigit():
            tasks.setdefault(s.step or "", {})[s.label] = s.ntasks or 0
    spanning = [by for by in tasks.values() if set(by) == set(labels)]
    if not spanning:
        return {}
    widest = max(spanning, key=lambda by: sum(by.values()))
    bases: dict[str, int] = {}
    first = 0
    for component in record.components:
        for node in expand_hostlist(component.nodes or "") if component.nodes else ():
            bases.setdefault(node, first)
        first += widest[component.label]
    return bases


def _het_task_ranks(record: SlurmRecord, findings: Sequence[LogFinding]) -> tuple[LogFinding, ...]:
    """srun's ``task N`` findings of a whole het job with the task's global rank."""
    try:
        bases = _het_task_bases(record)
    except ValueError:
        return tuple(findings)
    return tuple(dataclasses.replace(f, rank=f.rank + bases[f.host])
                 if f.kind in ("task_exit", "task_terminated") and f.rank is not None
                 and f.host in bases else f for f in findings)


def _step_world(steps: Sequence[AcctRecord]) -> int:
    """The most tasks of one step: a het job's step spans its components (step 0 of each is
    one step, its tasks those of all), so a step's tasks are summed over the components."""
    tasks: dict[str, int] = {}
    for step in steps:
        tasks[step.step or ""] = tasks.get(step.step or "", 0) + (step.ntasks or 0)
    return max(tasks.values(), default=0)


def read_flight_recorder(prefixes: Sequence[str], world_size: int | None) -> dict[str, Any] | None:
    """Per-rank Flight Recorder dumps ``<prefix><rank>`` written on timeout; missing ones listed."""
    if not world_size:
        return None
    dumps: dict[str, Any] = {}
    errors: list[str] = []
    used = None
    for prefix in prefixes:
        for rank in range(world_size):
            path = f"{prefix}{rank}"
            try:
                if os.path.getsize(path) > MAX_FR_BYTES:
                    errors.append(f"rank {rank}: {path} larger than {MAX_FR_BYTES >> 20} MiB, skipped")
                    continue
                data = Path(path).read_bytes()
            except OSError:
                continue
            used = prefix
            if data[:1] in (b"{", b"["):
                dumps[str(rank)] = data.decode(errors="replace")
                continue
            from slurmdiag.assemble import _dump_object  # the collector's safe unpickler

            try:
                dumps[str(rank)] = _dump_object({"format": "pickle",
                                                 "base64": base64.b64encode(data).decode()})
            except Exception as exc:  # noqa: BLE001 - an unreadable dump is data
                errors.append(f"rank {rank}: unreadable dump {path}: {exc}")
        if used:
            break
    if not dumps and not errors:
        return None
    missing = sorted(r for r in range(world_size) if str(r) not in dumps)
    return {"dumps": dumps, "missing_ranks": missing, "errors": errors, "prefix": used}


def _last_collective(raw: Any) -> tuple[int, str, int | None, int | None] | None:
    """(seq, op, time_created_ns, timeout_ms) of a dump's last non-p2p collective."""
    import json

    data = raw
    if isinstance(raw, (str, bytes)):
        try:
            data = json.loads(raw)
        except ValueError:
            return None
    if not isinstance(data, dict):
        return None
    best = None
    for entry in data.get("entries") or ():
        if not isinstance(entry, dict) or entry.get("is_p2p"):
            continue
        seq = entry.get("collective_seq_id")
        if isinstance(seq, int) and (best is None or seq > best[0]):
            created = entry.get("time_created_ns")
            timeout = entry.get("timeout_ms")
            best = (seq, str(entry.get("profiling_name") or "?"),
                    created if isinstance(created, int) else None,
                    timeout if isinstance(timeout, int) else None)
    return best


def _flight_summary(section: dict[str, Any] | None) -> dict[str, Any]:
    """The last collective each dumped rank entered, and whether it entered it in time.

    A rank that entered the last collective more than its timeout after the first rank did
    arrived after the others had given up: it is the one they waited for, dump or not.
    """
    if not section:
        return {}
    from slurmdiag.hostlist import format_int_ranges

    last = {int(r): found for r, raw in section["dumps"].items()
            if (found := _last_collective(raw)) is not None}
    if not last:
        return {}
    seq = max(found[0] for found in last.values())
    at_seq = {r: found for r, found in last.items() if found[0] == seq}
    ops = sorted({found[1] for found in at_seq.values()})
    created = [found[2] for found in at_seq.values() if found[2] is not None]
    timeouts = [found[3] for found in at_seq.values() if found[3]]
    timed = bool(created) and bool(timeouts) and len(created) == len(at_seq)
    late: list[int] = []
    if timed:
        deadline = min(created) + min(timeouts) * 1_000_000
        late = sorted(r for r, found in at_seq.items() if (found[2] or 0) > deadline)
    reached = sorted(set(at_seq) - set(late))
    text = (f"Flight Recorder ({section.get('prefix')}<rank>): ranks "
            f"{format_int_ranges(reached)} entered collective #{seq} ({', '.join(ops)}) in time")
    if late:
        text += f"; ranks {format_int_ranges(late)} entered it only after the timeout"
    behind = sorted(set(last) - set(at_seq))
    if behind:
        text += f"; ranks {format_int_ranges(behind)} never reached it"
    if section["missing_ranks"]:
        text += f"; no dump from ranks {format_int_ranges(section['missing_ranks'])}"
    return {"last_seq": seq, "summary": text, "reached_ranks": reached, "late_ranks": late,
            "timed": timed}


def _rank_stacks(logs: RankLogs, cores: Sequence[CoreStack], record: SlurmRecord) -> tuple[Node, ...]:
    """Each rank's last stack: the crashing thread from its core, else its last traceback."""
    per_rank: dict[int, tuple[str | None, Rank]] = {}
    hosts = {f.rank: f.host for f in logs.findings if f.rank is not None and f.host}
    for finding in logs.findings:
        if finding.rank is None or "frames" not in finding.fields:
            continue
        frames = []
        for entry in reversed(finding.fields["frames"].splitlines()):  # innermost first
            path, _, rest = entry.partition(":")
            line_text, _, func = rest.partition(":")
            frames.append(Frame(function=func, file=path,
                                line=decimal_int(line_text)))
        thread = ThreadStack(name="last traceback (job log)", thread_id=0, frames=tuple(frames))
        per_rank[finding.rank] = (hosts.get(finding.rank), Rank(
            rank=finding.rank, pid=0, launcher="unknown", state="exited",
            samples=(Sample(t=0.0, threads=(thread,)),),
            errors=(finding.text[:300],)))
    for core in cores:
        if core.rank is None or not core.frames:
            continue
        thread = ThreadStack(name="crashing thread (core file)", thread_id=core.pid or 0,
                             os_thread_id=core.pid, active=True, frames=core.frames)
        per_rank[core.rank] = (core.node or hosts.get(core.rank), Rank(
            rank=core.rank, pid=core.pid or 0, launcher="unknown", state="crashed",
            samples=(Sample(t=0.0, threads=(thread,)),),
            errors=(f"core {core.path}: {core.reason or 'crashed'}",)))
    by_node: dict[str, list[Rank]] = {}
    for rank_number in sorted(per_rank):
        host, rank = per_rank[rank_number]
        by_node.setdefault(host or "unknown node", []).append(rank)
    return tuple(
        Node(name=name, status=NodeStatus.OK, discovery="postmortem", message="from the job's logs and cores",
             ranks=tuple(ranks))
        for name, ranks in sorted(by_node.items())
    )


def _step_dict(step: AcctRecord) -> dict[str, Any]:
    return {"id": step.step_id, "name": step.name, "state": step.state,
            "exit_code": step.exit_code, "signal": signal_name(step.signal),
            "cancelled_by": step.cancelled_by, "nodes": step.nodes, "ntasks": step.ntasks,
            "start": step.start, "end": step.end}


def _core_dict(core: CoreStack) -> dict[str, Any]:
    return {"path": core.path, "size": core.size, "rank": core.rank, "pid": core.pid,
            "node": core.node, "reason": core.reason, "tool": core.tool, "message": core.message,
            "frames": [f"{f.function} at {f.file}:{f.line or '?'}" for f in core.frames[:64]]}


def build_postmortem(
    job_id: str,
    *,
    logs: Sequence[str] = (),
    flight_recorder: Sequence[str] = (),
    cores: bool = True,
    core_dirs: Sequence[str] = (),
    runner: Runner = run_command,
) -> Snapshot:
    """Read Slurm's record, the logs, the Flight Recorder dumps and the cores; no analysis yet."""
    started = _dt.datetime.now(_dt.timezone.utc)
    ref = job_ref_from_user(str(job_id))
    record = read_slurm_record(ref, runner)
    notes = list(record.notes)
    paths = _log_paths(record, record.job.job_id, logs)
    rank_logs = read_rank_logs(paths, owner_uid=job_uid(record.job.user))
    if record.components:
        rank_logs = dataclasses.replace(rank_logs,
                                        findings=_het_task_ranks(record, rank_logs.findings))
    if not rank_logs.sources:
        tried = ", ".join(p for p, _ in paths) or "none known"
        raise LogsGone(f"job {ref} ended {record.job.state}, but none of its logs can be read "
                       f"(tried: {tried[:300]})")
    for path in rank_logs.unreadable:
        notes.append(f"log not readable: {path}")
    if rank_logs.sources and not rank_logs.labelled and not any(
            f.rank is not None for f in rank_logs.findings if f.kind not in ("task_exit", "task_terminated")):
        notes.append("the log has no per-rank prefixes (srun --label, torch's [rankN]:): lines "
                     "are attributed to ranks only where srun or torch names them")
    world = record.job.ntasks or _step_world(record.steps) or None
    seen = {f.rank for f in rank_logs.findings if f.rank is not None} | set(rank_logs.last_lines)
    if seen and (world is None or max(seen) >= world):
        world = max(seen) + 1
    core_search = (search_cores(record.job.work_dir, record.job.job_id, runner, tuple(core_dirs),
                                owner_uid=job_uid(record.job.user))
                   if cores else CoreSearch(notes=("core files not searched (--no-cores)",)))
    notes.extend(core_search.notes)
    for core in core_search.cores:
        if core.message:
            notes.append(f"core {core.path}: {core.message}")
    prefixes = [*flight_recorder, DEFAULT_FR_PREFIX]
    flight = read_flight_recorder(prefixes, world)
    if flight and flight["missing_ranks"]:
        from slurmdiag.hostlist import format_int_ranges

        notes.append(f"no Flight Recorder dump from ranks {format_int_ranges(flight['missing_ranks'])}")
    verdicts = postmortem_verdicts(record, rank_logs.findings, core_search.cores,
                                   rank_logs.last_lines, world, _flight_summary(flight))
    cause = first_cause(rank_logs.findings)
    j = record.job
    section = {
        "source": record.source,
        "job": {"state": j.state, "exit_code": j.exit_code, "signal": signal_name(j.signal),
                "cancelled_by": j.cancelled_by, "reason": j.reason, "failed_node": j.failed_node,
                "start": j.start, "end": j.end, "elapsed_s": j.elapsed_s, "time_limit": j.time_limit},
        "steps": [_step_dict(s) for s in record.steps],
        "logs": {"read": list(rank_logs.sources), "unreadable": list(rank_logs.unreadable),
                 "labelled": rank_logs.labelled},
        "first_error": None if cause is None else {
            "rank": cause.rank, "kind": cause.kind, "text": cause.text, "source": cause.source,
            "line": cause.line_no},
        "last_lines": {str(r): list(lines) for r, lines in rank_logs.last_lines.items()},
        "cores": [_core_dict(c) for c in core_search.cores],
        "world_size": world,
        "notes": notes,
    }
    return Snapshot(
        job=_job(record),
        nodes=_rank_stacks(rank_logs, core_search.cores, record),
        slurmdiag_version=__version__,
        created=started.isoformat(timespec="seconds"),
        duration_s=round((_dt.datetime.now(_dt.timezone.utc) - started).total_seconds(), 3),
        transport="none",
        options={"mode": "postmortem", "logs": list(logs), "flight_recorder": list(flight_recorder)},
        log_findings=rank_logs.findings,
        flight_recorder=flight,
        verdicts=tuple(verdicts),
        postmortem=section,
    )


def analyze_postmortem(snapshot: Snapshot) -> Any:
    """The stack analysis of the ranks' last stacks, with the post-mortem's own verdicts."""
    from slurmdiag.analysis import analyze

    analysis = analyze(snapshot)
    # "missing"/"unknown" ranks speak of processes and nodes at attach time; after the end a
    # rank without a stack simply left no traceback or core.
    return dataclasses.replace(analysis, verdicts=snapshot.verdicts, missing_ranks=(),
                               unknown_ranks=())


def postmortem_job(
    job_id: str,
    *,
    out_dir: str | Path | None = None,
    write: bool = True,
    report: bool = True,
    file_mode: int = 0o640,
    **options: Any,
) -> PostmortemResult:
    """Build, analyse and (optionally) write snapshot.json and report.html."""
    from slurmdiag.api import default_out_dir, write_outputs

    snapshot = build_postmortem(str(job_id), **options)
    analysis = analyze_postmortem(snapshot)
    target: Path | None = None
    if write:
        target = Path(out_dir) if out_dir is not None else default_out_dir(snapshot.job.id)
        snapshot = write_outputs(snapshot, target, analysis, report=report, mode=file_mode)
    return PostmortemResult(snapshot=snapshot, analysis=analysis, out_dir=target)
