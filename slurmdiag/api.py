"""Python API: ``slurmdiag.attach(job_id)`` for notebooks, submitit users and the watchdog."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from slurmdiag._version import __version__
from slurmdiag.errors import SlurmdiagError, UsageError
from slurmdiag.slurm.discover import check_caller_may_attach, discover_job, job_ref_from_user
from slurmdiag.transport.collect import (
    DEFAULT_NODE_CACHE,
    CollectOptions,
    FanoutResult,
    fan_out_srun,
)
from slurmdiag.transport.run import run_command

if TYPE_CHECKING:
    from slurmdiag.analysis.model import Analysis
    from slurmdiag.snapshot import Snapshot

# What the snapshot, the analysis and the report need is imported after the fan-out (or, from
# attach_job, while it runs: see _load_the_rest): ~0.1 s of a fresh process's imports.

TRANSPORTS = ("srun", "ssh")
# How long the end of an attach waits for the loading started during the fan-out.
MEANWHILE_JOIN_S = 30.0


@dataclasses.dataclass(frozen=True)
class AttachResult:
    """A snapshot plus what attach wrote and what it had to say on the way."""

    snapshot: Snapshot
    analysis: Analysis
    out_dir: Path | None
    warnings: tuple[str, ...] = ()


def _fan_out(
    job_id: str,
    nodes: tuple[str, ...],
    options: CollectOptions,
    transport: str,
    ssh_options: dict | None,
    progress: Callable[[int, int], None] | None,
    het_group: tuple[str, int] | None = None,
) -> FanoutResult:
    if transport == "srun":
        return fan_out_srun(job_id, nodes, options, progress=progress, het_group=het_group)
    if transport == "ssh":
        from slurmdiag.transport.ssh import fan_out_ssh

        return fan_out_ssh(job_id, nodes, options, progress=progress, **(ssh_options or {}))
    raise UsageError(f"unknown transport {transport!r}", hint=f"use one of: {', '.join(TRANSPORTS)}")


def collect_snapshot(
    job_id: str,
    *,
    samples: int = 3,
    interval: float = 1.0,
    strace_s: float = 2.0,
    timeout_s: float = 30.0,
    native: bool = False,
    transport: str = "srun",
    node_python: str | None = None,
    node_cache: str | None = None,
    pyspy_path: str | None = None,
    nvidia_smi_path: str | None = None,
    flight_recorder: bool = False,
    ssh_options: dict | None = None,
    progress: Callable[[int, int], None] | None = None,
    meanwhile: Callable[[], object] | None = None,
    on_phase: Callable[[str, int | None], None] | None = None,
) -> tuple[Snapshot, list[str]]:
    """Discover the job, fan the collector out, and assemble the snapshot (no analysis yet).

    ``meanwhile`` runs in a thread during the fan-out (the controller mostly waits on srun); an
    exception there is dropped: whatever it prepares is done again, and fails for real, on use.
    ``on_phase(name, nodes expected or None)`` is told what attach is doing (the live line).
    """
    phase = on_phase or (lambda name, expected: None)
    if samples < 1:
        raise UsageError("--samples must be at least 1")
    if interval < 0 or strace_s < 0 or timeout_s <= 0:
        raise UsageError("--interval and --strace must be >= 0 and --timeout > 0")
    started = _dt.datetime.now(_dt.timezone.utc)
    phase("finding the job", None)
    ref = job_ref_from_user(str(job_id))
    slurm_job = discover_job(ref, run_command)
    check_caller_may_attach(
        slurm_job, ref, run_command, transport=transport,
        ssh_user=(ssh_options or {}).get("user"),
    )
    options = CollectOptions(
        samples=samples,
        interval_s=interval,
        strace_s=strace_s,
        native=native,
        timeout_s=timeout_s,
        node_python=node_python,
        node_cache=DEFAULT_NODE_CACHE if node_cache is None else node_cache,
        pyspy_paths=(pyspy_path,) if pyspy_path else (),
        nvidia_smi_paths=(nvidia_smi_path,) if nvidia_smi_path else (),
        flight_recorder=flight_recorder,
    )
    het_group = None
    if slurm_job.het_job_id and slurm_job.het_job_offset is not None:
        het_group = (slurm_job.het_job_id, slurm_job.het_job_offset)
    helper = None
    if meanwhile is not None:
        helper = threading.Thread(
            target=_quietly, args=(meanwhile,), name="slurmdiag-meanwhile", daemon=True
        )
        helper.start()
    phase(f"collecting through {transport}", len(slurm_job.nodes))
    fanout = _fan_out(
        slurm_job.job_id, slurm_job.nodes, options, transport, ssh_options, progress, het_group
    )
    phase("assembling the snapshot", None)
    if helper is not None:
        helper.join(MEANWHILE_JOIN_S)  # a race for the same imports would only cost time

    from slurmdiag.assemble import flight_recorder_section, node_from_outcome
    from slurmdiag.logs import findings_from_job_logs
    from slurmdiag.slurm.discover import to_job
    from slurmdiag.snapshot import Snapshot

    nodes = tuple(node_from_outcome(fanout.nodes[name]) for name in slurm_job.nodes)
    job = to_job(slurm_job)
    snapshot = Snapshot(
        job=job,
        nodes=nodes,
        slurmdiag_version=__version__,
        created=started.isoformat(timespec="seconds"),
        duration_s=round((_dt.datetime.now(_dt.timezone.utc) - started).total_seconds(), 3),
        transport=fanout.transport,
        options={
            "samples": samples,
            "interval_s": interval,
            "strace_s": strace_s,
            "timeout_s": timeout_s,
            "native": native,
            "flight_recorder": flight_recorder,
            **({"interrupted": True} if fanout.interrupted else {}),
        },
        log_findings=findings_from_job_logs(job),
        flight_recorder=flight_recorder_section(
            {n: o.document for n, o in fanout.nodes.items() if o.document is not None},
            requested=flight_recorder,
        ),
    )
    return snapshot, list(fanout.warnings)


def _quietly(work: Callable[[], object]) -> None:
    try:
        work()
    except Exception:  # noqa: BLE001, S110 - redone on use, where a failure is reported
        pass


def _load_the_rest(report: bool) -> None:
    """What attach_job needs after the fan-out: imported (and the report compiled) during it."""
    import slurmdiag.analysis
    import slurmdiag.assemble
    import slurmdiag.logs
    import slurmdiag.report.terminal  # noqa: F401

    if report:
        from slurmdiag.report.render import load_template

        load_template()


def default_out_dir(job_id: str) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path.cwd() / f"slurmdiag-{job_id}-{stamp}"


def write_outputs(
    snapshot: Snapshot, out_dir: Path, analysis: Analysis, *, report: bool = True,
    mode: int = 0o640,
) -> Snapshot:
    """Write snapshot.json (and report.html) into out_dir; returns the snapshot with its report."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SlurmdiagError(
            f"cannot create output directory {out_dir}: {exc.strerror}",
            hint="choose another place with --out DIR",
        ) from None
    if report:
        from slurmdiag.report.render import write_snapshot_report

        report_path = out_dir / "report.html"
        snapshot = dataclasses.replace(snapshot, report=str(report_path))
        write_snapshot_report(snapshot, report_path, analysis, mode=mode)
    # Same mode as the report: a snapshot holds the same stacks and paths.
    tmp = out_dir / ".snapshot.json.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as fh:
        fh.write(snapshot.to_json(indent=1))
    os.chmod(tmp, mode)
    os.replace(tmp, out_dir / "snapshot.json")
    return snapshot


