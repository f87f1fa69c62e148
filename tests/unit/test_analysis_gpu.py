"""GPU findings from nvidia-smi state (real outputs where the fixtures have them)."""

from __future__ import annotations

from pathlib import Path

from snapfactory import collective, in_user, node, rank, snap

from slurmdiag.analysis import diagnose
from slurmdiag.analysis.gpu import gpu_findings, gpu_ranks
from slurmdiag.parsers.nvidia_smi import (
    parse_nvidia_smi_query_csv,
    parse_xid_lines,
)
from slurmdiag.snapshot import Gpu, GpuApp, GpuState, Node

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nvidia_smi"
K = 3


def gpu(i: int, sm: float = 100.0, mem: float = 0.0, **kw) -> Gpu:  # type: ignore[no-untyped-def]
    return Gpu(index=i, uuid=f"GPU-{i}", utilization_gpu=sm, utilization_memory=mem, **kw)


def gpu_node(
    name: str,
    first_rank: int,
    gpus: tuple[Gpu, ...],
    apps=(),
    xids=(),
    world=8,
    status: str = "ok",
    message=None,
) -> Node:  # type: ignore[no-untyped-def]
    ranks = [
        rank(
            first_rank + i,
            *[collective("all_reduce")] * K,
            world=world,
            local_rank=i,
            pid=5000 + first_rank + i,
        )
        for i in range(len(gpus) or 4)
    ]
    return node(
        name,
        *ranks,
        gpus=GpuState(
            status=status, message=message, gpus=gpus, apps=tuple(apps), xid_events=tuple(xids)
        ),
    )


def kinds(verdicts):  # type: ignore[no-untyped-def]
    return [v.kind for v in verdicts]


def test_spin_wait_and_the_gpu_that_is_not_spinning() -> None:
    # GIVEN 2 nodes x 4 GPUs at 100% SM / 0% memory, except node002 GPU 2 idle (rank 6)
    n1 = gpu_node("node001", 0, tuple(gpu(i) for i in range(4)))
    n2 = gpu_node("node002", 4, tuple(gpu(i, sm=0.0) if i == 2 else gpu(i) for i in range(4)))
    (v,) = gpu_findings(snap(n1, n2), hung=True)
    assert (v.kind, v.severity) == ("gpu_spin_wait", "warning")
    assert "7 GPU(s)" in v.summary
    assert v.culprit_ranks == (6,)
    assert any("node002 GPU 2" in e for e in v.evidence)


def test_spin_wait_is_info_when_the_job_progresses() -> None:
    (v,) = gpu_findings(snap(gpu_node("node001", 0, (gpu(0),), world=1)), hung=False)
    assert v.severity == "info"


def test_uncorrected_ecc_is_critical_and_names_the_rank() -> None:
    n = gpu_node(
        "node001",
        0,
        tuple(
            gpu(i, sm=30, mem=20, ecc_uncorrected_volatile=(2.0 if i == 1 else 0.0))
            for i in range(4)
        ),
        world=4,
    )
    (v,) = gpu_findings(snap(n))
    assert (v.kind, v.severity, v.culprit_ranks) == ("gpu_ecc", "critical", (1,))


def test_unknown_error_from_real_query_csv() -> None:
    # GIVEN the real CSV where one A100 of eight reports power.limit [Unknown Error]
    gpus = parse_nvidia_smi_query_csv(
        (FIXTURES / "codeidx53699499437_query_gpu_csv_a100_80gb_pcie_unknown_error.txt").read_text()
    )
    gpus = tuple(Gpu(**{**g.__dict__, "index": i}) for i, g in enumerate(gpus))
    n = gpu_node("node001", 0, gpus, world=8)
    found = [v for v in gpu_findings(snap(n)) if v.kind == "gpu_unknown_error"]
    assert len(found) == 1
    assert found[0].severity == "critical" and found[0].culprit_ranks == (3,)
    assert "GPU 3" in found[0].summary


def test_remapped_rows_pending_is_a_finding() -> None:
    # GIVEN an A10 with a remapped row pending (as a real A10's nvidia-smi -q reported it:
    # "Remapped Rows / Pending : Yes", tests/fixtures/nvidia_smi/q_text_a10_*)
    gpus = (gpu(0, sm=0.0, remapped_pending="Yes", raw={"remapped_rows.pending": "Yes"}),)
    n = gpu_node("node001", 0, gpus, world=1)
    # THEN the analysis says so; the same GPU without the pending row does not
    assert "gpu_rows_pending" in kinds(gpu_findings(snap(n)))
    healthy = gpu_node("node001", 0, (gpu(0, sm=0.0, remapped_pending="No"),), world=1)
    assert "gpu_rows_pending" not in kinds(gpu_findings(snap(healthy)))


