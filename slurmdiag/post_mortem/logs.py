"""What each rank said before it ended: per-rank events in the job's logs, in the order written.

A log is read as the launcher wrote it: ``srun --label`` prefixes (``3: ``), torch's ``[rank3]:``
prefixes, or neither (then only srun's own ``task 3`` lines and torch's prefixes name a rank).
Per-rank files (torchrun ``--log-dir``/``--tee``, submitit's ``<job>_<task>_log.err``) carry
their rank in the file name. Events are ordered by where they were written: srun merges the
tasks' output as it arrives, so a line earlier in the file happened earlier; across separate
files the order is each file's own.

An event is a *cause* (a crash, an exception, a timeout, a kill) or a *consequence* (a peer's
connection closed, srun terminating the rest of the step): the first error in time that is a
cause names the culprit, not the loudest one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from slurmdiag.logs import read_head_and_tail
from slurmdiag.parsers.job_log import parse_python_tracebacks
from slurmdiag.parsers.log_prefix import split_prefixes
from slurmdiag.parsers.nccl_log import parse_nccl_log
from slurmdiag.safeio import decimal_int
from slurmdiag.snapshot import LogFinding

LAST_LINES = 12

_TASK = re.compile(r"srun: error: (?P<node>\S+): tasks? (?P<tasks>[\d,\-]+): (?P<what>.+)$")
_STEPD_CANCEL = re.compile(
    r"\*\*\* (?P<what>JOB|STEP) (?P<id>\S+) ON (?P<node>\S+) CANCELLED AT (?P<at>\S+)"
    r"(?: DUE TO (?P<due>[A-Z ]+?))?(?: \*\*\*| by| \(|$)"
)
# srun when slurmctld set a node of the step DOWN (it stopped answering): no task line follows
# for the ranks that were on it
_NODE_FAILURE = re.compile(r"srun: error: Node failure on (?P<node>\S+)")
_CANCELLED_BY = re.compile(r"CANCELLED AT \S+ (?:DUE TO [A-Z ]+ )?by (?:UID )?(?P<who>\S+)")
_OOM = re.compile(r"Detected (?P<count>\d+) oom[_-]kill event|oom[_-]kill|Out Of Memory", re.IGNORECASE)
_GLOO_TIMEOUT = re.compile(r"Timed out waiting (?P<ms>\d+)ms for (?P<dir>recv|send) operation")
# torch's monitored_barrier (gloo): rank 0 names the ranks that never came, the others say they
# came and lost rank 0 (a consequence)
_MONITORED_MISSING = re.compile(
    r"Ranks? (?P<ranks>\d+(?:, ?\d+)*) failed to pass monitoredBarrier in (?P<ms>\d+) ms")
_MONITORED_REACHED = re.compile(r"Rank \d+ successfully reached monitoredBarrier, but received errors")
_PEER_LOST = re.compile(
    r"Connection (?:closed|reset) by peer|remote worker crashing|Broken pipe|"
    r"ProcessGroupGloo.*(?:closed|reset)|Socket Timeout|recvValue failed|Connection refused"
)
# A collective mismatch named by the library that saw it. gloo checks only sizes, on the rank that
# receives (``gloo::EnforceNotMet`` aborts it, or a RuntimeError of a Python call): not the rank
# that differs. torch's own check (TORCH_DISTRIBUTED_DEBUG=DETAIL) compares every collective's
# fingerprint across ranks before it runs and names both sides.
_GLOO_MISMATCH = re.compile(
    r"Received data size doesn't match expected size|Is there a distributed collective mismatch")
_GLOO_BYTES = re.compile(r"op\.preamble\.length <= op\.nbytes\. (?P<got>\d+) vs (?P<want>\d+)")
_FINGERPRINTS = re.compile(
    r"Detected mismatch between collectives on ranks\. Rank (?P<a>\d+) is running "
    r"(?:inconsistent )?collective: (?P<fa>.*?), but Rank (?P<b>\d+) is running "
    r"(?:inconsistent )?collective: (?P<fb>.*)")
_FINGERPRINT_FIELD = {
    "op": re.compile(r"OpType=(\w+)"),
    "shape": re.compile(r"TensorShape=(\[[^\]]*\](?:, \[[^\]]*\])*)"),
    "dtypes": re.compile(r"TensorDtypes=([\w, ]+?)(?:, TensorDeviceTypes|\)|$)"),
    "seq": re.compile(r"SequenceNumber=(\d+)"),
}
_DIFFER = re.compile(r"Collectives differ in the following aspects:\s*(?P<how>.+)$")
_FATAL_SIGNAL = re.compile(r"Fatal Python error: (?P<what>Segmentation fault|Aborted|Bus error|"
                           r"Floating point exception|Illegal instruction)")
_SIGNAL_WORDS = {
    "Segmentation fault": 11, "Aborted": 6, "Bus error": 7, "Floating point exception": 8,
    "Illegal instruction": 4, "Killed": 9, "Terminated": 15,
}


@dataclass(frozen=True)
class RankLogs:
    """Everything read from the job's logs: findings in written order and each rank's last lines."""

    findings: tuple[LogFinding, ...] = ()
    last_lines: dict[int, tuple[str, ...]] = field(default_factory=dict)
    sources: tuple[str, ...] = ()
    unreadable: tuple[str, ...] = ()
    labelled: bool = False


def _expand(tasks: str) -> list[int]:
    out: list[int] = []
    for part in tasks.split(","):
        low_text, _, high_text = part.partition("-")
        low, high = decimal_int(low_text), decimal_int(high_text or low_text)
        if low is not None and high is not None:
            # bounded before the range is built: "0-999999999999" must not fill memory
            out.extend(range(low, min(high, low + 100000 - len(out) - 1) + 1))
        if len(out) >= 100000:
            break
    return out[:100000]


def _signal_of(what: str) -> int | None:
    for word, number in _SIGNAL_WORDS.items():
        if word in what:
            return number
    match = re.search(r"signal (\d+)", what)
    return int(match.group(1)) if match else None


def _collective_of(frames: str) -> str | None:
    """The torch.distributed call a traceback was in (innermost frame in distributed_c10d)."""
    for entry in reversed(frames.splitlines()):
        path, _, rest = entry.partition(":")
        if path.endswith("distributed_c10d.py"):
            return rest.partition(":")[2] or None
    return None


def mismatch_fields(text: str) -> dict[str, str] | None:
    """What a collective-mismatch line says: torch's two fingerprints (``rank_a``, ``op_a``,
    ``shape_a``, ... of the rank that printed it and of the one it names), gloo's byte counts;
    None when the line names no mismatch."""
    fingerprints = _FINGERPRINTS.search(text)
    if fingerprints:
        fields = {"detector": "torch", "rank_a": fingerprints.group("a"),
                  "rank_b": fingerprints.group("b")}
        for side in ("a", "b"):
            for name, pattern in _FINGERPRINT_FIELD.items():
                found = pattern.search(fingerprints.group(f"f{side}"))
                if found:
                    fields[f"{name}_{side}"] = found.group(1).strip()
        differ = _DIFFER.search(text)
        if differ:
            fields["differ"] = " ".join(differ.group("how").split())[:200]
        return fields
    if _GLOO_MISMATCH.search(text):
        fields = {"detector": "gloo"}
        sizes = _GLOO_BYTES.search(text)
        if sizes:
            fields.update(received_bytes=sizes.group("got"), expected_bytes=sizes.group("want"))
        return fields
    return None


def parse_rank_log(text: str, source: str, rank: int | None = None) -> tuple[list[LogFinding], dict[int, list[str]], bool]:
    """One log's findings (each with ``fields['order']``-ready line numbers) and per-rank tails.

    ``rank``: the rank a per-rank file belongs to (its lines carry no prefix).
    """
    findings: list[LogFinding] = []
    tails: dict[int, list[str]] = {}
    labelled = False
    # One prefix form for the traceback parser: "N: line" (srun's label and torch's [rankN]:
    # both present would otherwise hide every traceback), the same line numbers.
    normalized: list[str] = []
    rests: list[str] = []  # each line without its prefixes
    tail_lines: list[tuple[int, bool, str]] = []  # (owner, owned by srun's label alone, line)
    for number, raw in enumerate(text.splitlines(), start=1):
        # the rank: torch's [rankN]: (global), else srun's label (SLURM_PROCID); torchrun's
        # [defaultN]: is a LOCAL rank and only removed
        prefixes = split_prefixes(raw)
        line = prefixes.rest
        labelled = labelled or prefixes.task is not None
        line_rank = prefixes.rank if prefixes.rank is not None else prefixes.task
        owner = line_rank if line_rank is not None else rank
        normalized.append(f"{owner}: {line}" if owner is not None else line)
        rests.append(line)
        if owner is not None and line.strip():
            tail_lines.append((owner, prefixes.rank is None and rank is None, line.rstrip()[:300]))
        task = _TASK.search(line)
        if task:
            what = task.group("what").strip()
            kind = "task_terminated" if "Terminated" in what else "task_exit"
            for task_rank in _expand(task.group("tasks")):
                fields = {"exit": what[:200]}
                sig = _signal_of(what)
                if sig and kind == "task_exit":
                    fields["signal"] = str(sig)
                code = re.search(r"exit code (\d+)", what)
                if code:
                    fields["exit_code"] = code.group(1)
                findings.append(LogFinding(source, number, kind, line.strip()[:500], task_rank,
                                           task.group("node"), fields))
            continue
        node_failure = _NODE_FAILURE.search(line)
        if node_failure:
            findings.append(LogFinding(source, number, "node_failure", line.strip()[:500], None,
                                       node_failure.group("node"), {}))
            continue
        cancel = _STEPD_CANCEL.search(line)
        if cancel:
            fields = {"scope": cancel.group("what").lower(), "id": cancel.group("id"),
                      "at": cancel.group("at")}
            if cancel.group("due"):
                fields["due_to"] = cancel.group("due").strip()
            who = _CANCELLED_BY.search(line)
            if who:
                fields["by"] = who.group("who").rstrip("*").strip()
            findings.append(LogFinding(source, number, "slurm_cancel", line.strip()[:500], None,
                                       cancel.group("node"), fields))
            continue
        if "slurmstepd" in line and _OOM.search(line):
            findings.append(LogFinding(source, number, "oom_kill", line.strip()[:500], owner, None, {}))
            continue
        if _GLOO_MISMATCH.search(line):  # gloo's abort ("what(): [enforce fail ...]")
            findings.append(LogFinding(source, number, "collective_mismatch", line.strip()[:500],
                                       owner, None, mismatch_fields(line) or {}))
            continue
        fatal = _FATAL_SIGNAL.search(line)
        if fatal:
            findings.append(LogFinding(source, number, "fatal_signal", line.strip()[:500], owner, None,
                                       {"signal": str(_SIGNAL_WORDS[fatal.group("what")])}))
    # Tracebacks: the exception line decides whether it is a cause or a consequence.
    normalized_text = "\n".join(normalized)
    agent_tracebacks = False
    for finding in parse_python_tracebacks(normalized_text, source=source):
        if _agents_traceback(finding.text, finding.fields.get("frames", "")):
            # torchrun's agent raising its workers' failure (its summary, the Root Cause block
            # read below, names the rank) or losing its rendezvous store: the agent is no rank
            agent_tracebacks = True
            continue
        exc_rank = finding.rank if finding.rank is not None else rank
        fields = dict(finding.fields)
        timeout = _GLOO_TIMEOUT.search(finding.text)
        kind = "exception"
        # the exception line is where it was printed: the end of the block, for ordering
        end = _exception_line(normalized_text, finding)
        # (read whole: a fingerprint runs past the 500 characters a finding keeps)
        mismatch = mismatch_fields(normalized[end - 1]) if 0 < end <= len(normalized) else None
        missing = _MONITORED_MISSING.search(finding.text)
        if missing:
            kind = "collective_timeout"
            fields.update(timeout_ms=missing.group("ms"), op="monitored_barrier",
                          missing_ranks=",".join(missing.group("ranks").replace(" ", "").split(",")))
        elif _MONITORED_REACHED.search(finding.text):
            kind = "peer_lost"
        elif mismatch:
            kind = "collective_mismatch"
            fields.update(mismatch)
            # the same line seen alone above: the traceback's finding, with its frames, instead
            findings = [f for f in findings if not (f.kind == kind and f.line_no == end)]
        elif timeout:
            kind = "collective_timeout"
            fields.update(timeout_ms=timeout.group("ms"), direction=timeout.group("dir"))
        elif _PEER_LOST.search(finding.text):
            kind = "peer_lost"
        collective = _collective_of(fields.get("frames", ""))
        if collective and "op" not in fields:
            fields["op"] = collective
        fields["start_line"] = str(finding.line_no)
        findings.append(LogFinding(source, end, kind, finding.text, exc_rank, None, fields))
    root_causes = _torchrun_root_causes(rests, source)
    findings.extend(root_causes)
    agents = bool(root_causes) or agent_tracebacks
    if agents:
        # srun's tasks are torchrun's agents, one a node: "task 1: Exited with exit code 1" is
        # the agent's, whose workers are global ranks of their own (the summary names them)
        findings = [_as_agents(f) if f.kind in ("task_exit", "task_terminated")
                    and f.fields.get("launcher") != "torchrun" else f for f in findings]
    for owner, by_label, line in tail_lines:
        if agents and by_label:
            continue  # an agent's line, or a worker's without its [rankN]: no rank's own
        tail = tails.setdefault(owner, [])
        tail.append(line)
        if len(tail) > LAST_LINES:
            del tail[0]
    for finding in parse_nccl_log(text, source=source):
        if finding.kind == "watchdog_timeout":
            fields = dict(finding.fields)
            owner = finding.rank if finding.rank is not None else rank
            findings.append(LogFinding(source, finding.line_no, "collective_timeout", finding.text,
                                       owner, finding.host, fields))
    findings.sort(key=lambda f: f.line_no)
    return findings, tails, labelled


_AGENT_FRAME = re.compile(r"(?:/bin/torchrun|/torch/distributed/run\.py):\d+:")
_ELASTIC_FRAME = re.compile(r"/torch/distributed/elastic/")


def _agents_traceback(exception: str, frames: str) -> bool:
    """A traceback of torchrun's agent, not of a rank: an elastic exception (ChildFailedError,
    RendezvousConnectionError), a frame of torchrun's own entry point, or frames in elastic
    alone (a chained store error of its rendezvous). A worker's passes through its script
    (under elastic's ``@record`` too), so it is never one."""
    stack = [frame for frame in frames.splitlines() if frame.strip()]
    return (exception.startswith("torch.distributed.elastic.") or bool(_AGENT_FRAME.search(frames))
            or bool(stack) and all(_ELASTIC_FRAME.search(frame) for frame in stack))


def _as_agents(finding: LogFinding) -> LogFinding:
    agent = "" if finding.rank is None else str(finding.rank)
    return replace(finding, rank=None, fields={**finding.fields, "agent_task": agent})


_ROOT_CAUSE = re.compile(r"^\s*Root Cause \(first observed failure\):\s*$")
_ROOT_FIELD = re.compile(r"^\s*(?P<key>rank|exitcode|host|traceback)\s*:\s*(?P<value>.*?)\s*$")


def _torchrun_root_causes(lines: list[str], source: str) -> list[LogFinding]:
    """torchrun's (elastic's) failure summary names the rank that failed first, its exit code
    and the signal that ended it (``exitcode : -9 (pid: 14022)  (SIGKILL)``): a rank killed by
    a signal leaves no line of its own, and srun sees only the agent's exit. A negative exit
    code is a ``fatal_signal`` of that global rank; a positive one a ``task_exit`` with it."""
    found = []
    for index, line in enumerate(lines):
        if not _ROOT_CAUSE.match(line):
            continue
        fields: dict[str, str] = {}
        for entry in lines[index + 1:index + 10]:
            field = _ROOT_FIELD.match(entry)
            if field:
                fields.setdefault(field.group("key"), field.group("value"))
            elif entry.strip().startswith("="):
                break
        rank = re.match(r"(\d+)", fields.get("rank", ""))
        code = re.match(r"(-?\d+)", fields.get("exitcode", ""))
        if not rank or not code:
            continue
        exit_code = int(code.group(1))
        text = f"torchrun: rank {rank.group(1)} failed first: exitcode {fields['exitcode']}" + (
            f"; {fields['traceback']}" if fields.get("traceback", "").startswith("Signal") else "")
        extra = {"exit": f"exitcode {exit_code}", "launcher": "torchrun"}
        if exit_code < 0:
            found.append(LogFinding(source, index + 1, "fatal_signal", text, int(rank.group(1)),
                                    fields.get("host"), {**extra, "signal": str(-exit_code)}))
        elif exit_code > 0:
            found.append(LogFinding(source, index + 1, "task_exit", text, int(rank.group(1)),
                                    fields.get("host"), {**extra, "exit_code": str(exit_code)}))
    return found


def _exception_line(text: str, finding: LogFinding) -> int:
    """The line number of a traceback's exception line (its block starts at finding.line_no)."""
    lines = text.splitlines()
    for number in range(finding.line_no, min(len(lines), finding.line_no + 400) + 1):
        if finding.text and finding.text in lines[number - 1]:
            return number
    return finding.line_no


_PER_RANK_FILE = (
    # submitit: <job>_<task>_log.out / .err
    re.compile(r"^(?P<job>\d+)(?:_\d+)?_(?P<rank>\d+)_log\.(?:out|err)$"),
    # torchrun --log-dir: .../attempt_N/<local_rank>/stdout.log|stderr.log (local rank only)
)


def per_rank_files(directory: str, job_id: str, *, limit: int = 4096) -> list[tuple[str, int]]:
    """submitit's per-task files for the job under ``directory`` (one level of subfolders)."""
    found: list[tuple[str, int]] = []
    root = Path(directory)
    try:
        candidates = list(root.glob(f"{job_id}_*_log.*")) + list(root.glob(f"*/{job_id}_*_log.*"))
    except OSError:
        return []
    for path in sorted(candidates)[:limit]:
        match = _PER_RANK_FILE[0].match(path.name)
        if match and match.group("job") == job_id.split("_")[0]:
            found.append((str(path), int(match.group("rank"))))
    return found


LOG_SUFFIXES = (".log", ".out", ".err", ".txt")
MAX_LOG_FILES = 4096


def files_under(directory: str, max_depth: int = 5) -> list[str]:
    """Log files under a directory (torchrun --log-dir: <run>/attempt_N/<local_rank>/std*.log)."""
    found: list[str] = []
    root_depth = directory.rstrip("/").count("/")
    for current, dirs, files in os.walk(directory):
        if current.count("/") - root_depth >= max_depth:
            dirs[:] = []
        dirs.sort()
        for name in sorted(files):
            if name.endswith(LOG_SUFFIXES):
                found.append(os.path.join(current, name))
                if len(found) >= MAX_LOG_FILES:
                    return found
    return found


def read_rank_logs(
    paths: Iterable[tuple[str, int | None]], *, owner_uid: int | None
) -> RankLogs:
    """Read each log (head and tail), parse it, merge the findings in file order.

    A log is read only as the job-named-path rule allows (``safeio``): a regular file of the
    job's user (``owner_uid``), never /dev/zero, a FIFO or a link to someone else's file."""
    findings: list[LogFinding] = []
    tails: dict[int, list[str]] = {}
    sources: list[str] = []
    unreadable: list[str] = []
    labelled = False
    # Separate files are ordered among themselves by when they were last written: the rank
    # that stopped writing first ended first.
    ordered = sorted(dict.fromkeys(paths), key=lambda p: _mtime(p[0]))
    for index, (path, rank) in enumerate(ordered):
        text = read_head_and_tail(path, owner_uid=owner_uid)
        if text is None:
            unreadable.append(path)
            continue
        sources.append(path)
        file_findings, file_tails, file_labelled = parse_rank_log(text, path, rank)
        labelled = labelled or file_labelled
        for finding in file_findings:
            findings.append(LogFinding(finding.source, finding.line_no, finding.kind, finding.text,
                                       finding.rank, finding.host,
                                       {**finding.fields, "order": f"{index}:{finding.line_no}"}))
        for owner, lines in file_tails.items():
            tails.setdefault(owner, []).extend(lines)
    return RankLogs(
        findings=tuple(findings),
        last_lines={r: tuple(lines[-LAST_LINES:]) for r, lines in sorted(tails.items())},
        sources=tuple(sources),
        unreadable=tuple(unreadable),
        labelled=labelled,
    )


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def order_key(finding: LogFinding) -> tuple[int, int]:
    file_index, _, line = finding.fields.get("order", "0:0").partition(":")
    return int(file_index or 0), int(line or finding.line_no)
