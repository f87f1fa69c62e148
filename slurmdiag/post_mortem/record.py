"""Slurm's record of a finished job: sacct (JSON, else text), else what slurmctld still holds."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from slurmdiag.errors import JobNotFound, JobNotRunning, ParseError, SlurmUnavailable
from slurmdiag.slurm.parse import JobRef, parse_scontrol_job
from slurmdiag.slurm.sacct import (
    UNFINISHED_STATES,
    AcctRecord,
    build_sacct_argv,
    build_scontrol_job_argv,
    json_exit_codes_unreliable,
    overlay_exit_codes,
    parse_sacct_json,
    parse_sacct_parsable,
    record_from_scontrol,
)
from slurmdiag.transport.run import Runner

SLURM_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class SlurmRecord:
    """The job and its steps as Slurm remembers them, and where that came from."""

    job: AcctRecord
    steps: tuple[AcctRecord, ...] = ()
    source: str = "sacct --json"  # sacct --json | sacct --parsable2 | scontrol | none
    notes: tuple[str, ...] = ()
    raw: dict[str, str] = field(default_factory=dict)  # scontrol's fields, when that was the source
    # A heterogeneous job named by its plain id: every component's own record, leader first
    # (``job`` is then the whole job: the leader's, with every component's nodes and tasks).
    components: tuple[AcctRecord, ...] = ()


def _accounting_problem(text: str) -> str | None:
    """Why sacct cannot answer at all (no accounting, slurmdbd down), or None."""
    lowered = text.lower()
    if "accounting storage is disabled" in lowered:
        return "Slurm accounting is not enabled here (sacct: accounting storage is disabled)"
    if ("persistent connection" in lowered or "talking to the database" in lowered
            or ("slurmdbd" in lowered and "connect" in lowered)):
        return f"slurmdbd does not answer ({text.strip().splitlines()[-1][:160]})"
    return None


def _from_sacct(ref: JobRef, runner: Runner, notes: list[str]) -> tuple[list[AcctRecord], str] | None:
    """sacct's records for the job, or None when there is no accounting to ask."""
    job_id = str(ref)
    result = runner(build_sacct_argv(job_id, as_json=True), SLURM_TIMEOUT_S)
    if result.start_error is not None:
        notes.append(f"sacct not available: {result.start_error}")
        return None
    text = (result.stderr + result.stdout)
    problem = _accounting_problem(text)
    if problem:
        notes.append(problem)
        return None
    if result.ok:
        try:
            records = parse_sacct_json(result.stdout)
        except ParseError as exc:
            notes.append(f"sacct --json unreadable ({exc.message}); used the text output")
        else:
            if json_exit_codes_unreliable(result.stdout):
                text_result = runner(build_sacct_argv(job_id, as_json=False), SLURM_TIMEOUT_S)
                if text_result.ok:
                    records = overlay_exit_codes(records, parse_sacct_parsable(text_result.stdout))
                    notes.append("exit codes from sacct --parsable2: this Slurm's sacct --json "
                                 "reports 0 for failed steps")
            return records, "sacct --json"
    elif "json" not in text.lower() and "unrecognized" not in text.lower():
        notes.append(f"sacct --json failed: {text.strip()[:200]}")
    result = runner(build_sacct_argv(job_id, as_json=False), SLURM_TIMEOUT_S)
    if not result.ok:
        notes.append(f"sacct failed: {(result.stderr + result.stdout).strip()[:200]}")
        return None
    return parse_sacct_parsable(result.stdout), "sacct --parsable2"


def _whole_het_job(components: list[AcctRecord]) -> AcctRecord:
    """One record for a heterogeneous job's components: the leader's, with every component's
    nodes and tasks, named by the leader's id (the whole job, no offset)."""
    from slurmdiag.hostlist import compress_hostlist, expand_hostlist

    nodes: list[str] = []
    for component in components:
        try:
            nodes += expand_hostlist(component.nodes or "")
        except ValueError:
            nodes.append(component.nodes or "")
    tasks = [c.ntasks for c in components]
    leader = components[0]
    return replace(leader, het_job_id=None, het_offset=None,
                   nodes=compress_hostlist(list(dict.fromkeys(n for n in nodes if n))) or None,
                   ntasks=sum(t for t in tasks if t) if all(tasks) else None)


