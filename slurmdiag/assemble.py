"""Turn the collectors' raw node documents into the snapshot's Nodes (pure).

The collector stays small and dumb (it runs on every node, stdlib only): it ships tool outputs
raw. Parsing happens here, with the tested ``parse_*`` functions, so that a new output format is
fixed in one place on the controller, not on thousands of nodes.
"""

from __future__ import annotations

import base64
import io
import math
import pickle
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from slurmdiag import node_document as nd
from slurmdiag.errors import ParseError
from slurmdiag.node_document import NodeDocumentError, read_node_document
from slurmdiag.parsers.infiniband import parse_sysfs_ib_phys_state, parse_sysfs_ib_state
from slurmdiag.parsers.nvidia_smi import (
    parse_nvidia_smi_apps_csv,
    parse_nvidia_smi_query_csv,
    parse_nvidia_smi_xml,
    parse_xid_lines,
)
from slurmdiag.parsers.pyspy import parse_pyspy_json
from slurmdiag.parsers.strace import parse_strace_summary
from slurmdiag.snapshot import (
    BlockedCall,
    Connection,
    FileLock,
    GpuState,
    IbPort,
    Interface,
    NicState,
    Node,
    Rank,
    RecentConnection,
    RecentTraffic,
    Sample,
    StalledConnection,
    StraceSummary,
    Tracer,
    WorkerProcess,
)
from slurmdiag.transport.base import NodeOutcome
from slurmdiag.vocabulary import NodeStatus


def _mapping(value: Any) -> dict[str, Any]:
    """A JSON object of the document, or an empty one for anything else (a missing value)."""
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _aligned(value: object) -> str | None:
    """How the node's look began (the node document's ``aligned.by``), None if not said."""
    by = value.get("by") if isinstance(value, dict) else None
    return by if isinstance(by, str) else None


def _float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _samples(raw: list[nd.Sample] | None) -> tuple[Sample, ...]:
    samples = []
    for item in raw or ():
        error = item.get("error")
        threads: tuple = ()
        raw_threads = item.get("threads")
        if raw_threads is not None:
            try:
                threads = parse_pyspy_json(raw_threads)
            except ParseError as exc:
                error = f"unreadable py-spy output: {exc.message}"
        usage: nd.Usage = _mapping(item.get("usage"))  # type: ignore[assignment]  # an object
        cpu = _mapping(usage.get("threads"))
        if cpu:
            threads = tuple(
                replace(th, cpu_s=_float(cpu.get(str(th.os_thread_id))))
                if th.os_thread_id is not None and str(th.os_thread_id) in cpu
                else th
                for th in threads
            )
        samples.append(
            Sample(
                t=float(item.get("t") or 0.0),
                threads=threads,
                error=error,
                cpu_s=_float(usage.get("cpu_s")),
                io=_io_counters(usage.get("io")),
                main_io=_io_counters(usage.get("main_io")),
                same_as=_index(item.get("same_as")),
                again=item.get("again") is True,
                groups=_group_locals(item.get("groups")),
                **_waited(item.get("waited")),
            )
        )
    return tuple(samples)


def _index(raw: Any) -> int | None:
    return raw if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0 else None


def _io_counters(raw: Any) -> tuple[int, ...] | None:
    if isinstance(raw, list) and len(raw) == 4 and all(
            isinstance(v, int) and not isinstance(v, bool) for v in raw):
        return tuple(raw)
    return None


def _waited(raw: nd.Waited | None) -> dict[str, Any]:
    """Sample's ``waited`` and ``waited_holders`` from the collector's ``waited``."""
    if not isinstance(raw, dict) or not isinstance(raw.get("object"), str):
        return {}
    holders = raw.get("holders")
    return {"waited": raw["object"][:200],
            "waited_holders": tuple(h for h in holders if _index(h) is not None)
            if isinstance(holders, list) else ()}


def _group_locals(raw: Any) -> tuple[tuple[int, str, str], ...]:
    if not isinstance(raw, list):
        return ()
    return tuple(
        (item[0], item[1], item[2])
        for item in raw
        if isinstance(item, list) and len(item) == 3 and isinstance(item[0], int)
        and not isinstance(item[0], bool) and isinstance(item[1], str) and isinstance(item[2], str)
    )


