"""Find a job and its nodes: build the scontrol argv, run it through a Runner, parse the text."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from slurmdiag.errors import JobNotFound, JobNotRunning, ParseError, SlurmUnavailable, UsageError
from slurmdiag.slurm.parse import (
    ForgedJobRecord,
    JobRef,
    SlurmJob,
    parse_job_id,
    parse_scontrol_job,
    parse_scontrol_job_json,
    parse_squeue_json,
)
from slurmdiag.transport.run import CommandResult, Runner, run_command

if TYPE_CHECKING:
    from slurmdiag.snapshot import Job

SCONTROL_TIMEOUT_S = 20.0

_FINISHED_STATES = {
    "COMPLETED", "COMPLETING", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
    "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "REVOKED", "SPECIAL_EXIT",
}
_WAITING_STATES = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "RESV_DEL_HOLD"}


def job_ref_from_user(text: str) -> JobRef:
    """Accept ``123``, ``123_4`` or ``123+1``; anything else is a usage error (exit 2)."""
    try:
        return parse_job_id(text)
    except ValueError as exc:
        raise UsageError(str(exc), hint="give a job id as squeue prints it, e.g. 123 or 123_4") from None


def scontrol_version_argv() -> list[str]:
    return ["scontrol", "--version"]


def scontrol_job_argv(ref: JobRef, *, as_json: bool = False) -> list[str]:
    if as_json:
        return ["scontrol", "--json", "show", "job", str(ref)]
    return ["scontrol", "show", "job", "-d", "-o", str(ref)]


def parse_slurm_version(text: str) -> tuple[int, int] | None:
    """``slurm 22.05.8`` -> (22, 5); ``slurm-wlm 23.11.4`` too; None when unreadable."""
    match = re.search(r"(\d+)\.(\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _raise_for_scontrol_failure(ref: JobRef, result: CommandResult) -> None:
    if result.start_error is not None:
        raise SlurmUnavailable(f"cannot run scontrol: {result.start_error}")
    if result.timed_out:
        raise SlurmUnavailable(
            f"scontrol did not answer within {SCONTROL_TIMEOUT_S:.0f} s",
            hint="the Slurm controller may be overloaded or down; try again",
        )
    text = (result.stderr + result.stdout).strip()
    if "Invalid job id" in text or "invalid job id" in text.lower():
        raise JobNotFound(f"job {ref} is not known to Slurm")
    if "Unable to contact slurm controller" in text or "Connection refused" in text:
        raise SlurmUnavailable(f"scontrol cannot reach the controller: {text.splitlines()[-1]}")
    raise SlurmUnavailable(f"scontrol failed (exit {result.returncode}): {text[:300]}")


def select_record(ref: JobRef, jobs: list[SlurmJob]) -> SlurmJob:
    """Pick the record the user means among what scontrol printed for ``ref``."""
    if not jobs:
        raise JobNotFound(f"job {ref} is not known to Slurm")
    if ref.array_task is not None:
        for job in jobs:
            if job.array_job_id == ref.base and job.array_task_id == str(ref.array_task):
                return job
    if ref.het_offset is not None:
        for job in jobs:
            if job.het_job_id == ref.base and job.het_job_offset == ref.het_offset:
                return job
    if ref.array_task is None and ref.het_offset is None:
        components = [j for j in jobs if j.het_job_id == ref.base]
        if len(components) > 1:
            forms = ", ".join(f"{ref.base}+{j.het_job_offset}" for j in components)
            raise UsageError(
                f"job {ref} is heterogeneous with {len(components)} components",
                hint=f"name one component: {forms}",
            )
        exact = [j for j in jobs if j.job_id == ref.base]
        if exact:
            return exact[0]
        tasks = [j for j in jobs if j.array_job_id == ref.base]
        if len(tasks) > 1:
            sample = ", ".join(f"{ref.base}_{j.array_task_id}" for j in tasks[:3])
            raise UsageError(
                f"job {ref} is an array with {len(tasks)} tasks", hint=f"name one task: {sample}"
            )
    if len(jobs) == 1:
        return jobs[0]
    raise JobNotFound(f"scontrol printed no record for job {ref}")


def check_attachable(job: SlurmJob, ref: JobRef) -> None:
    """Only a RUNNING job has processes to inspect; say why otherwise, with the job's state."""
    state = (job.state or "UNKNOWN").upper()
    if state == "RUNNING":
        if not job.nodes:
            raise JobNotRunning(f"job {ref} is RUNNING but Slurm lists no nodes for it")
        return
    reason = f" (reason: {job.reason})" if job.reason and job.reason != "None" else ""
    if state in _WAITING_STATES:
        raise JobNotRunning(
            f"job {ref} is {state}{reason}: it has no processes yet",
            hint="wait until squeue shows it RUNNING (R), then attach",
        )
    if state == "SUSPENDED":
        raise JobNotRunning(f"job {ref} is SUSPENDED", hint="resume it (scontrol resume) first")
    if state in _FINISHED_STATES:
        raise JobNotRunning(
            f"job {ref} has ended: {state}{reason}",
            hint=f"look at its logs or 'sacct -j {ref.base}'; nothing is left to attach to",
        )
    raise JobNotRunning(f"job {ref} is {state}{reason}")


