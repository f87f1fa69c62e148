"""The snapshot: the one data contract between collection, analysis and presentation.

Everything after the fan-out is a pure function of a Snapshot. It is saved as JSON
(`snapshot.json`, `attach --json`) with a versioned ``schema`` key, and loaded back with
``Snapshot.from_json``; unknown keys are ignored so that newer snapshots still load.
The schema is documented in docs/snapshot.md.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Union

from slurmdiag.errors import ParseError
from slurmdiag.vocabulary import NodeStatus

SCHEMA_VERSION = 1

#: ``Node.status`` words (slurmdiag.vocabulary.NodeStatus).
NODE_STATUSES = tuple(status.value for status in NodeStatus)


@dataclass(frozen=True)
class Frame:
    """One Python (or native) frame; stacks list frames innermost first."""

    function: str
    file: str
    line: int | None = None
    module: str | None = None
    native: bool = False


@dataclass(frozen=True)
class ThreadStack:
    name: str | None
    thread_id: int
    os_thread_id: int | None = None
    active: bool = False
    owns_gil: bool = False
    frames: tuple[Frame, ...] = ()
    cpu_s: float | None = None  # utime+stime of the OS thread when sampled (/proc task stat)


@dataclass(frozen=True)
class Sample:
    """One py-spy dump of one process; ``t`` is seconds since the node's collection start."""

    t: float
    threads: tuple[ThreadStack, ...] = ()
    error: str | None = None
    cpu_s: float | None = None  # utime+stime of the whole process when sampled
    io: tuple[int, ...] | None = None  # (rchar, wchar, read_bytes, write_bytes) of /proc/PID/io
    main_io: tuple[int, ...] | None = None  # the same of the main thread (/proc/PID/task/PID/io)
    # this sample is sample same_as (from 0) again: none of its threads ran since (the collector
    # did not read it again); None for a sample py-spy read
    same_as: int | None = None
    # one sample more than asked, taken after the rounds as the rank's wait changed since its
    # last one (so that it goes with the state read then): no new moment of the look
    again: bool = False
    # (frame index in the main thread, local name, repr): the process-group locals of the
    # first round's py-spy --locals (collector's group_locals), () when not read
    groups: tuple[tuple[int, str, str], ...] = ()
    # the first round's --locals too (collector's waited_holders): the repr of what the main
    # thread waits on for another thread (a queue's get or put, an event's or a condition's
    # wait), and the OS ids of the other threads whose locals hold it; None when not read or
    # the main thread waits on no such object
    waited: str | None = None
    waited_holders: tuple[int, ...] = ()


@dataclass(frozen=True)
class SyscallCount:
    syscall: str
    calls: int
    errors: int = 0
    seconds: float = 0.0
    percent: float = 0.0


@dataclass(frozen=True)
class StraceSummary:
    status: str  # ok | error | skipped
    message: str | None = None
    window_s: float = 0.0
    syscalls: tuple[SyscallCount, ...] = ()
    total_seconds: float | None = None


@dataclass(frozen=True)
class Connection:
    """An open TCP connection of a rank and the interface it actually goes through."""

    local: str
    remote: str
    state: str
    interface: str | None = None


@dataclass(frozen=True)
class WorkerProcess:
    """A child of a rank that is not a rank itself (data-loader worker, compile worker)."""

    pid: int
    role: str
    state: str | None = None
    cpu_percent: float | None = None
    cmdline: tuple[str, ...] = ()
    samples: tuple[Sample, ...] = ()
    # a child's (role "child") connections that carried data lately (tcp_info's times; within_ms
    # the collector's CHILD_RECENT_MS), None when not read
    recent_traffic: RecentTraffic | None = None
    # a child's characters read and written per second over the collection window (files and
    # pipes, not sockets: /proc/PID/io rchar + wchar), None when not read
    io_rate: int | None = None
    # the pids between the rank and this process, its parent first (a shell the rank runs it
    # through, and waits for); None when not read (a collector older than this field)
    via: tuple[int, ...] | None = None
    # the job step of a process set apart from the ranks (role "not a rank": a per-node monitor
    # claiming the training ranks' numbers, analysis/steps.py); None otherwise
    step_id: str | None = None
    # a shell task's place in its script: "path:line" of the command it waits for (a wrapper
    # still staging data before python, collector/shells.py); None when not found
    script_line: str | None = None


