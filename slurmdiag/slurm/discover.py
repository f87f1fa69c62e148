"""Find a job and its nodes: build the scontrol argv, run it through a Runner, parse the text."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from slurmdiag.errors import (
    JobNotFound,
    JobNotRunning,
    NotPermitted,
    ParseError,
    SlurmUnavailable,
    UsageError,
)
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


_STEP_ID_RE = re.compile(r"^\s*(\d+(?:_\d+|\+\d+)?)\.([A-Za-z0-9_+-]+)\s*$")


def job_ref_from_user(text: str) -> JobRef:
    """Accept ``123``, ``123_4`` or ``123+1``; anything else is a usage error (exit 2).

    A step id (``123.0``, ``123.batch``, as sacct prints them) gets its own message naming the job.
    """
    step = _STEP_ID_RE.match(text)
    if step:
        raise UsageError(
            f"{text.strip()} is step {step.group(2)} of job {step.group(1)}: "
            "slurmdiag attaches to a whole job, not to one step",
            hint=f"attach to the job: slurmdiag attach {step.group(1)}",
        )
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


NO_CONFIG_HINT = (
    "set SLURM_CONF to this cluster's slurm.conf (e.g. export SLURM_CONF=/etc/slurm/slurm.conf), "
    "or run where Slurm's configuration (or its DNS SRV records) is available"
)
# A fatal line that says the Slurm tools found no configuration at all.
_NO_CONFIG_MARKERS = ("configuration source", "configuration file", "slurm.conf")


def slurm_fatal(text: str) -> SlurmUnavailable | None:
    """The one error a Slurm tool's ``fatal:`` line stands for (pure), or None without one.

    ``scontrol: fatal: Could not establish a configuration source`` (no SLURM_CONF and no DNS SRV
    records) follows three ``error:`` lines; only the fatal one is worth a line, and its hint.
    """
    for line in text.splitlines():
        tool, sep, rest = line.partition(": fatal: ")
        if sep:
            message = f"{tool.strip() or 'slurm'}: {rest.strip()}"
            no_config = any(m in rest.lower() for m in _NO_CONFIG_MARKERS)
            return SlurmUnavailable(message, hint=NO_CONFIG_HINT if no_config else None)
    return None


def check_slurm_conf(environ: Mapping[str, str] | None = None) -> None:
    """A SLURM_CONF naming no file makes every Slurm tool retry for 60 s before its fatal line:
    say so at once."""
    path = (os.environ if environ is None else environ).get("SLURM_CONF")
    if path and not os.path.isfile(path):
        raise SlurmUnavailable(
            f"SLURM_CONF={path} is not a file (the Slurm tools would retry for 60 s, then fail)",
            hint=NO_CONFIG_HINT,
        )


def _raise_for_scontrol_failure(ref: JobRef, result: CommandResult) -> None:
    if result.start_error is not None:
        raise SlurmUnavailable(f"cannot run scontrol: {result.start_error}")
    if result.timed_out:
        raise SlurmUnavailable(
            f"scontrol did not answer within {SCONTROL_TIMEOUT_S:.0f} s",
            hint="the Slurm controller may be overloaded or down; try again",
        )
    text = (result.stderr + result.stdout).strip()
    fatal = slurm_fatal(text)
    if fatal is not None:
        raise fatal
    if "Invalid job id" in text or "invalid job id" in text.lower():
        raise JobNotFound(f"job {ref} is not known to Slurm")
    if "Unable to contact slurm controller" in text or "Connection refused" in text:
        raise SlurmUnavailable(f"scontrol cannot reach the controller: {text.splitlines()[-1]}")
    last = text.splitlines()[-1] if text else "(no output)"
    raise SlurmUnavailable(f"scontrol failed (exit {result.returncode}): {last[:300]}")


def select_record(ref: JobRef, jobs: list[SlurmJob], *, raw_id: bool = False) -> SlurmJob:
    """Pick the record the user means among what scontrol printed for ``ref``. ``raw_id``: the
    id is a job id as squeue's %A prints it (the watchdog's), so the record with that very job
    id is meant, even where it is also its array's id."""
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
        # An array's id is also the job id of one of its tasks (Slurm gives the array the id
        # of its first record, which ends as its last task): `attach 1` with tasks 1_0 and 1_1
        # running meant the array, not task 1_1 alone.
        tasks = [j for j in jobs if j.array_job_id == ref.base]
        exact = [j for j in jobs if j.job_id == ref.base]
        if raw_id and exact:
            return exact[0]
        if len(tasks) > 1:
            running = [j for j in tasks if (j.state or "").upper() == "RUNNING"]
            if len(running) == 1:
                return running[0]
            named = sorted(running or tasks, key=lambda j: (len(j.array_task_id or ""),
                                                             j.array_task_id or ""))
            sample = ", ".join(f"{ref.base}_{j.array_task_id}" for j in named[:3])
            alive = f", {len(running)} running" if running else ""
            raise UsageError(
                f"job {ref} is an array with {len(tasks)} tasks{alive}",
                hint=f"name one task: {sample}",
            )
        if exact:
            return exact[0]
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