def to_job(job: SlurmJob) -> Job:
    """The snapshot's view of a Slurm job record."""
    from slurmdiag.snapshot import Job  # after the fan-out: the snapshot module is heavy to load

    return Job(
        id=job.job_id,
        state=job.state or "UNKNOWN",
        user=job.user,
        name=job.name,
        nodes=tuple(job.nodes),
        ntasks=job.num_tasks,
        partition=job.partition,
        submit_time=job.submit_time,
        start_time=job.start_time,
        run_time=job.run_time,
        time_limit=job.time_limit,
        work_dir=job.work_dir,
        stdout=job.stdout,
        stderr=job.stderr,
        array_job_id=job.array_job_id,
        array_task_id=job.array_task_id,
        het_job_id=job.het_job_id,
        het_job_offset=None if job.het_job_offset is None else str(job.het_job_offset),
    )


def slurm_version(runner: Runner = run_command) -> tuple[int, int] | None:
    result = runner(scontrol_version_argv(), SCONTROL_TIMEOUT_S)
    if result.start_error is not None:
        raise SlurmUnavailable(f"cannot run scontrol: {result.start_error}")
    return parse_slurm_version(result.stdout) if result.ok else None


def squeue_job_json_argv(ref: JobRef) -> list[str]:
    return ["squeue", "--json", "--jobs", str(ref)]


def _jobs_from_squeue_json(ref: JobRef, runner: Runner, forged: ForgedJobRecord) -> list[SlurmJob]:
    """The job from ``squeue --json``, whose values a job's text cannot forge; else refuse."""
    result = runner(squeue_job_json_argv(ref), SCONTROL_TIMEOUT_S)
    if result.ok:
        try:
            jobs = parse_squeue_json(result.stdout)
        except (ParseError, ValueError):
            jobs = []
        if jobs:
            return jobs
    raise ForgedJobRecord(
        f"job {ref}: {forged.message}, and 'squeue --json' gave no record to read instead",
        hint="rename the job (no ' Key=' text in its name or paths) or use Slurm 22.05+",
    )


def discover_job(ref: JobRef, runner: Runner = run_command) -> SlurmJob:
    """Ask Slurm about ``ref`` (JSON on 23.02+, text otherwise) and check it can be attached to."""
    version = slurm_version(runner)
    jobs: list[SlurmJob] | None = None
    if version is not None and version >= (23, 2):
        result = runner(scontrol_job_argv(ref, as_json=True), SCONTROL_TIMEOUT_S)
        if result.ok:
            try:
                jobs = parse_scontrol_job_json(result.stdout)
            except (ParseError, ValueError):
                jobs = None  # fall back to the text form below
    if jobs is None:
        result = runner(scontrol_job_argv(ref), SCONTROL_TIMEOUT_S)
        if not result.ok:
            _raise_for_scontrol_failure(ref, result)
        try:
            jobs = parse_scontrol_job(result.stdout)
        except ForgedJobRecord as forged:
            jobs = _jobs_from_squeue_json(ref, runner, forged)
    job = select_record(ref, jobs)
    check_attachable(job, ref)
    return job
