"""The node document: what each node's collector sends, as the controller reads it.

The collector (``slurmdiag/collector/``, stdlib only, Python 3.8 on the nodes) builds plain dicts
and cannot import this module; these ``TypedDict`` classes are the controller's typed view of the
same keys, checked by mypy wherever ``slurmdiag/assemble.py`` reads them. docs/node-document.md
is the prose of this contract (types, units, when a key is null); a test keeps the two and the
collector's ``FORMAT`` in step.

Every key is optional (``total=False``): a document cut short by the deadline or a signal, or
the minimal one the collector writes when a value would not encode, has only some of them.
``read_node_document`` checks what must hold before any field is read: the format number and the
container types of the top-level keys. Anything else of the wrong type is read as missing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from slurmdiag.errors import ParseError

__all__ = [
    "NODE_DOCUMENT_FORMAT",
    "Connection",
    "FlightRecorder",
    "Gpu",
    "IbPort",
    "Interface",
    "Nics",
    "NodeDocument",
    "NodeDocumentError",
    "Process",
    "Sample",
    "Strace",
    "ToolResult",
    "Usage",
    "read_node_document",
]

#: The layout this controller reads (the collector's ``FORMAT``). Change it whenever a field
#: changes meaning or type; a new field the controller may ignore needs no new number.
NODE_DOCUMENT_FORMAT = 1


class Usage(TypedDict, total=False):
    cpu_s: float  # utime + stime of the process, seconds
    threads: dict[str, float]  # TID -> utime + stime, seconds
    io: list[int] | None  # [rchar, wchar, read_bytes, write_bytes] of /proc/PID/io
    main_io: list[int] | None  # the same of the main thread, /proc/PID/task/PID/io


class Waited(TypedDict, total=False):
    """What a rank's main thread waits on for another thread (collector's waited_holders)."""

    object: str  # repr of the queue, event, condition... (the wait's ``self``)
    owner: str | None  # repr of the calling frame's ``self`` (whose ``self._queue`` it is)
    holders: list[int]  # OS ids of the other threads whose locals hold the object or its owner


class Sample(TypedDict, total=False):
    t: float  # seconds since the collector started
    threads: list[dict[str, Any]] | None  # py-spy's JSON threads, slimmed (parse_pyspy_json)
    error: str | None
    note: str  # why it was read with --nonblocking, or that it is an earlier one (same_as)
    same_as: int  # this is the process' sample number same_as (from 0): none of its threads ran
    again: bool  # one more than asked: its wait changed after its last round (sample_again)
    usage: Usage
    groups: list[list[Any]]  # first round, ranks only: [frame index, local name, repr] (group_locals)
    waited: Waited  # first round, ranks only, when the main thread waits on a queue, an event


class Strace(TypedDict, total=False):
    status: str  # ok | error | skipped
    message: str | None
    window_s: float
    text: str  # strace -c's table (parse_strace_summary)


class Connection(TypedDict, total=False):
    local: str  # ip:port, [ip]:port for IPv6
    remote: str
    state: str  # ESTABLISHED, LISTEN, ... as /proc/net/tcp names them
    interface: str | None
    tx_queue: int  # bytes
    rx_queue: int


class RecentConnection(TypedDict, total=False):
    local: str
    remote: str
    last_sent_ms: int  # ms since it last sent data, when read (tcp_info)
    last_received_ms: int


class StalledConnection(TypedDict, total=False):
    local: str
    remote: str
    unacked: int  # segments sent and not acknowledged (tcp_info)
    retransmits: int  # RTO retransmissions of the oldest of them so far
    backoff: int  # RTO backoff
    last_ack_ms: int  # ms since the peer last acknowledged anything


class RecentTraffic(TypedDict, total=False):
    within_ms: int  # the strace window and a slack: data newer than this counts
    checked: int  # established connections looked up
    active: list[RecentConnection]  # those that carried data within_ms, newest first
    stalled: list[StalledConnection]  # unacknowledged data retransmitted on timeout, if any
    quiet_ms: int  # ms since any of them last sent or received data (absent: none checked)
    read_at: str  # "look": read at the look's end without strace (absent: when strace stopped)
    gloo_ran: list[bool]  # each gloo group's workers ran during strace's window (gloo ranks)
    gloo_idle_ms: list[int]  # without strace: ms each group's workers slept before the look
    main_ran: bool  # the main thread ran over gloo_ran's time (read for every rank)
    main_idle_ms: int  # without strace: ms the main thread slept before the look


class FileLock(TypedDict, total=False):
    held: bool  # False: the process waits for it
    kind: str  # FLOCK | POSIX | OFDLCK | LEASE
    mode: str  # READ | WRITE
    dev: str  # "fe:00"
    inode: int
    holder_pid: int | None  # of a lock waited for, when this node's /proc/locks shows it
    path: str | None


class Tracer(TypedDict, total=False):
    pid: int
    comm: str | None
    cmdline: list[str]



class BlockedCall(TypedDict, total=False):
    tid: int
    call: str  # recvfrom, sendto, read, write, flock, ... (a system call on a descriptor)
    fd: int
    target: str | None  # /proc/PID/fd/FD's link: socket:[INODE], pipe:[INODE], a path
    local: str  # a socket's endpoints, when the collector's socket reading saw it
    remote: str
    wchan: str  # a call on a file: where its thread sleeps (/proc/PID/task/TID/wchan)


class FlightRecorder(TypedDict, total=False):
    status: str  # ok | error | refused | timeout | not_hooked
    message: str | None
    format: str  # json | pickle
    source: str
    text: str
    base64: str


class Process(TypedDict, total=False):
    pid: int
    ppid: int
    role: str  # rank | dataloader_worker | child | agent
    rank_pid: int | None
    rank: int | None
    local_rank: int | None
    world_size: int | None
    launcher: str | None
    step_id: str | None
    cmdline: list[str]
    comm: str
    state: str
    wchan: str | None
    num_threads: int
    rss_kb: int
    cpu_percent: float | None
    cpu_window_s: float | None
    io_rate: int
    via: list[int]
    script_line: str  # a shell task's "path:line": the command it waits for (collector/shells.py)
    env: dict[str, str]
    samples: list[Sample]
    strace: Strace | None
    connections: list[Connection]
    recent_traffic: RecentTraffic
    file_locks: list[FileLock]
    tracer: Tracer
    blocked_calls: list[BlockedCall]
    called_target: str  # "path:line" passing a call as a thread's target (collector/sources.py)
    flight_recorder: FlightRecorder
    errors: list[str]


class ToolResult(TypedDict, total=False):
    argv: list[str]
    returncode: int | None
    text: str
    error: str | None


class Gpu(TypedDict, total=False):
    status: str  # ok | absent | error
    message: str | None
    query_gpu: ToolResult | None  # --query-gpu CSV (parse_nvidia_smi_query_csv)
    compute_apps: ToolResult | None  # --query-compute-apps CSV (parse_nvidia_smi_apps_csv)
    qx: ToolResult | None  # -q -x XML (parse_nvidia_smi_xml)
    xid_lines: list[str]  # kernel log lines (parse_xid_lines)
    xid_error: str | None


class Interface(TypedDict, total=False):
    name: str
    index: int | None
    state: str | None
    mtu: int | None
    kind: str | None
    speed_mbps: int | None
    addresses: list[str]  # CIDR


class IbPort(TypedDict, total=False):
    device: str
    port: int
    state: str | None  # sysfs text, "4: ACTIVE" (parse_sysfs_ib_state)
    phys_state: str | None  # "5: LinkUp" (parse_sysfs_ib_phys_state)
    rate: str | None  # "400 Gb/sec (4X NDR)"
    link_layer: str | None


class Nics(TypedDict, total=False):
    interfaces: list[Interface]
    ib_ports: list[IbPort]
    message: str | None


class Aligned(TypedDict, total=False):
    by: str  # go | closed | timeout | unreadable
    waited_s: float


class NodeDocument(TypedDict, total=False):
    format: int
    node: str
    hostname: str
    python: str
    ptrace_scope: str | None
    collector_version: str
    started: float  # epoch seconds
    duration_s: float | None
    cpu_s: float | None
    discovery: str | None  # stepd | proc | listpids
    tools: dict[str, str | None]
    timings: dict[str, float]  # phase -> seconds
    sockets_read_with: str | list[str] | None
    aligned: Aligned  # only when the transport sends the go (srun)
    errors: list[str]
    processes: list[Process]
    gpu: Gpu | None
    nics: Nics | None


class NodeDocumentError(ParseError):
    """A node document the controller will not read; the node becomes an ``error`` node."""


_CONTAINERS: dict[str, type | tuple[type, ...]] = {
    "processes": list,
    "errors": list,
    "tools": dict,
    "timings": dict,
    "gpu": dict,
    "nics": dict,
}


def read_node_document(raw: Mapping[str, Any]) -> NodeDocument:
    """``raw`` as a ``NodeDocument`` once its format and top-level containers are checked.

    Raises ``NodeDocumentError`` for a document of another format (a collector of another
    slurmdiag version: none of its fields are guessed at) or one whose top-level keys hold
    the wrong kind of value.
    """
    if not isinstance(raw, Mapping):
        raise NodeDocumentError(f"the node document is a {type(raw).__name__}, not an object")
    found = raw.get("format")
    if found != NODE_DOCUMENT_FORMAT or isinstance(found, bool):
        raise NodeDocumentError(
            f"the collector wrote a node document of format {found!r}; this slurmdiag reads "
            f"format {NODE_DOCUMENT_FORMAT}: a collector of another version ran",
            hint="clear the node cache (--node-cache ''), or run one slurmdiag version everywhere",
        )
    for key, kind in _CONTAINERS.items():
        value = raw.get(key)
        if value is not None and not isinstance(value, kind):
            raise NodeDocumentError(
                f"the node document's {key!r} is a {type(value).__name__}, not a "
                f"{'list' if kind is list else 'object'}"
            )
    document: NodeDocument = dict(raw)  # type: ignore[assignment]  # checked above
    return document