def parse_slurm_user(config_text: str) -> str | None:
    """``SlurmUser = slurm(64030)`` in ``scontrol show config`` -> ``slurm`` (pure)."""
    match = re.search(r"^SlurmUser\s*=\s*([^\s(]+)", config_text, re.MULTILINE)
    return match.group(1) if match else None


def caller_name() -> str:
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def check_caller_may_attach(
    job: SlurmJob,
    ref: JobRef,
    runner: Runner = run_command,
    *,
    caller: str | None = None,
    uid: int | None = None,
    transport: str = "srun",
    ssh_user: str | None = None,
) -> None:
    """Refuse, before any step, a job the caller cannot inspect: Slurm adds a step only for the
    job's owner, root or SlurmUser, and ptrace (py-spy, strace) needs the owner or root."""
    uid = os.getuid() if uid is None else uid
    caller = caller or caller_name()
    owner = job.user
    if owner is None or uid == 0:
        return
    if transport == "ssh":
        login = ssh_user or caller
        if login in (owner, "root"):
            return
        raise NotPermitted(
            f"job {ref} belongs to {owner}; over ssh as {login} py-spy cannot trace its ranks",
            hint=f"log in as the owner or root: --ssh-user {owner} (with that user's key)",
        )
    if caller == owner:
        return
    config = runner(["scontrol", "show", "config"], SCONTROL_TIMEOUT_S)
    if config.ok and parse_slurm_user(config.stdout) == caller:
        return  # SlurmUser may add steps to any job
    raise NotPermitted(
        f"job {ref} belongs to {owner}, not to {caller}: Slurm adds a step to a job only for its "
        "owner, root or SlurmUser, and only they may trace its ranks",
        hint=f"run it as {owner} (sudo -u {owner} slurmdiag attach {ref}) or as root",
    )


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


def discover_job(ref: JobRef, runner: Runner = run_command, *, raw_id: bool = False) -> SlurmJob:
    """Ask Slurm about ``ref`` (JSON on 23.02+, text otherwise) and check it can be attached to.
    ``raw_id``: see select_record."""
    job = select_record(ref, _job_records(ref, runner), raw_id=raw_id)
    check_attachable(job, ref)
    return job


def discover_components(ref: JobRef, runner: Runner = run_command) -> list[SlurmJob]:
    """The records attach looks at for ``ref``: the one job, or, for a heterogeneous job named
    by its plain id, every component, leader first (a step of `srun --het-group=0,1` spans them:
    its ranks live in both, and one look sees them all). Components sharing a node cannot be
    looked at together (each node's collector looks for one job's processes): named by the
    usage error select_record gives, to attach one at a time."""
    jobs = _job_records(ref, runner)
    if ref.array_task is None and ref.het_offset is None:
        components = sorted((j for j in jobs if j.het_job_id == ref.base
                             and j.het_job_offset is not None),
                            key=lambda j: j.het_job_offset or 0)
        nodes = [n for j in components for n in j.nodes]
        if len(components) > 1 and len(nodes) == len(set(nodes)):
            for job in components:
                check_attachable(job, JobRef(ref.base, het_offset=job.het_job_offset))
            return components
    job = select_record(ref, jobs)
    check_attachable(job, ref)
    return [job]


def whole_het_job(components: list[SlurmJob]) -> SlurmJob:
    """One record for a heterogeneous job's components looked at together: the leader's, with
    every component's nodes and tasks, and no component offset (the whole job)."""
    leader = components[0]
    tasks = [j.num_tasks for j in components]
    return replace(
        leader,
        nodes=tuple(n for j in components for n in j.nodes),
        num_nodes=sum(len(j.nodes) for j in components),
        num_tasks=sum(t for t in tasks if t is not None) if None not in tasks else None,
        het_job_offset=None,
    )


def _job_records(ref: JobRef, runner: Runner) -> list[SlurmJob]:
    """Every record scontrol prints for ``ref`` (a het job's components, an array's tasks)."""
    check_slurm_conf()
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
    return jobs
