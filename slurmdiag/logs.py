"""Read the job's own log files (when this user can) for NCCL network choice and timeouts, and
how long ago they were last written."""

from __future__ import annotations

import os
import time

from slurmdiag.parsers.job_log import parse_python_tracebacks, parse_srun_task_exits
from slurmdiag.parsers.nccl_log import parse_nccl_log
from slurmdiag.safeio import job_uid, open_job_file, read_job_head_and_tail
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


def output_quiet_s(job: Job) -> float | None:
    """Seconds since the job last wrote to its stdout or stderr file (the latest of the two
    that can be read under the job-named-path rule), now; None when
    neither can. A rank's prints may sit in its own buffer (Python's stdout to a file is
    block-buffered without ``-u`` or ``flush=True``): a fact about the file, not about the job."""
    owner = job_uid(job.user)
    latest = None
    for path in dict.fromkeys(p for p in (job.stdout, job.stderr) if p):
        try:
            fd = open_job_file(path, owner_uid=owner)
        except OSError:
            continue
        try:
            mtime = os.fstat(fd).st_mtime
        finally:
            os.close(fd)
        latest = mtime if latest is None else max(latest, mtime)
    if latest is None:
        return None
    return round(max(0.0, time.time() - latest), 1)
