"""GPU findings from each node's nvidia-smi state and Xid events.

- ``gpu_spin_wait``: 100 % SM with ~0 % memory utilisation — NCCL kernels busy-waiting in a
  collective for a peer; GPUs of the job that are *not* spinning point at the ranks that never
  reached the collective;
- ``gpu_ecc``: uncorrected volatile ECC errors; ``gpu_xid``: Xid events (hardware codes are
  critical, application ones warnings); ``gpu_rows_pending``: retired pages / remapped rows
  waiting for a GPU reset; ``gpu_throttle``: HW slowdown, thermal or power-brake clock events;
  ``gpu_unknown_error``: ``[Unknown Error]`` values (GPU fell off the bus or driver wedged);
  ``gpu_foreign_process``: a compute process that is not one of the job's;
  ``gpu_smi_error``: nvidia-smi itself failed.

Ranks are tied to GPUs by the compute-app pids when nvidia-smi lists them, else by LOCAL_RANK
through CUDA_VISIBLE_DEVICES.
"""

from __future__ import annotations

from collections.abc import Iterable

from slurmdiag.analysis.model import finding as _verdict
from slurmdiag.hostlist import format_int_ranges
from slurmdiag.parsers.nvidia_smi import parse_xid_events
from slurmdiag.safeio import decimal_int
from slurmdiag.snapshot import Gpu, Node, Snapshot, Verdict
from slurmdiag.vocabulary import VerdictKind, severity_rank

__all__ = ["gpu_findings", "gpu_ranks"]

SPIN_SM_PERCENT = 95.0
SPIN_MEM_PERCENT = 5.0
# Xid codes that mean the hardware or driver failed (NVIDIA's Xid catalogue); others (13, 31,
# 43, 45, ...) are usually the application's own fault or its termination.
HARDWARE_XIDS = frozenset(
    {
        48,
        56,
        57,
        61,
        62,
        63,
        64,
        65,
        68,
        69,
        74,
        79,
        92,
        94,
        95,
        109,
        110,
        119,
        120,
        121,
        122,
        123,
        124,
        136,
        140,
        143,
        144,
        145,
        146,
        147,
        148,
        149,
        150,
        151,
        154,
        155,
        156,
    }
)
_THROTTLE_WORDS = ("hw_slowdown", "hw_thermal", "sw_thermal", "power_brake", "thermal")
_YES = frozenset({"yes", "true", "1", "active"})


def _bus(pci: str | None) -> str | None:
    """``PCI:0000:9b:00`` / ``00000000:9B:00.0`` -> ``9b:00`` (bus:device)."""
    if not pci:
        return None
    parts = pci.lower().replace("pci:", "").split(":")
    if len(parts) < 2:
        return None
    return f"{parts[-2][-2:]}:{parts[-1].split('.', 1)[0]}"


def _gpu_bus(gpu: Gpu) -> str | None:
    for key in ("pci.bus_id", "pci_bus_id", "pci.bus"):
        if gpu.raw.get(key):
            return _bus(gpu.raw[key])
    return None


def _visible(env: dict[str, str]) -> list[str] | None:
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None or not value.strip():
        return None
    return [v.strip() for v in value.split(",") if v.strip()]


def gpu_ranks(node: Node) -> dict[int, set[int]]:
    """GPU index -> ranks of the node using it (compute-app pids first, else LOCAL_RANK)."""
    gpus = node.gpus.gpus if node.gpus else ()
    by_uuid = {g.uuid: g.index for g in gpus if g.uuid and g.index is not None}
    mapping: dict[int, set[int]] = {}
    pids = {p.pid: p.rank for p in node.ranks if p.rank is not None}
    for p in node.ranks:
        for w in p.workers:
            if p.rank is not None:
                pids.setdefault(w.pid, p.rank)
    for app in node.gpus.apps if node.gpus else ():
        rank = pids.get(app.pid) if app.pid is not None else None
        index = by_uuid.get(app.gpu_uuid) if app.gpu_uuid else None
        if rank is not None and index is not None:
            mapping.setdefault(index, set()).add(rank)
    if mapping:
        return mapping
    for p in node.ranks:
        if p.rank is None or p.local_rank is None:
            continue
        visible = _visible(p.env)
        device: str | None
        if visible is None:
            device = str(p.local_rank)
        elif len(visible) == 1:
            device = visible[0]
        else:
            device = visible[p.local_rank % len(visible)]
        if (index := decimal_int(device)) is not None:
            mapping.setdefault(index, set()).add(p.rank)
        elif device in by_uuid and by_uuid[device] is not None:
            mapping.setdefault(int(by_uuid[device] or 0), set()).add(p.rank)
    return mapping


def _gpu_label(node: Node, indexes: Iterable[int | None]) -> str:
    values = sorted({i for i in indexes if i is not None})
    if not values:
        return f"{node.name} GPU ?"
    return f"{node.name} GPU {format_int_ranges(values)}"