def _strace(raw: nd.Strace | None) -> StraceSummary | None:
    if not raw:
        return None
    status = raw.get("status") or "error"
    window = float(raw.get("window_s") or 0.0)
    if status != "ok":
        return StraceSummary(status=status, message=raw.get("message"), window_s=window)
    parsed = parse_strace_summary(raw.get("text") or "")
    return StraceSummary(
        status=parsed.status,
        message=parsed.message or raw.get("message"),
        window_s=window,
        syscalls=parsed.syscalls,
        total_seconds=parsed.total_seconds,
    )


def _recent_traffic(raw: nd.RecentTraffic | None) -> RecentTraffic | None:
    within = _int(raw.get("within_ms")) if isinstance(raw, dict) else None
    if raw is None or within is None:
        return None
    return RecentTraffic(
        within_ms=within,
        checked=_int(raw.get("checked")) or 0,
        active=tuple(
            RecentConnection(
                local=str(c.get("local")),
                remote=str(c.get("remote")),
                last_sent_ms=_int(c.get("last_sent_ms")) or 0,
                last_received_ms=_int(c.get("last_received_ms")) or 0,
            )
            for c in raw.get("active") or ()
            if isinstance(c, dict)
        ),
        stalled=tuple(
            StalledConnection(
                local=str(c.get("local")),
                remote=str(c.get("remote")),
                unacked=_int(c.get("unacked")) or 0,
                retransmits=_int(c.get("retransmits")) or 0,
                backoff=_int(c.get("backoff")) or 0,
                last_ack_ms=_int(c.get("last_ack_ms")) or 0,
            )
            for c in raw.get("stalled") or ()
            if isinstance(c, dict)
        ),
        quiet_ms=_int(raw.get("quiet_ms")),
        read_at=str(raw["read_at"]) if raw.get("read_at") else None,
        gloo_ran=tuple(v for v in raw.get("gloo_ran") or () if isinstance(v, bool)),
        gloo_idle_ms=tuple(v for v in raw.get("gloo_idle_ms") or ()
                           if isinstance(v, int) and not isinstance(v, bool)),
        main_ran=raw["main_ran"] if isinstance(raw.get("main_ran"), bool) else None,
        main_idle_ms=_int(raw.get("main_idle_ms")),
    )


def _tracer(raw: nd.Tracer | None) -> Tracer | None:
    pid = _int(_mapping(raw).get("pid"))
    if raw is None or pid is None:
        return None
    comm = raw.get("comm")
    return Tracer(pid=pid, comm=str(comm) if comm else None,
                  cmdline=tuple(str(a) for a in raw.get("cmdline") or ()))


def _file_locks(raw: list[nd.FileLock] | None) -> tuple[FileLock, ...]:
    locks = []
    for item in raw or ():
        inode = _int(item.get("inode"))
        if inode is None:
            continue
        locks.append(FileLock(
            held=bool(item.get("held")), kind=str(item.get("kind") or "?"),
            mode=str(item.get("mode") or "?"), inode=inode, dev=str(item.get("dev") or ""),
            holder_pid=_int(item.get("holder_pid")),
            path=str(item["path"]) if item.get("path") else None))
    return tuple(locks)


def _blocked_calls(raw: list[nd.BlockedCall] | None) -> tuple[BlockedCall, ...]:
    calls = []
    for item in raw or ():
        tid, fd = _int(item.get("tid")), _int(item.get("fd"))
        if tid is None or fd is None or not item.get("call"):
            continue
        calls.append(BlockedCall(
            tid=tid, call=str(item["call"]), fd=fd,
            target=str(item["target"]) if item.get("target") else None,
            local=str(item["local"]) if item.get("local") else None,
            remote=str(item["remote"]) if item.get("remote") else None,
            wchan=str(item["wchan"]) if item.get("wchan") else None))
    return tuple(calls)


def _connections(raw: list[nd.Connection] | None) -> tuple[Connection, ...]:
    return tuple(
        Connection(
            local=str(c.get("local")),
            remote=str(c.get("remote")),
            state=str(c.get("state")),
            interface=c.get("interface"),
        )
        for c in raw or ()
    )


