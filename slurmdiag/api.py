"""Python API: ``slurmdiag.attach(job_id)`` for notebooks, submitit users and the watchdog."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurmdiag._version import __version__
from slurmdiag.errors import OutputFailed
from slurmdiag.options import DEFAULTS, AttachOptions, SshSettings
from slurmdiag.slurm.discover import (
    check_caller_may_attach,
    discover_components,
    job_ref_from_user,
    whole_het_job,
)
from slurmdiag.transport.base import (
    FanoutResult,
    NodeOutcome,
    Progress,
    Transport,
    transport_for,
)
from slurmdiag.transport.run import run_command

if TYPE_CHECKING:
    from slurmdiag.analysis.model import Analysis
    from slurmdiag.snapshot import Node, Snapshot

# What the snapshot, the analysis and the report need is imported after the fan-out (or, from
# attach_job, while it runs: see _load_the_rest): ~0.1 s of a fresh process's imports.

# How long the end of an attach waits for the loading started during the fan-out.
MEANWHILE_JOIN_S = 30.0


@dataclasses.dataclass(frozen=True)
class AttachResult:
    """A snapshot plus what attach wrote and what it had to say on the way."""

    snapshot: Snapshot
    analysis: Analysis
    out_dir: Path | None
    warnings: tuple[str, ...] = ()
    write_error: OutputFailed | None = None  # the files could not be written (see its ``kept``)


def collect_snapshot(
    job_id: str,
    options: AttachOptions = DEFAULTS,
    *,
    transport: Transport | None = None,
    progress: Progress | None = None,
    meanwhile: Callable[[], object] | None = None,
    on_phase: Callable[[str, int | None], None] | None = None,
) -> tuple[Snapshot, list[str]]:
    """Discover the job, fan the collector out, and assemble the snapshot (no analysis yet).

    ``transport``: None for the one ``options.transport`` names (see transport_for).
    ``meanwhile`` runs in a thread during the fan-out (the controller mostly waits on srun); an
    exception there is dropped: whatever it prepares is done again, and fails for real, on use.
    ``on_phase(name, nodes expected or None)`` is told what attach is doing (the live line).
    """
    phase = on_phase or (lambda name, expected: None)
    started = _dt.datetime.now(_dt.timezone.utc)
    phase("finding the job", None)
    # The collector's payload (its sources read and compressed, ~10-15 ms) is made while
    # scontrol answers, not after: srun starts that much sooner.
    payload = threading.Thread(target=_quietly, args=(_make_payload,), daemon=True)
    payload.start()
    ref = job_ref_from_user(str(job_id))
    components = discover_components(ref, run_command)
    check_caller_may_attach(
        components[0], ref, run_command, transport=options.transport, ssh_user=options.ssh.user,
    )
    slurm_job = components[0] if len(components) == 1 else whole_het_job(components)
    fan_out = transport or transport_for(options)
    helper = None
    if meanwhile is not None:
        helper = threading.Thread(
            target=_quietly, args=(meanwhile,), name="slurmdiag-meanwhile", daemon=True
        )
    phase(f"collecting through {fan_out.name}", len(slurm_job.nodes))
    payload.join()  # one payload: not made again by the transport while the thread is at it
    early = EarlyNodes()
    # The helper starts once srun runs: started before, it competed for the GIL with building
    # the step's command and spawning it (srun started 40-80 ms later on 32 nodes).
    fanout = _collect_components(
        fan_out, components, options, progress=progress,
        on_started=None if helper is None else helper.start, on_document=early.add,
    )
    phase("assembling the snapshot", None)
    if helper is not None and helper.is_alive():
        helper.join(MEANWHILE_JOIN_S)  # a race for the same imports would only cost time

    from slurmdiag.analysis.steps import one_world
    from slurmdiag.assemble import flight_recorder_section
    from slurmdiag.logs import findings_from_job_logs, output_quiet_s
    from slurmdiag.slurm.discover import to_job
    from slurmdiag.snapshot import Snapshot

    nodes = tuple(early.node(fanout.nodes[name]) for name in slurm_job.nodes)
    job = to_job(slurm_job)
    job = dataclasses.replace(job, output_quiet_s=output_quiet_s(job))
    snapshot = one_world(Snapshot(
        job=job,
        nodes=nodes,
        slurmdiag_version=__version__,
        created=started.isoformat(timespec="seconds"),
        duration_s=round((_dt.datetime.now(_dt.timezone.utc) - started).total_seconds(), 3),
        transport=fanout.transport,
        options={
            **options.recorded(),
            **({"interrupted": True} if fanout.interrupted else {}),
        },
        log_findings=findings_from_job_logs(job),
        flight_recorder=flight_recorder_section(
            {n: o.document for n, o in fanout.nodes.items() if o.document is not None},
            requested=options.flight_recorder,
        ),
    ))  # the processes of a step beside the training's (a per-node monitor): not its ranks
    return snapshot, list(fanout.warnings)


def _collect_components(
    fan_out: Transport,
    components: list[Any],
    options: AttachOptions,
    *,
    progress: Progress | None,
    on_started: Callable[[], None] | None,
    on_document: Callable[[str, dict[str, Any]], None],
) -> FanoutResult:
    """The fan-out over the job's nodes: one collect, or, for a heterogeneous job's components
    looked at together, one a component (srun adds a step to one component at a time, through
    its leader's id and ``--het-group``), all at once, their outcomes merged in the job's node
    order. ``on_started`` runs once, when the first has started."""

    if len(components) == 1:
        job = components[0]
        return fan_out.collect(job.job_id, job.nodes, options, het_group=job.het_group,
                               progress=progress, on_started=on_started, on_document=on_document)
    total = sum(len(job.nodes) for job in components)
    answered = [0] * len(components)
    lock = threading.Lock()
    started = threading.Event()
    results: list[FanoutResult | BaseException | None] = [None] * len(components)

    def one(index: int, job: Any) -> None:
        def counted(done: int, _expected: int) -> None:
            with lock:
                answered[index] = done
                seen = sum(answered)
            if progress is not None:
                progress(seen, total)

        def first_started() -> None:
            with lock:
                if started.is_set():
                    return
                started.set()
            if on_started is not None:
                on_started()

        try:
            results[index] = fan_out.collect(
                job.job_id, job.nodes, options, het_group=job.het_group, progress=counted,
                on_started=first_started, on_document=on_document)
        except BaseException as exc:  # noqa: BLE001 - raised below, in the caller's thread
            results[index] = exc

    # The leader's component in this thread, where Ctrl-C lands (its srun is asked to stop and
    # what came is kept); the others' sruns end their look by themselves, within the timeout.
    threads = [threading.Thread(target=one, args=(i, job), name=f"slurmdiag-component-{i}",
                                daemon=True) for i, job in enumerate(components) if i]
    for thread in threads:
        thread.start()
    one(0, components[0])
    cut = False
    try:
        for thread in threads:
            thread.join()
    except KeyboardInterrupt:
        cut = True  # a second Ctrl-C: the components that answered, the others as lost
    merged = FanoutResult(interrupted=cut)
    for job, result in zip(components, results, strict=True):
        if isinstance(result, BaseException):
            raise result
        if result is None:  # still running when the second Ctrl-C came
            merged.nodes.update((n, NodeOutcome(n, "timeout", message="attach interrupted"))
                                for n in job.nodes)
            continue
        merged.nodes.update(result.nodes)
        merged.duration_s = max(merged.duration_s, result.duration_s)
        merged.transport = result.transport
        merged.warnings.extend(f"{job.het_job_id}+{job.het_job_offset}: {w}"
                               for w in result.warnings)
        merged.interrupted = merged.interrupted or result.interrupted
    return merged


class EarlyNodes:
    """The snapshot's nodes made from the documents as they arrive (``on_document`` of the
    transport), while the other nodes still work: after the fan-out only the nodes whose
    document came otherwise are made (0.3-0.4 ms a node of a torch job, ~11 ms at 32 nodes,
    that was serial after srun ended)."""

    def __init__(self) -> None:
        self._made: dict[str, tuple[dict[str, Any], Node]] = {}

    def add(self, name: str, document: dict[str, Any]) -> None:
        """Make ``name``'s node now; never raises (the transport's reading goes on): a failure
        here is met again, and reported, when the node is made after the fan-out."""
        try:
            from slurmdiag.assemble import node_from_outcome  # imported by the helper meanwhile

            self._made[name] = (document, node_from_outcome(NodeOutcome(name, "ok", document)))
        except Exception:  # noqa: BLE001, S110 - made again on use, where a failure is data
            pass

    def node(self, outcome: NodeOutcome) -> Node:
        """The outcome's node: the one made early when its document is the very one kept."""
        from slurmdiag.assemble import node_from_outcome

        made = self._made.get(outcome.name)
        if made is not None and outcome.status == "ok" and outcome.document is made[0]:
            return made[1]
        return node_from_outcome(outcome)