def _ranks_for(node: Node, indexes: Iterable[int | None]) -> tuple[int, ...]:
    mapping = gpu_ranks(node)
    return tuple(sorted({r for i in indexes if i is not None for r in mapping.get(i, ())}))




_STEP_DRAIN = (
    "drain the node (scontrol update nodename=N state=drain reason=gpu) and resubmit without it; "
    "check dmesg / nvidia-bug-report.sh; reset the GPU (nvidia-smi -r) once idle"
)


def _is_spinning(gpu: Gpu) -> bool:
    return (
        gpu.utilization_gpu is not None
        and gpu.utilization_memory is not None
        and gpu.utilization_gpu >= SPIN_SM_PERCENT
        and gpu.utilization_memory <= SPIN_MEM_PERCENT
    )


def _spin_findings(nodes: list[Node], hung: bool) -> list[Verdict]:
    spinning: list[str] = []
    quiet: list[str] = []
    quiet_ranks: list[int] = []
    spin_count = 0
    for node in nodes:
        gpus = node.gpus.gpus if node.gpus else ()
        used = set(gpu_ranks(node))
        spin = [g.index for g in gpus if _is_spinning(g)]
        spin_count += len(spin)
        if spin:
            spinning.append(_gpu_label(node, spin))
        idle = [
            g.index
            for g in gpus
            if not _is_spinning(g)
            and g.index in used
            and g.utilization_gpu is not None
            and g.utilization_gpu < 50
        ]
        if idle:
            quiet.append(_gpu_label(node, idle))
            quiet_ranks.extend(_ranks_for(node, idle))
    if not spin_count:
        return []
    evidence = [f"spinning: {'; '.join(spinning[:6])}"]
    if quiet:
        evidence.append(
            f"not spinning although used by the job: {'; '.join(quiet[:6])} — their ranks "
            "never entered the collective"
        )
    return [
        _verdict(
            VerdictKind.GPU_SPIN_WAIT,
            "warning" if hung else "info",
            f"{spin_count} GPU(s) at ~100% SM and ~0% memory utilisation: NCCL kernels "
            "busy-waiting in a collective for a peer",
            quiet_ranks,
            evidence,
            "the GPUs wait for a rank that never joined: find it in the stack verdict (or the "
            "GPUs that are not spinning), then the Flight Recorder",
        )
    ]


def _unknown_fields(gpu: Gpu) -> list[str]:
    return sorted(k for k, v in gpu.raw.items() if "Unknown Error" in v or "GPU is lost" in v)


def _throttle_reasons(gpu: Gpu) -> list[str]:
    text = (gpu.clocks_event_reasons or "").lower().replace(" ", "_")
    reasons = [r for r in text.split(",") if any(w in r for w in _THROTTLE_WORDS)]
    if not reasons:
        for key, value in gpu.raw.items():
            k = key.lower()
            if any(w in k for w in _THROTTLE_WORDS) and value.strip().lower() in _YES:
                reasons.append(k.rsplit(".", 1)[-1])
    return sorted(set(reasons))


def _xid_codes(texts: Iterable[str]) -> list[tuple[int, str | None, str]]:
    """(Xid, bus, line) of each kernel Xid line, read by the parser that found them."""
    out = []
    for text in texts:
        for event in parse_xid_events(text)[:1]:
            out.append((event.xid, _bus(event.pci), text))
    return out