def _rank(proc: nd.Process, workers: list[WorkerProcess]) -> Rank:
    return Rank(
        rank=_int(proc.get("rank")),
        pid=int(proc["pid"]),
        local_rank=_int(proc.get("local_rank")),
        world_size=_int(proc.get("world_size")),
        launcher=proc.get("launcher") or "unknown",
        step_id=proc.get("step_id"),
        cmdline=tuple(proc.get("cmdline") or ()),
        state=proc.get("state"),
        cpu_percent=_float(proc.get("cpu_percent")),
        wchan=proc.get("wchan"),
        num_threads=_int(proc.get("num_threads")),
        rss_kb=_int(proc.get("rss_kb")),
        env={str(k): str(v) for k, v in (proc.get("env") or {}).items()},
        samples=_samples(proc.get("samples")),
        strace=_strace(proc.get("strace")),
        connections=_connections(proc.get("connections")),
        recent_traffic=_recent_traffic(proc.get("recent_traffic")),
        file_locks=_file_locks(proc.get("file_locks")),
        tracer=_tracer(proc.get("tracer")),
        blocked_calls=_blocked_calls(proc.get("blocked_calls")),
        workers=tuple(workers),
        errors=tuple(proc.get("errors") or ()),
        called_target=_text(proc.get("called_target")),
    )


def _other(proc: nd.Process) -> WorkerProcess:
    return WorkerProcess(
        pid=int(proc["pid"]),
        role=proc.get("role") or "other",
        state=proc.get("state"),
        cpu_percent=_float(proc.get("cpu_percent")),
        cmdline=tuple(proc.get("cmdline") or ()),
        samples=_samples(proc.get("samples")),
        recent_traffic=_recent_traffic(proc.get("recent_traffic")),
        io_rate=_int(proc.get("io_rate")),
        via=_pids(proc.get("via")),
        script_line=_text(proc.get("script_line")),
    )


def _text(raw: object) -> str | None:
    return raw if isinstance(raw, str) else None


def _pids(raw: object) -> tuple[int, ...] | None:
    if not isinstance(raw, list):
        return None
    return tuple(pid for pid in (_int(item) for item in raw) if pid is not None)


def _gpus(raw: nd.Gpu | None) -> GpuState:
    if not raw:
        return GpuState(status="absent", message="the collector reported nothing about GPUs")
    xids = parse_xid_lines("\n".join(raw.get("xid_lines") or ()))
    query = raw.get("query_gpu") or {}
    qx = raw.get("qx") or {}
    apps_raw = raw.get("compute_apps") or {}
    apps = (
        parse_nvidia_smi_apps_csv(apps_raw["text"])
        if apps_raw.get("returncode") == 0 and apps_raw.get("text")
        else ()
    )
    if query.get("returncode") == 0 and query.get("text"):
        gpus = parse_nvidia_smi_query_csv(query["text"])
        return GpuState(status="ok", message=raw.get("message"), gpus=gpus, apps=apps, xid_events=xids)
    if qx.get("returncode") == 0 and qx.get("text"):
        # Older drivers reject some --query-gpu fields; the XML report has them all.
        gpus = parse_nvidia_smi_xml(qx["text"])
        message = f"{raw.get('message')}; read from 'nvidia-smi -q -x' instead"
        return GpuState(status="ok", message=message, gpus=gpus, apps=apps, xid_events=xids)
    status = raw.get("status") or "error"
    return GpuState(
        status="error" if status == "ok" else status,
        message=raw.get("message") or "nvidia-smi gave no readable GPU list",
        apps=apps,
        xid_events=xids,
    )


def _nics(raw: nd.Nics | None) -> NicState:
    if not raw:
        return NicState(message="the collector reported nothing about network interfaces")
    interfaces = tuple(
        Interface(
            name=str(i.get("name")),
            state=i.get("state"),
            mtu=_int(i.get("mtu")),
            speed_mbps=_int(i.get("speed_mbps")),
            addresses=tuple(i.get("addresses") or ()),
            kind=i.get("kind"),
        )
        for i in raw.get("interfaces") or ()
    )
    ports = tuple(_ib_port(p) for p in raw.get("ib_ports") or ())
    return NicState(interfaces=interfaces, ib_ports=ports, message=raw.get("message"))