def attach_job(
    job_id: str,
    *,
    out_dir: str | Path | None = None,
    write: bool = True,
    report: bool = True,
    file_mode: int = 0o640,
    **options,
) -> AttachResult:
    """The whole attach: collect, analyse, write; used by the CLI and the watchdog."""
    snapshot, warnings = collect_snapshot(
        str(job_id), meanwhile=lambda: _load_the_rest(write and report), **options
    )
    from slurmdiag.analysis import analyze

    phase = options.get("on_phase") or (lambda name, expected: None)
    phase("analysing", None)
    analysis = analyze(snapshot)
    snapshot = dataclasses.replace(snapshot, verdicts=tuple(analysis.verdicts))
    target: Path | None = None
    if write:
        target = Path(out_dir) if out_dir is not None else default_out_dir(snapshot.job.id)
        phase("writing the report" if report else "writing the snapshot", None)
        snapshot = write_outputs(snapshot, target, analysis, report=report, mode=file_mode)
    return AttachResult(
        snapshot=snapshot, analysis=analysis, out_dir=target, warnings=tuple(warnings)
    )


def attach(job_id: str | int, *, out_dir: str | Path | None = None, write: bool = False, **options) -> Snapshot:
    """Attach to a running job and return its analysed Snapshot.

    Options: samples=3, interval=1.0, strace_s=2.0, timeout_s=30.0, native=False,
    transport="srun"|"ssh", node_python (default: /usr/bin/python3 if 3.8+, else this
    interpreter when the node has it, else python3), node_cache ("/dev/shm"; "" = off),
    pyspy_path, nvidia_smi_path, ssh_options.
    With ``write=True`` (or an ``out_dir``) snapshot.json and report.html are written too.
    """
    return attach_job(
        str(job_id), out_dir=out_dir, write=write or out_dir is not None, **options
    ).snapshot
