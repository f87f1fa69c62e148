"""Read the job's own log files (when this user can) for NCCL network choice and timeouts."""

from __future__ import annotations

import os

from slurmdiag.parsers.job_log import parse_python_tracebacks, parse_srun_task_exits
from slurmdiag.parsers.nccl_log import parse_nccl_log
from slurmdiag.snapshot import Job, LogFinding

# NCCL prints its network choice at start-up and the watchdog its timeouts at the end: read the
# head and the tail of a log, never a multi-GB file whole.
HEAD_BYTES = 2 * 1024 * 1024
TAIL_BYTES = 4 * 1024 * 1024


def read_head_and_tail(path: str, head: int = HEAD_BYTES, tail: int = TAIL_BYTES) -> str | None:
    """Return the first ``head`` and last ``tail`` bytes of a file as text; None if unreadable."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size <= head + tail:
                data = fh.read()
            else:
                first = fh.read(head)
                fh.seek(size - tail)
                last = fh.read(tail)
                # Cut the partial first line of the tail so no line is parsed half.
                last = last.split(b"\n", 1)[-1]
                data = first + b"\n" + last
    except OSError:
        return None
    return data.decode(errors="replace")


def findings_from_job_logs(job: Job) -> tuple[LogFinding, ...]:
    findings: list[LogFinding] = []
    for path in dict.fromkeys(p for p in (job.stdout, job.stderr) if p):
        text = read_head_and_tail(path)
        if text:
            findings.extend(parse_nccl_log(text, source=path))
            findings.extend(parse_srun_task_exits(text, source=path))
            findings.extend(parse_python_tracebacks(text, source=path))
    return tuple(findings)