@dataclass(frozen=True)
class RecentConnection:
    """A connection of a rank that carried data during the strace window (tcp_info, read when
    strace stopped): milliseconds since it last sent and last received data."""

    local: str
    remote: str
    last_sent_ms: int
    last_received_ms: int


@dataclass(frozen=True)
class StalledConnection:
    """A connection of a rank holding data its peer has not acknowledged, retransmitted on
    timeout (tcp_info, read when strace stopped): the path between the two loses packets, or
    the peer's host no longer answers. A peer that does not read leaves its window full
    instead (zero-window probes, no retransmission): not stalled."""

    local: str
    remote: str
    unacked: int
    retransmits: int
    backoff: int = 0
    last_ack_ms: int = 0


@dataclass(frozen=True)
class RecentTraffic:
    """Which of a rank's established connections carried data in the last ``within_ms`` (the
    strace window and a slack): ``checked`` were looked up, ``active`` did (newest first, at
    most 64). Absent when not read (no strace, sockets not read from netlink)."""

    within_ms: int
    checked: int
    active: tuple[RecentConnection, ...] = ()
    stalled: tuple[StalledConnection, ...] = ()
    # ms since any of the established connections checked last sent or received data: how long
    # the rank has moved nothing over TCP (None: none checked, or an older collector)
    quiet_ms: int | None = None
    # "look": read at the end of a look without strace (within_ms the last second of it); None:
    # when strace stopped (within_ms its window and a slack)
    read_at: str | None = None
    # whether each of the rank's gloo process groups' worker threads ran during strace's window
    # (a look without strace: from its first dump to its end), in the order the groups were
    # made (the default group first); () without a gloo group
    gloo_ran: tuple[bool, ...] = ()
    # a look without strace: ms each group's workers had been idle before its first dump
    gloo_idle_ms: tuple[int, ...] = ()
    # whether the rank's main thread ran over the same time as gloo_ran (None: not read); a send
    # or receive waits on the calling thread (gloo runs it there), so one asleep throughout
    # completed none
    main_ran: bool | None = None
    # a look without strace: ms the main thread had been idle before its first dump
    main_idle_ms: int | None = None


@dataclass(frozen=True)
class FileLock:
    """A file lock (flock, POSIX record lock) a rank holds, or waits for (``held`` False), from
    its node's /proc/locks; ``holder_pid``: who holds one waited for, when that node's table
    shows it (a lock on a shared filesystem held on another node is not there)."""

    held: bool
    kind: str
    mode: str
    inode: int
    dev: str = ""
    holder_pid: int | None = None
    path: str | None = None


@dataclass(frozen=True)
class Tracer:
    """The process ptrace-attached to a rank when the collector came (a debugger left there:
    gdb -p, a tool that never detached), from the rank's /proc/PID/status TracerPid."""

    pid: int
    comm: str | None = None
    cmdline: tuple[str, ...] = ()


@dataclass(frozen=True)
class BlockedCall:
    """A thread of a rank sitting in a system call on a descriptor when the collector looked
    (/proc/PID/task/TID/syscall): ``target`` is what the descriptor is (``socket:[N]``,
    ``pipe:[N]``, a path), ``local``/``remote`` a socket's endpoints when known."""

    tid: int
    call: str
    fd: int
    target: str | None = None
    local: str | None = None
    remote: str | None = None
    wchan: str | None = None  # a call on a file: where its thread sleeps in the kernel


@dataclass(frozen=True)
class Rank:
    rank: int | None
    pid: int
    local_rank: int | None = None
    world_size: int | None = None
    launcher: str = "unknown"  # srun | torchrun | submitit | mp.spawn | elastic | mpirun | deepspeed | accelerate | unknown
    step_id: str | None = None
    cmdline: tuple[str, ...] = ()
    state: str | None = None  # R S D Z T ...
    cpu_percent: float | None = None
    wchan: str | None = None
    num_threads: int | None = None
    rss_kb: int | None = None
    env: dict[str, str] = field(default_factory=dict)  # allowlisted only
    samples: tuple[Sample, ...] = ()
    strace: StraceSummary | None = None
    connections: tuple[Connection, ...] = ()
    recent_traffic: RecentTraffic | None = None
    file_locks: tuple[FileLock, ...] = ()
    tracer: Tracer | None = None
    blocked_calls: tuple[BlockedCall, ...] = ()
    workers: tuple[WorkerProcess, ...] = ()
    errors: tuple[str, ...] = ()
    # "path:line" of the job's own line that passed a call as a thread's target
    # (Thread(target=server.serve_forever())), its main thread inside that call in the last
    # sample (collector/sources.py; the line's text stays on the node); None when none did
    called_target: str | None = None


