"""slurmdiag probe, controller side: one srun step of the probe program, the peer map, the results.

The probe program (slurmdiag/probe/node.py) travels and starts exactly like the collector
(transport/collect.py's loader, payload and node command), in ONE srun step: into a running
job's allocation (``--jobid=J --overlap --gres=gpu:0``) or as a fresh allocation over named
nodes (``--nodelist``, ``--immediate`` so that busy nodes end the probe instead of queueing it).
srun broadcasts its stdin to every task (``--input=all``): the controller collects each node's
``@SDG1-ADDR`` line, writes the peer map as one line, waits for the framed documents, then
writes ``end`` so that every node stops serving its peers and exits. A heterogeneous job's
components looked at together get a step each (srun adds a step to one component at a time),
started at once and fed alike, as one step.
"""

from __future__ import annotations

import functools
import json
import math
import os
import queue
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from slurmdiag.options import DEFAULTS, AttachOptions
from slurmdiag.snapshot import Probe, ProbeCollective, ProbeGroup, ProbeLink, ProbeNode
from slurmdiag.transport import collect, srun
from slurmdiag.transport.base import NodeOutcome
from slurmdiag.transport.framing import answered_node, decode_frames
from slurmdiag.transport.run import CommandResult, end_group, spawn_interactive
from slurmdiag.vocabulary import NodeStatus

STEP_NAME = "slurmdiag-probe"
ADDR_TAG = "@SDG1-ADDR "
COLLECTIVE_SUFFIX = "/collective"  # as in node.py: the collective check's own document
PROBE_FORMAT = "slurmdiag-probe/1"


@dataclass(frozen=True)
class ProbeOptions:
    timeout_s: float = 60.0
    ifname: str | None = None  # None: the job's NCCL/GLOO variables, else the default route
    transfer_bytes: int = 4 << 20  # per test and direction
    transfer_s: float = 1.0  # cap per direction
    connect_s: float = 2.0
    parallel: int = 16  # tests a node runs at once (rounds: max(ceil(log2 N), ceil((N-1)/16)))
    collective: bool = True
    torch_python: str | None = None  # None: this interpreter (a venv on a shared file system)
    node_python: str | None = None
    node_cache: str = DEFAULTS.node_cache
    partition: str | None = None  # --nodes mode only


@functools.lru_cache(maxsize=1)
def probe_source() -> str:
    return resources.files("slurmdiag.probe").joinpath("node.py").read_text()


def probe_args(job_id: str | None, options: ProbeOptions) -> dict[str, Any]:
    margin = min(5.0, max(2.0, options.timeout_s * 0.1))
    torch_python = options.torch_python or sys.executable
    return {
        "job_id": job_id or "",
        "ifname": options.ifname or "",
        "deadline_s": max(5.0, options.timeout_s - margin),
        "bytes": options.transfer_bytes,
        "xfer_s": options.transfer_s,
        "connect_s": options.connect_s,
        "parallel": options.parallel,
        "collective": options.collective,
        "torch_python": torch_python if options.collective else "",
        "collective_timeout_s": max(3.0, min(10.0, options.timeout_s / 8)),
        "deadline_at": round(time.time() + options.timeout_s - margin, 3),
    }


