"""Hostile jobs on the real cluster: output to /dev/zero, a job name that forges fields (issue 12)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster

SLURMDIAG = [sys.executable, "-m", "slurmdiag.cli"]
MEMORY_LIMIT = 2 << 30  # the old code read /dev/zero until it ran out of memory


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _submit(*args: str) -> str:
    return subprocess.run(["sbatch", "--parsable", "-N1", *args, "--wrap", "sleep 300"],
                          capture_output=True, text=True, check=True).stdout.strip()


def _wait_running(job: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        state = subprocess.run(["squeue", "-h", "-o", "%T", "-j", job], capture_output=True,
                               text=True, check=False).stdout.strip()
        if state == "RUNNING":
            return
        assert time.monotonic() < deadline, f"job {job} not running: {state!r}"
        time.sleep(0.5)


def _attach(job: str, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SLURMDIAG, "attach", job, "--json", "--no-report", "--samples", "1", "--strace", "0",
         "--out", str(out)],
        capture_output=True, text=True, timeout=120, preexec_fn=_limit_memory, check=False,
    )


def test_attach_to_a_job_writing_to_dev_zero_is_bounded(local_cluster, tmp_path: Path) -> None:
    # GIVEN a running job whose StdOut and StdErr are /dev/zero
    job = _submit("--output=/dev/zero", "--error=/dev/zero")
    try:
        _wait_running(job)
        # WHEN slurmdiag attaches under a 2 GiB address-space limit
        started = time.monotonic()
        result = _attach(job, tmp_path)
        # THEN it completes at once, reads nothing from /dev/zero, and the node answered
        assert result.returncode == 0, result.stderr
        assert time.monotonic() - started < 90
        snapshot = json.loads(result.stdout)
        assert snapshot["job"]["stdout"] == "/dev/zero"
        assert snapshot["log_findings"] == []
        assert {n["status"] for n in snapshot["nodes"]} == {"ok"}
    finally:
        subprocess.run(["scancel", job], check=False)


def test_a_job_name_that_forges_fields_does_not_change_the_job(local_cluster, tmp_path: Path) -> None:
    # GIVEN a job named to look like 'UserId=nobody StdOut=/etc/shadow' in scontrol's one-liner
    name = "x UserId=nobody(65534) StdOut=/etc/shadow"
    job = _submit("-J", name, f"--output={tmp_path}/out-%j.txt")
    try:
        _wait_running(job)
        # WHEN slurmdiag attaches
        result = _attach(job, tmp_path / "d")
        # THEN the job is read from squeue's JSON: its real user, its whole name, its real log
        assert result.returncode == 0, result.stderr
        snapshot = json.loads(result.stdout)
        assert snapshot["job"]["user"] == "root"
        assert snapshot["job"]["name"] == name
        assert snapshot["job"]["stdout"] != "/etc/shadow"
        assert snapshot["job"]["stdout"].startswith(str(tmp_path))
        assert {n["status"] for n in snapshot["nodes"]} == {"ok"}
    finally:
        subprocess.run(["scancel", job], check=False)


RANK_SCRIPT = """import os
def wait_here():
    open({ready!r}, "w").close(); os.read(os.pipe()[0], 1)  # {marker}
wait_here()
"""


def test_the_report_shows_source_lines_of_the_jobs_own_files_only(local_cluster, tmp_path: Path) -> None:
    # GIVEN a job of root with two ranks: rank 0 runs a file of root, rank 1 a file of another
    # user (world-readable, as a neighbour's planted "source file" would be)
    scripts = []
    for rank, owner in ((0, 0), (1, 65534)):
        script = tmp_path / f"rank{rank}.py"
        script.write_text(RANK_SCRIPT.format(ready=str(tmp_path / f"ready{rank}"),
                                             marker=f"MARKER_OF_RANK_{rank}"))
        os.chown(script, owner, owner)
        scripts.append(script)
    batch = tmp_path / "job.sh"
    batch.write_text("#!/bin/sh\nexport WORLD_SIZE=2\n"
                     + "".join(f"RANK={r} {sys.executable} -I -S {s} &\n" for r, s in enumerate(scripts))
                     + "wait\n")
    job = subprocess.run(["sbatch", "--parsable", "-N1", "-o", str(tmp_path / "out"), str(batch)],
                         capture_output=True, text=True, check=True).stdout.strip()
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"ready{r}").exists() for r in (0, 1)):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        # WHEN slurmdiag attaches and writes its report
        result = subprocess.run(
            [*SLURMDIAG, "attach", job, "--samples", "1", "--strace", "0", "--out",
             str(tmp_path / "d")], capture_output=True, text=True, timeout=120, check=False)
        assert result.returncode == 0, result.stderr
        page = (tmp_path / "d" / "report.html").read_text()
        # THEN both frames are in the report, but only the job user's own file gave its line
        assert f"{scripts[0]}:3" in page and f"{scripts[1]}:3" in page
        assert "MARKER_OF_RANK_0" in page
        assert "MARKER_OF_RANK_1" not in page
    finally:
        subprocess.run(["scancel", job], check=False)