@dataclass(frozen=True)
class Gpu:
    """One GPU as nvidia-smi reports it; numbers are None where nvidia-smi gave a bracketed value.

    ``raw`` keeps every queried field verbatim, so ``[N/A]`` or ``[Unknown Error]`` stay visible.
    """

    index: int | None
    uuid: str | None = None
    name: str | None = None
    utilization_gpu: float | None = None
    utilization_memory: float | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    clocks_event_reasons: str | None = None
    ecc_uncorrected_volatile: float | None = None
    pcie_gen: float | None = None
    pcie_width: float | None = None
    retired_pending: str | None = None
    remapped_pending: str | None = None
    raw: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class GpuApp:
    gpu_uuid: str | None
    pid: int | None
    process_name: str | None = None
    used_memory_mib: float | None = None


@dataclass(frozen=True)
class GpuState:
    status: str  # ok | absent | error
    message: str | None = None
    gpus: tuple[Gpu, ...] = ()
    apps: tuple[GpuApp, ...] = ()
    xid_events: tuple[str, ...] = ()


@dataclass(frozen=True)
class Interface:
    name: str
    state: str | None = None
    mtu: int | None = None
    speed_mbps: int | None = None
    addresses: tuple[str, ...] = ()
    kind: str | None = None  # loopback | ether | infiniband | bridge | ...


@dataclass(frozen=True)
class IbPort:
    """An InfiniBand port: ``state``/``phys_state`` are the kernel's names (``ACTIVE``,
    ``LinkUp``), ``*_code`` their numbers (4, 5), read from sysfs' ``4: ACTIVE`` on the controller
    (``slurmdiag.parsers.infiniband``); snapshots written before the codes have ``None`` there."""

    device: str
    port: int
    state: str | None = None
    phys_state: str | None = None
    rate: str | None = None
    link_layer: str | None = None
    state_code: int | None = None
    phys_state_code: int | None = None


@dataclass(frozen=True)
class NicState:
    interfaces: tuple[Interface, ...] = ()
    ib_ports: tuple[IbPort, ...] = ()
    message: str | None = None


@dataclass(frozen=True)
class Node:
    name: str
    status: str  # one of NODE_STATUSES
    message: str | None = None
    hostname: str | None = None
    duration_s: float | None = None
    collector_version: str | None = None
    python: str | None = None
    discovery: str | None = None  # stepd | listpids | proc: how the job's processes were found
    timings: dict[str, float] = field(default_factory=dict)  # seconds per collector phase
    # the collector's own CPU-seconds on the node, interpreter start-up included, tools not
    collector_cpu_s: float | None = None
    # how the node's first sample was timed: "go" (the controller's signal once every node's
    # collector had started: the nodes' looks cover the same seconds), "timeout" (no go in
    # time), "closed" (the transport sent none); None: not asked to wait (ssh, memory)
    aligned: str | None = None
    tools: dict[str, str | None] = field(default_factory=dict)
    ranks: tuple[Rank, ...] = ()
    other_processes: tuple[WorkerProcess, ...] = ()  # launcher agents, shells: seen, not ranks
    gpus: GpuState | None = None
    nics: NicState | None = None
    errors: tuple[str, ...] = ()


@dataclass(frozen=True)
class Job:
    id: str
    state: str
    user: str | None = None
    name: str | None = None
    nodes: tuple[str, ...] = ()
    ntasks: int | None = None
    partition: str | None = None
    submit_time: str | None = None
    start_time: str | None = None
    run_time: str | None = None
    time_limit: str | None = None
    work_dir: str | None = None
    stdout: str | None = None
    stderr: str | None = None
    array_job_id: str | None = None
    array_task_id: str | None = None
    het_job_id: str | None = None
    het_job_offset: str | None = None
    #: Seconds from the last write to the job's stdout/stderr files to the end of the look,
    #: None when neither could be read here (another host's disk, another user's file).
    output_quiet_s: float | None = None