def _ib_port(raw: nd.IbPort) -> IbPort:
    """A port as sysfs spells it (``4: ACTIVE``) -> the kernel's name and number."""
    state = parse_sysfs_ib_state(raw.get("state"))
    phys = parse_sysfs_ib_phys_state(raw.get("phys_state"))
    return IbPort(
        device=str(raw.get("device")),
        port=_int(raw.get("port")) or 0,
        state=state.name,
        phys_state=phys.name,
        rate=raw.get("rate"),
        link_layer=raw.get("link_layer"),
        state_code=state.code,
        phys_state_code=phys.code,
    )


_PTRACE_REFUSED = ("Permission Denied", "Permission denied", "Operation not permitted")


def _ptrace_hint(doc: nd.NodeDocument, ranks: list[Rank]) -> tuple[str, ...]:
    """One clear line when py-spy or strace were refused ptrace, instead of N cryptic ones."""
    messages = [s.error or "" for r in ranks for s in r.samples]
    messages += [r.strace.message or "" for r in ranks if r.strace is not None]
    if not any(marker in m for m in messages for marker in _PTRACE_REFUSED):
        return ()
    scope = doc.get("ptrace_scope")
    policy = f" (kernel.yama.ptrace_scope = {scope})" if scope is not None else ""
    hint = (
        f"ptrace was refused{policy}: run slurmdiag as the job's owner with "
        "kernel.yama.ptrace_scope=0, or as root / with CAP_SYS_PTRACE"
    )
    return (hint,)


def node_from_document(name: str, raw: Mapping[str, Any]) -> Node:
    """One collector document → one snapshot Node; workers hang under their rank.

    Raises ``NodeDocumentError`` for a document of another format, and KeyError, TypeError, ...
    for values of the wrong shape deeper down (``node_from_outcome`` turns both into an error
    node)."""
    doc = read_node_document(raw)
    processes = list(doc.get("processes") or ())
    workers_by_rank_pid: dict[int, list[WorkerProcess]] = {}
    others: list[WorkerProcess] = []
    for proc in processes:
        if proc.get("role") == "rank":
            continue
        worker = _other(proc)
        rank_pid = _int(proc.get("rank_pid"))
        if rank_pid is not None:
            workers_by_rank_pid.setdefault(rank_pid, []).append(worker)
        else:
            others.append(worker)
    ranks = [
        _rank(proc, workers_by_rank_pid.get(int(proc["pid"]), []))
        for proc in processes
        if proc.get("role") == "rank"
    ]
    ranks.sort(key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0, r.pid))
    errors = tuple(str(e) for e in doc.get("errors") or ()) + _ptrace_hint(doc, ranks)
    message = None
    if not ranks:
        message = "no rank processes of the job found on this node"
    return Node(
        name=name,
        status=NodeStatus.OK,
        message=message,
        hostname=doc.get("hostname"),
        duration_s=_float(doc.get("duration_s")),
        collector_version=str(doc.get("collector_version") or ""),
        python=doc.get("python"),
        discovery=doc.get("discovery"),
        timings={str(k): float(v) for k, v in (doc.get("timings") or {}).items()},
        collector_cpu_s=_float(doc.get("cpu_s")),
        aligned=_aligned(doc.get("aligned")),
        tools={str(k): v for k, v in (doc.get("tools") or {}).items()},
        ranks=tuple(ranks),
        other_processes=tuple(others),
        gpus=_gpus(doc.get("gpu")),
        nics=_nics(doc.get("nics")),
        errors=errors,
    )


def node_from_outcome(outcome: NodeOutcome) -> Node:
    """A node that answered becomes a full Node; one that did not keeps its status and reason."""
    if outcome.status == NodeStatus.OK and outcome.document is not None:
        try:
            return node_from_document(outcome.name, outcome.document)
        except NodeDocumentError as exc:
            return Node(name=outcome.name, status=NodeStatus.ERROR, message=f"{exc.message} ({exc.hint})")
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError,
                ParseError) as exc:
            return Node(
                name=outcome.name,
                status=NodeStatus.ERROR,
                message=f"the collector's document could not be read: {exc}",
            )
    return Node(name=outcome.name, status=outcome.status, message=outcome.message)