def _make_payload() -> None:
    from slurmdiag.transport.collect import collector_payload  # ~20 ms of imports: here too

    collector_payload()


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
    """Write snapshot.json (and report.html) into out_dir; returns the snapshot with its report.

    Files are written by ``safeio.atomic_write`` (mkstemp + fchmod + rename: a planted
    ``.snapshot.json.tmp`` link or file is never followed or re-moded). When a file cannot be
    written (a full disk, a read-only place), the snapshot is kept in the temporary directory
    and ``OutputFailed`` says where (``kept`` is None when even that failed).
    """
    from slurmdiag.safeio import atomic_write

    written = snapshot
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        if report:
            from slurmdiag.report.render import write_snapshot_report

            report_path = out_dir / "report.html"
            with_report = dataclasses.replace(snapshot, report=str(report_path))
            write_snapshot_report(with_report, report_path, analysis, mode=mode)
            written = with_report
        # Same mode as the report: a snapshot holds the same stacks and paths. Compact: json's C
        # encoder runs only without indent (64 ranks: 11 ms instead of 48; `jq .` indents it).
        atomic_write(out_dir / "snapshot.json", written.to_json(), mode)
    except OSError as exc:
        kept = keep_snapshot_elsewhere(written)
        where = f"the snapshot was kept in {kept}" if kept else "the snapshot could not be kept"
        raise OutputFailed(
            f"cannot write the outputs in {out_dir}: {exc.strerror or exc}; {where}",
            kept=kept,
        ) from None
    return written