def probe_argv(job_id: str | None, nodes: Sequence[str], options: ProbeOptions,
               step_name: str = STEP_NAME, het_group: tuple[str, int] | None = None) -> list[str]:
    """ONE srun step, one probe per node: into job ``job_id``, or a fresh allocation (None).
    ``het_group``: (leader's id, offset) of a heterogeneous job's component ``job_id``: srun
    takes only the leader's id, and ``--het-group`` picks the component."""
    if het_group is not None:
        target = [f"--jobid={het_group[0]}", f"--het-group={het_group[1]}", "--overlap",
                  "--gres=gpu:0"]
    elif job_id is not None:
        target = [f"--jobid={job_id}", "--overlap", "--gres=gpu:0"]
    else:
        minutes = max(1, math.ceil(options.timeout_s / 60) + 1)
        target = [f"--time={minutes}", f"--immediate={max(1, int(options.timeout_s / 3))}"]
        if options.partition:
            target.append(f"--partition={options.partition}")
    copts = AttachOptions(timeout_s=options.timeout_s, node_python=options.node_python,
                          node_cache=options.node_cache)
    program = (collect.program_payload(probe_source()), probe_args(job_id, options))
    direct = options.node_python is None and collect.controller_has_system_python()
    return [
        "srun", *target,
        f"--nodes={len(nodes)}", f"--ntasks={len(nodes)}", "--ntasks-per-node=1",
        f"--nodelist={','.join(nodes)}", f"--job-name={step_name}", "--kill-on-bad-exit=0",
        "--cpu-bind=none", "--input=all",
        *collect.node_command(job_id or "", copts, portable=not direct, source_in_env=True,
                              program=program),
    ]


def probe_environment(environ: Mapping[str, str]) -> dict[str, str]:
    return {**collect.srun_environment(environ),
            collect.PAYLOAD_ENV: collect.program_payload(probe_source())[1]}


@dataclass
class StepOutput:
    addresses: dict[str, dict[str, Any]]
    result: CommandResult


def run_step(argvs: Sequence[Sequence[str]], nodes: Sequence[str], timeout_s: float,
             env: Mapping[str, str], collective: bool = False) -> StepOutput:
    """Run the step (a heterogeneous job's components: a step each, at once, fed alike): peer
    map out once every node said where it listens, ``end`` once every node sent its document
    (or at the deadline); the steps are ended and their output returned as one."""
    start = time.monotonic()
    deadline = start + timeout_s
    lines: queue.Queue[tuple[str, str | None]] = queue.Queue()
    procs = []
    for argv in argvs:
        try:
            procs.append(spawn_interactive(argv, env))
        except OSError as exc:
            for proc in procs:
                end_group(proc)
                proc.wait()
            return StepOutput({}, CommandResult(tuple(argv), None, "", "", start_error=str(exc)))

    def pump(stream: Any, name: str) -> None:
        for raw in iter(stream.readline, b""):
            lines.put((name, raw.decode("utf-8", "replace")))
        lines.put((name, None))

    for proc in procs:
        for stream, name in ((proc.stdout, "out"), (proc.stderr, "err")):
            threading.Thread(target=pump, args=(stream, name), daemon=True).start()
    out: list[str] = []
    err: list[str] = []
    addresses: dict[str, dict[str, Any]] = {}
    finished: set[str] = set()
    closed = 0
    map_sent = end_sent = False
    # the peer map waits for every node's address at most this long (slow starts, dead nodes)
    map_deadline = start + min(max(5.0, timeout_s * 0.4), timeout_s - 2.0)
    timed_out = False

    def send(text: str) -> None:
        for proc in procs:
            try:
                assert proc.stdin is not None
                proc.stdin.write(text.encode())
                proc.stdin.flush()
            except (OSError, ValueError):
                pass

    while closed < 2 * len(procs):
        now = time.monotonic()
        if now >= deadline:
            timed_out = True
            break
        try:
            name, line = lines.get(timeout=min(0.2, deadline - now))
        except queue.Empty:
            line = ""
            name = ""
        if line is None:
            closed += 1
        elif name == "err":
            err.append(line)
        elif line:
            if line.startswith(ADDR_TAG):
                parts = line.split(" ", 2)
                try:
                    addresses[parts[1]] = json.loads(parts[2])
                except (IndexError, ValueError):
                    out.append(line)
            else:
                out.append(line)
                node = answered_node(line)
                if node is not None:
                    finished.add(node)
        if not map_sent and (len(addresses) == len(nodes) or time.monotonic() >= map_deadline):
            order = [n for n in nodes if addresses.get(n, {}).get("listening")]
            send(json.dumps({"order": order, "peers": {n: addresses[n] for n in order}}) + "\n")
            map_sent = True
        listening = {n for n, a in addresses.items() if a.get("listening")}
        wanted = set(addresses) | ({n + COLLECTIVE_SUFFIX for n in listening} if collective else set())
        if map_sent and not end_sent and wanted <= finished:
            send("end\n")
            end_sent = True
            for proc in procs:
                try:
                    assert proc.stdin is not None
                    proc.stdin.close()
                except OSError:
                    pass
            deadline = min(deadline, time.monotonic() + 5.0)
    for proc in procs:
        if proc.poll() is None:
            end_group(proc)
        proc.wait()
    failed = [proc.returncode for proc in procs if proc.returncode]
    result = CommandResult(tuple(argvs[0]), failed[0] if failed else 0, "".join(out),
                           "".join(err), timed_out=timed_out, duration_s=time.monotonic() - start)
    return StepOutput(addresses, result)


