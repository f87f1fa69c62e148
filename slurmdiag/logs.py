"""Read the job's own log files (when this user can) for NCCL network choice and timeouts."""

from __future__ import annotations

from slurmdiag.parsers.job_log import parse_python_tracebacks, parse_srun_task_exits
from slurmdiag.parsers.nccl_log import parse_nccl_log
from slurmdiag.safeio import job_uid, read_job_head_and_tail
from slurmdiag.snapshot import Job, LogFinding

# NCCL prints its network choice at start-up and the watchdog its timeouts at the end: read the
# head and the tail of a log, never a multi-GB file whole.
HEAD_BYTES = 2 * 1024 * 1024
TAIL_BYTES = 4 * 1024 * 1024


def read_head_and_tail(
    path: str, *, owner_uid: int | None, head: int = HEAD_BYTES, tail: int = TAIL_BYTES
) -> str | None:
    """The first ``head`` and last ``tail`` bytes of a job's log as text; None when unreadable
    or refused by the job-named-path rule (``safeio``: a regular file of the job's user, no
    /dev/zero, FIFO, symlink or file of someone else)."""
    try:
        data = read_job_head_and_tail(path, owner_uid=owner_uid, head=head, tail=tail)
    except OSError:
        return None
    return data.decode(errors="replace")


def findings_from_job_logs(job: Job) -> tuple[LogFinding, ...]:
    findings: list[LogFinding] = []
    owner = job_uid(job.user)
    for path in dict.fromkeys(p for p in (job.stdout, job.stderr) if p):
        text = read_head_and_tail(path, owner_uid=owner)
        if text:
            findings.extend(parse_nccl_log(text, source=path))
            findings.extend(parse_srun_task_exits(text, source=path))
            findings.extend(parse_python_tracebacks(text, source=path))
    return tuple(findings)