def keep_snapshot_elsewhere(snapshot: Snapshot) -> str | None:
    """Save the snapshot (mode 0600) in the temporary directory; its path, or None."""
    import tempfile

    try:
        fd, name = tempfile.mkstemp(prefix=f"slurmdiag-{snapshot.job.id}-", suffix=".json")
    except OSError:
        return None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(snapshot.to_json(indent=1))
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(name)
        return None
    return name


def attach_job(
    job_id: str,
    options: AttachOptions = DEFAULTS,
    *,
    out_dir: str | Path | None = None,
    write: bool = True,
    report: bool = True,
    file_mode: int = 0o640,
    transport: Transport | None = None,
    progress: Progress | None = None,
    on_phase: Callable[[str, int | None], None] | None = None,
    on_verdict: Callable[[Snapshot, Analysis], None] | None = None,
) -> AttachResult:
    """The whole attach: collect, analyse, write; used by the CLI and the watchdog.

    ``on_verdict(snapshot, analysis)`` is called once the verdict is known, before the outputs
    are written (the CLI prints its summary then: the report and snapshot.json take ~0.1 s at
    64 ranks, and the user waits for the verdict, not for them)."""
    snapshot, warnings = collect_snapshot(
        str(job_id), options, transport=transport, progress=progress, on_phase=on_phase,
        meanwhile=lambda: _load_the_rest(write and report),
    )
    from slurmdiag.analysis import analyze

    phase = on_phase or (lambda name, expected: None)
    phase("analysing", None)
    analysis = analyze(snapshot)
    snapshot = dataclasses.replace(snapshot, verdicts=tuple(analysis.verdicts))
    if on_verdict is not None:
        on_verdict(snapshot, analysis)
    target: Path | None = None
    write_error: OutputFailed | None = None
    if write:
        target = Path(out_dir) if out_dir is not None else default_out_dir(snapshot.job.id)
        phase("writing the report" if report else "writing the snapshot", None)
        try:
            snapshot = write_outputs(snapshot, target, analysis, report=report, mode=file_mode)
        except OutputFailed as exc:
            write_error = exc  # what was collected is still returned (and kept, see exc.kept)
    return AttachResult(
        snapshot=snapshot, analysis=analysis, out_dir=target, warnings=tuple(warnings),
        write_error=write_error,
    )


def attach(
    job_id: str | int,
    *,
    out_dir: str | Path | None = None,
    write: bool = False,
    report: bool = True,
    samples: int = DEFAULTS.samples,
    interval: float = DEFAULTS.interval_s,
    strace_s: float = DEFAULTS.strace_s,
    timeout_s: float = DEFAULTS.timeout_s,
    native: bool = DEFAULTS.native,
    flight_recorder: bool = DEFAULTS.flight_recorder,
    transport: str = DEFAULTS.transport,
    node_python: str | None = DEFAULTS.node_python,
    node_cache: str = DEFAULTS.node_cache,
    pyspy_path: str | None = None,
    nvidia_smi_path: str | None = None,
    ssh_options: SshSettings | Mapping[str, Any] | None = None,
) -> Snapshot:
    """Attach to a running job and return its analysed Snapshot.

    The keywords are ``AttachOptions``' (whose defaults they show): ``samples`` stack samples
    per rank, ``interval`` seconds apart; ``strace_s`` (0: off); ``timeout_s`` the global
    deadline; ``native`` frames; ``flight_recorder``; ``transport`` "srun" or "ssh" (with
    ``ssh_options``: an ``SshSettings`` or a dict of its fields: user, port, key_filename,
    known_hosts, accept_new); ``node_python`` (None: /usr/bin/python3 if 3.8+, else this
    interpreter when the node has it, else python3); ``node_cache`` ("" = off); ``pyspy_path``
    and ``nvidia_smi_path`` on the nodes.
    With ``write=True`` (or an ``out_dir``) snapshot.json (and report.html unless
    ``report=False``) are written too. Bad values raise ``UsageError``.
    """
    options = AttachOptions(
        samples=samples, interval_s=interval, strace_s=strace_s, timeout_s=timeout_s,
        native=native, flight_recorder=flight_recorder, transport=transport,
        node_python=node_python, node_cache=node_cache,
        pyspy_paths=(pyspy_path,) if pyspy_path else (),
        nvidia_smi_paths=(nvidia_smi_path,) if nvidia_smi_path else (),
        ssh=SshSettings.from_mapping(ssh_options),
    )
    result = attach_job(
        str(job_id), options, out_dir=out_dir, write=write or out_dir is not None, report=report
    )
    if result.write_error is not None:
        raise result.write_error
    return result.snapshot