@dataclass(frozen=True)
class LogFinding:
    """A line of interest in the job's own logs (NCCL network choice, watchdog timeouts, Xid)."""

    source: str
    line_no: int
    kind: str  # nccl_net | nccl_bootstrap | nccl_warn | watchdog_timeout | xid
    text: str
    rank: int | None = None
    host: str | None = None
    fields: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    kind: str
    severity: str  # critical | warning | info
    summary: str
    culprit_ranks: tuple[int, ...] = ()
    sites: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()
    next_step: str | None = None
    # "low" when the verdict rests on library/stdlib frames only (no frame of the job's own
    # code on the stacks it names); None: no doubt was found (and in older snapshots).
    confidence: str | None = None


@dataclass(frozen=True)
class ProbeNode:
    """One node of a probe: the interface its tests used, or why it took no part."""

    name: str
    status: str  # ok | timeout | error | unreachable (NODE_STATUSES)
    message: str | None = None
    interface: str | None = None
    address: str | None = None
    mtu: int | None = None
    operstate: str | None = None
    chosen_by: str | None = None  # e.g. "the job's NCCL_SOCKET_IFNAME=eth1", "the default route"
    notes: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    duration_s: float | None = None


@dataclass(frozen=True)
class ProbeLink:
    """One directed test: ``source`` connected to ``target`` and sent, then received, data."""

    source: str
    target: str
    connect: bool
    connect_ms: float | None = None
    error: str | None = None
    up_mbps: float | None = None  # megabytes per second, source -> target
    down_mbps: float | None = None  # target -> source
    mtu_size: int | None = None  # the don't-fragment probe's packet size (the source's MTU)
    mtu_ok: bool | None = None
    mtu_error: str | None = None
    small_ok: bool | None = None  # a 64-byte datagram, tried when the MTU probe was lost
    round: int | None = None


@dataclass(frozen=True)
class ProbeGroup:
    """One gloo all_reduce of the collective check: a group of nodes at a bisection level."""

    level: int
    members: tuple[str, ...]
    ok: bool
    errors: tuple[str, ...] = ()
    seconds: float | None = None


@dataclass(frozen=True)
class ProbeCollective:
    status: str  # ok | failed | skipped
    message: str | None = None
    groups: tuple[ProbeGroup, ...] = ()
    smallest_failing: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True)
class Probe:
    """``slurmdiag probe``: the network between the nodes, tested from the nodes themselves."""

    mode: str  # job (into a running job's allocation) | nodes (a fresh allocation)
    nodes: tuple[ProbeNode, ...] = ()
    links: tuple[ProbeLink, ...] = ()
    rounds: int = 0
    duration_s: float | None = None
    collective: ProbeCollective | None = None
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Snapshot:
    job: Job
    nodes: tuple[Node, ...] = ()
    schema: int = SCHEMA_VERSION
    slurmdiag_version: str = ""
    created: str = ""  # ISO 8601, UTC
    duration_s: float | None = None
    transport: str = "srun"
    options: dict[str, Any] = field(default_factory=dict)
    log_findings: tuple[LogFinding, ...] = ()
    flight_recorder: dict[str, Any] | None = None
    verdicts: tuple[Verdict, ...] = ()
    report: str | None = None
    probe: Probe | None = None  # slurmdiag probe's results (absent in attach snapshots)
    # `slurmdiag postmortem` only: Slurm's record, logs read, cores, notes (docs/snapshot.md)
    postmortem: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        data = to_jsonable(self)
        if data.get("probe") is None:  # optional: attach snapshots stay as they were
            data.pop("probe", None)
        return data

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Snapshot:
        if not isinstance(data, dict) or "job" not in data:
            raise ParseError("not a slurmdiag snapshot (no 'job' key)")
        schema = data.get("schema")
        if not isinstance(schema, int) or schema > SCHEMA_VERSION:
            raise ParseError(
                f"snapshot schema {schema!r} is not supported (this slurmdiag reads {SCHEMA_VERSION})",
                hint="upgrade slurmdiag to read snapshots written by a newer version",
            )
        # Thousands of ranks share the same frames: one Frame object per distinct frame keeps a
        # large snapshot's memory (and the analysis' hashing) small.
        try:
            snapshot: Snapshot = from_jsonable(cls, data, frames={})
        except RecursionError:
            raise ParseError("snapshot nested too deeply") from None
        return snapshot

    @classmethod
    def from_json(cls, text: str) -> Snapshot:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ParseError(f"snapshot is not valid JSON: {exc}") from None
        except RecursionError:
            raise ParseError("snapshot is not valid JSON: nested too deeply") from None
        return cls.from_dict(data)

    def all_ranks(self) -> list[tuple[Node, Rank]]:
        return [(node, rank) for node in self.nodes for rank in node.ranks]