@dataclass(frozen=True)
class Component:
    """One component of a heterogeneous job: its own id, (leader's id, offset), its nodes."""
    job_id: str
    het_group: tuple[str, int]
    nodes: tuple[str, ...]


def run_probe(job_id: str | None, nodes: Sequence[str], options: ProbeOptions,
              environ: Mapping[str, str] | None = None,
              components: Sequence[Component] = ()) -> Probe:
    """Probe the network between ``nodes`` (of job ``job_id``, or a fresh allocation).
    ``components``: a heterogeneous job's, looked at together (``nodes`` is all of theirs):
    srun adds a step to one component at a time, so a step each, every node in one peer map."""
    environ = os.environ if environ is None else environ
    step_name = STEP_NAME if job_id is not None else f"{STEP_NAME}-{uuid.uuid4().hex[:8]}"
    argvs = ([probe_argv(c.job_id, c.nodes, options, step_name, c.het_group) for c in components]
             or [probe_argv(job_id, nodes, options, step_name)])
    step = run_step(argvs, nodes, options.timeout_s, probe_environment(environ),
                    collective=options.collective)
    warnings: list[str] = []
    if step.result.timed_out:
        left = srun.cancel_leftover_steps(components[0].het_group[0] if components else job_id,
                                          step_name=step_name)
        if left:
            warnings.append(f"cancelled leftover probe step(s): {', '.join(left)}")
    fanout = srun.outcomes_from_output(nodes, step.result, "srun")
    warnings += fanout.warnings
    documents = decode_frames(step.result.stdout).documents
    collectives = {n: documents[n + COLLECTIVE_SUFFIX].get("collective")
                   for n in nodes if n + COLLECTIVE_SUFFIX in documents}
    return assemble_probe("job" if job_id is not None else "nodes", nodes, fanout.nodes,
                          step.addresses, step.result.duration_s, warnings, collectives)


# ------------------------------------------------------------------ documents -> Probe (pure)


def _mbps(nbytes: Any, seconds: Any) -> float | None:
    if not isinstance(nbytes, int) or not isinstance(seconds, (int, float)) or nbytes <= 0:
        return None
    return round(nbytes / max(seconds, 1e-6) / 1e6, 3)


def _link(source: str, entry: Mapping[str, Any]) -> ProbeLink:
    mtu = entry.get("mtu_probe") or {}
    small = entry.get("small_probe") or {}
    return ProbeLink(
        source=source,
        target=str(entry.get("peer")),
        connect=bool(entry.get("connect")),
        connect_ms=entry.get("connect_ms"),
        error=entry.get("error"),
        up_mbps=_mbps(entry.get("up_bytes"), entry.get("up_s")),
        down_mbps=_mbps(entry.get("down_bytes"), entry.get("down_s")),
        mtu_size=mtu.get("size"),
        mtu_ok=mtu.get("ok"),
        mtu_error=mtu.get("error"),
        small_ok=small.get("ok") if small else None,
        round=entry.get("round"),
    )