def test_xid_from_real_dmesg_maps_to_the_gpu_by_pci_address() -> None:
    xids = parse_xid_lines((FIXTURES / "dmesg_xid_119_gsp_timeout_h100.txt").read_text())
    gpus = tuple(
        gpu(i, sm=0, mem=0, raw={"pci.bus_id": f"00000000:{bus}:00.0"})
        for i, bus in enumerate(["18", "2A", "3A", "5D", "9B", "AB", "BA", "DB"])
    )
    n = gpu_node("node001", 0, gpus, xids=xids, world=8)
    (v,) = [v for v in gpu_findings(snap(n)) if v.kind == "gpu_xid"]
    assert v.severity == "critical"  # Xid 119, GSP timeout: hardware/driver
    assert "Xid 119" in v.summary and "GPU 4" in v.summary
    assert v.culprit_ranks == (4,)


def test_application_xid_is_a_warning() -> None:
    xids = ("NVRM: Xid (PCI:0000:18:00): 13, pid=77, name=python, Graphics SM Warp Exception",)
    n = gpu_node(
        "node001", 0, (gpu(0, raw={"pci.bus_id": "00000000:18:00.0"}),), xids=xids, world=1
    )
    (v,) = [v for v in gpu_findings(snap(n)) if v.kind == "gpu_xid"]
    assert v.severity == "warning"


def test_thermal_and_power_brake_throttling() -> None:
    n = gpu_node(
        "node001",
        0,
        (
            gpu(0, sm=40, mem=30, clocks_event_reasons="sw_power_cap"),
            gpu(1, sm=40, mem=30, clocks_event_reasons="hw_slowdown,hw_thermal_slowdown"),
        ),
        world=2,
    )
    (v,) = gpu_findings(snap(n))
    assert (v.kind, v.culprit_ranks) == ("gpu_throttle", (1,))
    assert "hw_thermal_slowdown" in v.summary


def test_foreign_process_on_a_job_gpu() -> None:
    apps = (
        GpuApp("GPU-0", 5000, "python"),
        GpuApp("GPU-1", 5001, "python"),
        GpuApp("GPU-1", 777, "/app/llama-server", 340.0),
    )
    n = gpu_node("node001", 0, (gpu(0, sm=30, mem=30), gpu(1, sm=30, mem=30)), apps=apps, world=2)
    (v,) = gpu_findings(snap(n))
    assert (v.kind, v.culprit_ranks) == ("gpu_foreign_process", (1,))
    assert "pid 777" in v.evidence[0]


def test_no_foreign_process_verdict_when_pid_namespaces_differ() -> None:
    apps = (GpuApp("GPU-0", 1, "python"), GpuApp("GPU-1", 2, "python"))
    n = gpu_node("node001", 0, (gpu(0, sm=30, mem=30), gpu(1, sm=30, mem=30)), apps=apps, world=2)
    assert gpu_findings(snap(n)) == []


def test_ranks_map_to_gpus_by_pid_then_by_local_rank() -> None:
    apps = (GpuApp("GPU-1", 5000, "python"),)
    by_pid = gpu_node("n", 0, (gpu(0), gpu(1)), apps=apps, world=2)
    assert gpu_ranks(by_pid) == {1: {0}}
    by_local = gpu_node("n", 0, (gpu(0), gpu(1)), world=2)
    assert gpu_ranks(by_local) == {0: {0}, 1: {1}}


def test_nvidia_smi_error_saying_the_gpu_is_lost() -> None:
    n = gpu_node(
        "node001",
        0,
        (),
        status="error",
        message="Unable to determine the device handle for GPU0000:9B:00.0: GPU is lost",
    )
    (v,) = gpu_findings(snap(n))
    assert (v.kind, v.severity) == ("gpu_smi_error", "critical")


def test_gpu_findings_reach_the_analysis_and_point_from_all_waiting() -> None:
    n = gpu_node(
        "node001",
        0,
        tuple(
            gpu(i, sm=30, mem=20, ecc_uncorrected_volatile=(1.0 if i == 2 else 0.0))
            for i in range(4)
        ),
        world=4,
    )
    a = diagnose(snap(n))
    assert [v.kind for v in a.verdicts] == ["all_waiting", "gpu_ecc"]
    assert any("see gpu_ecc" in e for e in a.verdicts[0].evidence)


def test_healthy_job_with_spinning_gpus_stays_info_only() -> None:
    n = node(
        "node001",
        *[
            rank(
                r,
                collective("all_reduce"),
                in_user(44),
                collective("all_reduce"),
                world=2,
                local_rank=r,
            )
            for r in range(2)
        ],
        gpus=GpuState(status="ok", gpus=(gpu(0), gpu(1))),
    )
    assert {v.severity for v in diagnose(snap(n)).verdicts} == {"info"}