_PLAIN = frozenset([str, int, float, bool, type(None)])
_FIELD_NAMES: dict[type, tuple[str, ...] | None] = {}  # None: not a dataclass


def to_jsonable(value: Any) -> Any:
    """Turn dataclasses, tuples and dicts into plain JSON values, field order kept.

    Each class's field names are looked up once (64 ranks: 29,000 values; 27 ms through
    ``dataclasses.fields`` for every object, ~8 ms with the names kept)."""
    cls = type(value)
    if cls in _PLAIN:
        return value
    try:
        names = _FIELD_NAMES[cls]
    except KeyError:
        names = _FIELD_NAMES[cls] = (
            tuple(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls)
            else None)
    if names is not None:
        return {name: to_jsonable(getattr(value, name)) for name in names}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    return value


_HINTS_CACHE: dict[type, dict[str, Any]] = {}
_FRAME_FIELDS = tuple(f.name for f in dataclasses.fields(Frame))


def _hints(cls: type) -> dict[str, Any]:
    hints = _HINTS_CACHE.get(cls)
    if hints is None:
        hints = typing.get_type_hints(cls)
        _HINTS_CACHE[cls] = hints
    return hints


def from_jsonable(tp: Any, value: Any, frames: dict[tuple, Frame] | None = None) -> Any:
    """Build an instance of type ``tp`` from plain JSON values (the inverse of to_jsonable).

    ``frames``, when given, interns Frame objects by value.
    """
    if value is None:
        return None
    if tp is Frame and frames is not None and isinstance(value, dict):
        key = tuple(value.get(name) for name in _FRAME_FIELDS)
        if any(isinstance(part, (list, dict)) for part in key):
            return from_jsonable(Frame, value)  # raises ParseError: not a frame's values
        frame = frames.get(key)
        if frame is None:
            frame = frames[key] = from_jsonable(Frame, value)
        return frame
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        for option in options:
            if dataclasses.is_dataclass(option) and isinstance(value, dict):
                return from_jsonable(option, value, frames)
        for option in options:
            if _matches(option, value):
                return from_jsonable(option, value, frames)
        if any(typing.get_origin(o) in (dict, tuple) or o is Any for o in options):
            return value
        raise ParseError(f"snapshot value {_shown(value)} is not a {tp}")
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, dict):
            raise ParseError(f"expected an object for {tp.__name__}, got {type(value).__name__}")
        hints = _hints(tp)
        kwargs = {}
        for f in dataclasses.fields(tp):
            if f.name in value:
                kwargs[f.name] = from_jsonable(hints[f.name], value[f.name], frames)
        try:
            return tp(**kwargs)
        except TypeError as exc:
            raise ParseError(f"snapshot field missing in {tp.__name__}: {exc}") from None
    if origin is tuple:
        if not isinstance(value, list):
            raise ParseError(f"snapshot value {_shown(value)} is not a list")
        args = typing.get_args(tp)
        if len(args) > 1 and args[-1] is not Ellipsis:  # tuple[int, str, str]: one type each
            if len(value) != len(args):
                raise ParseError(f"snapshot value {_shown(value)} is not a {tp}")
            return tuple(from_jsonable(t, v, frames) for t, v in zip(args, value))
        item_type = args[0] if args else Any
        return tuple(from_jsonable(item_type, v, frames) for v in value)
    if origin is dict:
        if not isinstance(value, dict):
            raise ParseError(f"snapshot value {_shown(value)} is not an object")
        args = typing.get_args(tp)
        item_type = args[1] if len(args) == 2 else Any
        return {k: from_jsonable(item_type, v, frames) for k, v in value.items()}
    if tp in (str, int, float, bool):
        if not _matches(tp, value) and not (tp is bool and isinstance(value, bool)):
            raise ParseError(f"snapshot value {_shown(value)} is not a {tp.__name__}")
        if tp is float and isinstance(value, int):
            return float(value)
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _matches(tp: Any, value: Any) -> bool:
    origin = typing.get_origin(tp) or tp
    if origin is Any:
        return True
    if origin is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if origin is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is tuple:
        return isinstance(value, list)
    if isinstance(origin, type):
        return isinstance(value, origin)
    return False