def assemble_probe(mode: str, nodes: Sequence[str], outcomes: Mapping[str, NodeOutcome],
                   addresses: Mapping[str, Mapping[str, Any]], duration_s: float,
                   warnings: Sequence[str] = (),
                   collectives: Mapping[str, Mapping[str, Any] | None] | None = None) -> Probe:
    """The Probe section from each node's outcome, announced address and collective check
    document (pure)."""
    probe_nodes, links = [], []
    rounds = 0
    for name in nodes:
        outcome = outcomes.get(name)
        doc = outcome.document if outcome and outcome.status == NodeStatus.OK else None
        if doc is not None and doc.get("format") != PROBE_FORMAT:
            outcome = NodeOutcome(name, "error", None, f"not a probe document: {doc.get('format')!r}")
            doc = None
        addr = addresses.get(name) or {}
        iface = (doc or {}).get("interface") or {}
        status = outcome.status if outcome else NodeStatus.UNREACHABLE
        message = outcome.message if outcome else "no answer"
        if doc is None and addr and status != NodeStatus.OK:
            message = f"announced {addr.get('address')} but sent no result ({message})"
        probe_nodes.append(ProbeNode(
            name=name, status=status if doc is not None or status != NodeStatus.OK else NodeStatus.ERROR,
            message=message, interface=iface.get("name") or addr.get("name"),
            address=iface.get("address") or addr.get("address"),
            mtu=iface.get("mtu") or addr.get("mtu"), operstate=iface.get("operstate"),
            chosen_by=(doc or {}).get("chosen_by"), notes=tuple((doc or {}).get("notes") or ()),
            errors=tuple((doc or {}).get("errors") or ()), duration_s=(doc or {}).get("duration_s"),
        ))
        if doc is not None:
            links += [_link(name, e) for e in doc.get("results") or () if isinstance(e, dict)]
            rounds = max(rounds, int(doc.get("rounds") or 0))
    return Probe(mode=mode, nodes=tuple(probe_nodes), links=tuple(links), rounds=rounds,
                 duration_s=round(duration_s, 3), collective=assemble_collective(nodes, collectives or {}),
                 warnings=tuple(warnings))


def assemble_collective(nodes: Sequence[str],
                        reports: Mapping[str, Mapping[str, Any] | None]) -> ProbeCollective | None:
    """Join every member's view of each all_reduce group; name the smallest failing groups."""
    if not reports or all(r is None for r in reports.values()):
        return None
    errors = sorted({str(r["error"]) for r in reports.values() if r and r.get("error")
                     and not r.get("levels")})
    groups: dict[tuple[int, tuple[str, ...]], list[tuple[str, Mapping[str, Any]]]] = {}
    for name, report in reports.items():
        for level in (report or {}).get("levels") or ():
            key = (int(level.get("level", 0)), tuple(level.get("members") or ()))
            groups.setdefault(key, []).append((name, level))
    if not groups:
        return ProbeCollective("skipped", "; ".join(errors) or "no node ran the check")
    joined = []
    for (level, members), seen in sorted(groups.items()):
        answered = {n for n, _ in seen}
        errs = [f"{n}: {e.get('error')}" for n, e in seen if not e.get("ok")]
        errs += [f"{m}: no answer" for m in members if m not in answered]
        joined.append(ProbeGroup(level, members, not errs, tuple(errs[:8]),
                                 max((e.get("seconds") or 0.0) for _, e in seen)))
    top = [g for g in joined if g.level == 0]
    # Members whose level-0 all_reduce passed skip the lower levels: a missing answer there
    # is no failure.
    if top and all(g.ok for g in top):
        return ProbeCollective("ok", None, tuple(top))
    failing = [g for g in joined if not g.ok]
    smallest = tuple(g.members for g in failing
                     if not any(o is not g and set(o.members) < set(g.members) for o in failing))
    message = "; ".join(errors) or None
    return ProbeCollective("failed", message, tuple(joined), smallest)