class _PlainUnpickler(pickle.Unpickler):
    """Unpickle plain containers and scalars only: a dump from a node never runs code here."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a Flight Recorder dump")


# A real torch dump (2,000 entries, their frames) is a few MB and a few hundred thousand values,
# six levels deep. Shared references make a 290-byte pickle unfold into 2**depth values: the
# loaded object is copied into plain JSON values with these bounds before anything walks it.
FR_MAX_BYTES = 64 * 1024 * 1024
FR_MAX_NODES = 1_000_000
FR_MAX_DEPTH = 32


class DumpTooLarge(ValueError):
    """A Flight Recorder dump beyond the bounds above."""


def plain_bounded(
    value: Any, *, max_nodes: int = FR_MAX_NODES, max_depth: int = FR_MAX_DEPTH
) -> Any:
    """A copy of ``value`` as JSON values (dict keys as text, tuples and sets as lists, bytes
    decoded), counting every value as often as it is reached; ``DumpTooLarge`` past the bounds."""
    count = 0

    def copy(item: Any, depth: int) -> Any:
        nonlocal count
        count += 1
        if count > max_nodes:
            raise DumpTooLarge(f"more than {max_nodes} values (shared references?)")
        if depth > max_depth:
            raise DumpTooLarge(f"nested deeper than {max_depth} levels")
        if item is None or isinstance(item, (bool, str)):
            return item
        if isinstance(item, int):
            return item if abs(item) < 1 << 63 else str(item)
        if isinstance(item, float):
            return item if math.isfinite(item) else str(item)
        if isinstance(item, (bytes, bytearray)):
            return bytes(item).decode("utf-8", errors="replace")
        if isinstance(item, dict):
            return {_key(k): copy(v, depth + 1) for k, v in item.items()}
        if isinstance(item, (list, tuple, set, frozenset)):
            return [copy(v, depth + 1) for v in item]
        return str(item)

    return copy(value, 0)


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, (bytes, bytearray)):
        return bytes(key).decode("utf-8", errors="replace")
    return str(key)[:200]


def _dump_object(raw: Mapping[str, Any]) -> Any:
    """A node's Flight Recorder dump as plain bounded JSON values (any failure: ValueError)."""
    if raw.get("format") == "pickle":
        encoded = raw.get("base64") or ""
        if not isinstance(encoded, str) or len(encoded) > FR_MAX_BYTES * 4 // 3 + 4:
            raise DumpTooLarge(f"larger than {FR_MAX_BYTES} bytes or not base64 text")
        try:
            data = base64.b64decode(encoded)
            loaded = _PlainUnpickler(io.BytesIO(data)).load()
        except DumpTooLarge:
            raise
        except Exception as exc:  # noqa: BLE001 - a hostile pickle raises anything; it is data
            raise ValueError(f"{type(exc).__name__}: {exc}") from None
        return plain_bounded(loaded)
    text = raw.get("text") or ""
    return text if isinstance(text, str) else plain_bounded(text)


def flight_recorder_section(
    documents: Mapping[str, Mapping[str, Any]], requested: bool
) -> dict[str, Any] | None:
    """Gather the ranks' Flight Recorder dumps into the snapshot's ``flight_recorder`` section."""
    dumps: dict[str, Any] = {}
    missing: list[int] = []
    errors: list[str] = []
    seen_any = False
    for node_name, doc in documents.items():
        for proc in doc.get("processes") or ():
            if not isinstance(proc, Mapping):
                continue
            if proc.get("role") != "rank" or "flight_recorder" not in proc:
                continue
            seen_any = True
            raw = proc["flight_recorder"]
            raw = raw if isinstance(raw, Mapping) else {}
            rank = _int(proc.get("rank"))
            if rank is None:
                continue
            if raw.get("status") == "ok":
                try:
                    dumps[str(rank)] = _dump_object(raw)
                except (ValueError, RecursionError) as exc:
                    errors.append(f"rank {rank} on {node_name}: unreadable dump: {exc}"[:500])
                    missing.append(rank)
            else:
                missing.append(rank)
                if raw.get("status") != "not_hooked":
                    errors.append(f"rank {rank} on {node_name}: {raw.get('message')}")
    if not requested and not dumps:
        return None
    if requested and not seen_any:
        errors.append("no rank answered the Flight Recorder request")
    return {"dumps": dumps, "missing_ranks": sorted(missing), "errors": errors}