def _node_findings(node: Node, snapshot: Snapshot) -> list[Verdict]:
    state = node.gpus
    found: list[Verdict] = []
    if state is None:
        return found
    if state.status == "error":
        lost = "lost" in (state.message or "").lower() or "Unable to determine" in (
            state.message or ""
        )
        found.append(
            _verdict(
                VerdictKind.GPU_SMI_ERROR,
                "critical" if lost else "warning",
                f"nvidia-smi failed on {node.name}: {state.message or 'no message'}",
                [p.rank for p in node.ranks if p.rank is not None] if lost else (),
                (),
                _STEP_DRAIN if lost else None,
            )
        )
    gpus = state.gpus
    ecc = [g for g in gpus if g.ecc_uncorrected_volatile]
    if ecc:
        found.append(
            _verdict(
                VerdictKind.GPU_ECC,
                "critical",
                f"uncorrected ECC errors on {_gpu_label(node, (g.index for g in ecc))}",
                _ranks_for(node, (g.index for g in ecc)),
                [
                    f"GPU {g.index}: {g.ecc_uncorrected_volatile:.0f} uncorrected volatile"
                    for g in ecc
                ],
                _STEP_DRAIN,
            )
        )
    unknown = [(g, _unknown_fields(g)) for g in gpus]
    unknown = [(g, f) for g, f in unknown if f]
    if unknown:
        found.append(
            _verdict(
                VerdictKind.GPU_UNKNOWN_ERROR,
                "critical",
                f"nvidia-smi reports [Unknown Error] on {_gpu_label(node, (g.index for g, _ in unknown))}"
                ": the GPU may have fallen off the bus or the driver is wedged",
                _ranks_for(node, (g.index for g, _ in unknown)),
                [f"GPU {g.index}: {', '.join(f[:4])}" for g, f in unknown],
                "check dmesg on the node for Xid 79 / 119; " + _STEP_DRAIN,
            )
        )
    pending = [
        g
        for g in gpus
        if (g.retired_pending or "").lower() in _YES or (g.remapped_pending or "").lower() in _YES
    ]
    if pending:
        found.append(
            _verdict(
                VerdictKind.GPU_ROWS_PENDING,
                "warning",
                f"retired pages / remapped rows pending on "
                f"{_gpu_label(node, (g.index for g in pending))}: the repair needs a GPU reset",
                _ranks_for(node, (g.index for g in pending)),
                (),
                "reset the GPU (nvidia-smi -r) or reboot the node when idle; drain it until then",
            )
        )
    throttled = [(g, _throttle_reasons(g)) for g in gpus]
    throttled = [(g, r) for g, r in throttled if r]
    if throttled:
        found.append(
            _verdict(
                VerdictKind.GPU_THROTTLE,
                "warning",
                f"clocks throttled on {_gpu_label(node, (g.index for g, _ in throttled))} "
                f"({', '.join(sorted({x for _, r in throttled for x in r}))}): this rank is "
                "slow and the others wait for it",
                _ranks_for(node, (g.index for g, _ in throttled)),
                [
                    f"GPU {g.index}: {', '.join(r)}"
                    + (f", {g.temperature_c:.0f} C" if g.temperature_c is not None else "")
                    for g, r in throttled
                ],
                "check cooling and power (nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER); "
                "drain the node if a GPU keeps hitting HW slowdown",
            )
        )
    xid_texts = list(state.xid_events) + [
        f.text
        for f in snapshot.log_findings
        if f.kind == "xid" and (f.host in (node.name, node.hostname))
    ]
    codes = _xid_codes(dict.fromkeys(xid_texts))
    if codes:
        by_bus = {_gpu_bus(g): g.index for g in gpus if _gpu_bus(g)}
        indexes = [by_bus.get(bus) for _, bus, _ in codes if bus]
        hardware = any(code in HARDWARE_XIDS for code, _, _ in codes)
        found.append(
            _verdict(
                VerdictKind.GPU_XID,
                "critical" if hardware else "warning",
                f"Xid {', '.join(str(c) for c in sorted({c for c, _, _ in codes}))} on "
                f"{node.name}"
                + (
                    f" ({_gpu_label(node, indexes)})" if any(i is not None for i in indexes) else ""
                ),
                _ranks_for(node, indexes),
                [text.strip()[:200] for _, _, text in codes[:4]],
                _STEP_DRAIN
                if hardware
                else "an application-level Xid (e.g. 13, 31, 43): look at the rank's CUDA error "
                "first; run with CUDA_LAUNCH_BLOCKING=1 to locate the kernel",
            )
        )
    found.extend(_foreign(node))
    return found


def _foreign(node: Node) -> list[Verdict]:
    """Compute processes on the node's GPUs that belong to no process of the job."""
    state = node.gpus
    if state is None or not state.apps:
        return []
    job_pids = {p.pid for p in node.ranks} | {w.pid for p in node.ranks for w in p.workers}
    job_pids |= {w.pid for w in node.other_processes}
    app_pids = {a.pid for a in state.apps if a.pid is not None}
    # Only when nvidia-smi and the collector share a pid namespace (one job pid is listed):
    # otherwise every pid would look foreign.
    if not app_pids & job_pids:
        return []
    by_uuid = {g.uuid: g.index for g in state.gpus if g.uuid}
    foreign = [a for a in state.apps if a.pid is not None and a.pid not in job_pids]
    if not foreign:
        return []
    indexes = [by_uuid.get(a.gpu_uuid or "") for a in foreign]
    return [
        _verdict(
            VerdictKind.GPU_FOREIGN_PROCESS,
            "warning",
            f"{_gpu_label(node, indexes)} also run{'s' if len(foreign) == 1 else ''} "
            f"{len(foreign)} process(es) outside the job",
            _ranks_for(node, indexes),
            [
                f"pid {a.pid} {a.process_name or '?'}"
                + (f" {a.used_memory_mib:.0f} MiB" if a.used_memory_mib is not None else "")
                + f" on GPU {by_uuid.get(a.gpu_uuid or '', '?')}"
                for a in foreign[:6]
            ],
            "a leftover process from an earlier job holds GPU memory and compute: kill it "
            "(or drain the node) before resubmitting",
        )
    ]


def gpu_findings(snapshot: Snapshot, hung: bool = True) -> list[Verdict]:
    """All GPU findings; the spin-wait one is a warning only when the stacks show a hang."""
    nodes = [n for n in snapshot.nodes if n.gpus is not None]
    found: list[Verdict] = []
    for node in nodes:
        found.extend(_node_findings(node, snapshot))
    found.extend(_spin_findings(nodes, hung))
    return sorted(found, key=lambda v: severity_rank(v.severity))