def _select(ref: JobRef, records: list[AcctRecord]) -> tuple[AcctRecord, tuple[AcctRecord, ...],
                                                               tuple[AcctRecord, ...]] | None:
    """(the job, its steps, a het job's components) of what sacct listed for ``ref``."""
    if ref.array_task is None:
        components = sorted((r for r in records if r.step is None and r.het_job_id == ref.base
                             and r.het_offset is not None
                             and ref.het_offset in (None, r.het_offset)),
                            key=lambda r: r.het_offset or 0)
        labels = {c.label for c in components}
        steps = tuple(r for r in records if r.step is not None and r.label in labels)
        if len(components) > 1:  # the plain id: the whole job, every component's steps
            return _whole_het_job(components), steps, tuple(components)
        if components and ref.het_offset is not None:
            return components[-1], steps, ()
    job_id = str(ref)
    jobs = [r for r in records if r.step is None and r.job_id == job_id]
    if not jobs:
        jobs = [r for r in records if r.step is None]
    if not jobs:
        return None
    job = jobs[-1]  # a reused id (a re-created cluster) lists the latest last
    steps = tuple(r for r in records if r.step is not None and r.job_id == job.job_id)
    return job, steps, ()


def _from_scontrol(ref: JobRef, runner: Runner) -> SlurmRecord | None:
    result = runner(build_scontrol_job_argv(str(ref)), SLURM_TIMEOUT_S)
    if result.start_error is not None:
        raise SlurmUnavailable(f"cannot run scontrol: {result.start_error}")
    if not result.ok:
        text = (result.stderr + result.stdout).strip()
        if "invalid job id" in text.lower():
            return None
        if "Unable to contact" in text or "Connection refused" in text:
            raise SlurmUnavailable(f"scontrol cannot reach the controller: {text.splitlines()[-1]}")
        return None
    jobs = parse_scontrol_job(result.stdout)
    if not jobs:
        return None
    return SlurmRecord(job=record_from_scontrol(jobs[0].raw), source="scontrol", raw=dict(jobs[0].raw))


def read_slurm_record(ref: JobRef, runner: Runner) -> SlurmRecord:
    """Ask sacct, then slurmctld; a job neither knows is JobNotFound, a live one JobNotRunning."""
    notes: list[str] = []
    found = _from_sacct(ref, runner, notes)
    record: SlurmRecord | None = None
    if found is not None:
        records, source = found
        selected = _select(ref, records)
        if selected is not None:
            job, steps, components = selected
            record = SlurmRecord(job=job, steps=steps, source=source, notes=tuple(notes),
                                 components=components)
    if record is None:
        held = _from_scontrol(ref, runner)
        if held is not None:
            notes.append("Slurm's record from slurmctld's memory (kept for MinJobAge after the end)"
                         + ("" if found is None else "; sacct had no record of it yet"))
            record = SlurmRecord(job=held.job, source="scontrol", notes=tuple(notes), raw=held.raw)
    if record is None:
        hint = ("check the id with 'sacct -X -S now-7days'" if found is not None else
                "without accounting, slurmctld forgets a job MinJobAge (default 5 min) after it "
                "ends; pass its log with --log FILE")
        raise JobNotFound(f"job {ref} is not known to Slurm (never ran, or forgotten)", hint=hint)
    if record.job.state in UNFINISHED_STATES:
        raise JobNotRunning(
            f"job {ref} has not finished: it is {record.job.state}",
            hint=f"'slurmdiag attach {ref}' inspects a running job; postmortem is for ended ones",
        )
    return record
