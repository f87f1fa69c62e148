"""Attaching to another user's job: refused before any step, naming the owner and what is needed.

Needs root (to create two users and submit as one of them with sbatch --uid). Both users run the
worktree's code with the system python3 and the venv's site-packages (the venv's own interpreter
may live under /root)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest
from support.slurm_jobs import cancel, submit_running

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create users and sbatch --uid"),
]

REPO = Path(__file__).resolve().parents[2]
OWNER, OTHER = "sdtestowner", "sdtestother"


@pytest.fixture(scope="module")
def users():
    created = []
    for name in (OWNER, OTHER):
        try:
            pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "-M", "-s", "/bin/sh", name], check=True)
            created.append(name)
    yield
    for name in created:
        subprocess.run(["userdel", name], check=False)


@pytest.fixture
def owners_job(local_cluster, users):
    job = submit_running(f"--uid={OWNER}", f"--gid={OWNER}", "--chdir=/tmp", "-o", "/dev/null",
                         "-N1", "--time=10", "-J", "slurmdiag-other-user", "--wrap",
                         "srun sleep 300")
    yield job
    cancel(job, wait_s=60)  # the users are removed after: let the job's processes end first


@pytest.fixture
def shared_dir():
    """A directory both users may write in (pytest's own tmp_path is root's, mode 0700)."""
    path = Path(tempfile.mkdtemp(prefix="slurmdiag-other-user-"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def attach_as(user: str, job: str, tmp_path: Path) -> subprocess.CompletedProcess:
    python = "/usr/bin/python3"
    if not Path(python).exists() or sys.version_info[:2] != (3, 11):
        pytest.skip("needs a system python3 of the venv's version")
    path = f"{REPO}{os.pathsep}{sysconfig.get_paths()['purelib']}"
    out = tmp_path / user
    return subprocess.run(
        ["su", user, "-c", (f"cd /tmp && {python} -m slurmdiag attach {job} --samples 1 "
         f"--strace 0 --no-report --out {out}")],
        capture_output=True, text=True, timeout=120, check=False,
        env=dict(os.environ, PYTHONPATH=path),
    )


def test_another_users_job_is_refused_with_what_is_needed(owners_job, shared_dir):
    tmp_path = shared_dir
    # WHEN another (non-root) user attaches to the owner's running job
    refused = attach_as(OTHER, owners_job, tmp_path)
    # THEN exit 11, one error line naming the owner, and how to run it instead; no step was tried
    assert refused.returncode == 11, refused.stderr
    assert refused.stderr.splitlines() == [
        (f"error: job {owners_job} belongs to {OWNER}, not to {OTHER}: Slurm adds a step to a job "
        "only for its owner, root or SlurmUser, and only they may trace its ranks"),
        f"hint: run it as {OWNER} (sudo -u {OWNER} slurmdiag attach {owners_job}) or as root",
    ]
    assert "Access/permission denied" not in refused.stderr
    # AND the owner is let through (the check refuses nobody it should not)
    allowed = attach_as(OWNER, owners_job, tmp_path)
    assert allowed.returncode == 0, allowed.stderr
