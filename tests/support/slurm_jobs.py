"""Submit a small job to the test cluster and wait until it runs; cancel it (and wait) after."""

from __future__ import annotations

import subprocess
import time


def job_state(job: str) -> str:
    return subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True,
                          text=True, check=False).stdout.strip()


def submit_running(*sbatch_args: str, timeout_s: float = 60.0) -> str:
    """``sbatch --parsable ARGS``; returns the job id once squeue shows it RUNNING (or at timeout)."""
    job = subprocess.run(["sbatch", "--parsable", *sbatch_args], capture_output=True, text=True,
                         check=True).stdout.strip()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and job_state(job) != "RUNNING":
        time.sleep(0.5)
    return job


def cancel(job: str, *, wait_s: float = 0.0) -> None:
    """scancel the job; with ``wait_s``, wait until squeue no longer lists it."""
    subprocess.run(["scancel", job], check=False)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and job_state(job):
        time.sleep(0.5)
