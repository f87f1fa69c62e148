"""`slurmdiag doctor` on the real local cluster: one real step, real tools, real failures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.slurm_jobs import cancel, submit_running

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
# `nvidia-smi -L` of 8 H100s (tests/fixtures/nvsmi_replay/list_h100x8/L.txt, from shared/fixtures).
REPLAY = REPO / "tests" / "fixtures" / "nvsmi_replay" / "list_h100x8"


def doctor(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slurmdiag", "doctor", *args],
                          capture_output=True, text=True, timeout=180, cwd=REPO, env=env,
                          check=False)


def lines_of(out: str, check: str) -> list[str]:
    return [line for line in out.splitlines() if f": {check}: " in line]


@pytest.fixture
def sleeping_job(local_cluster, tmp_path):
    job = submit_running("-N2", "--ntasks-per-node=1", "--time=10", f"--output={tmp_path}/out",
                         "-J", "slurmdiag-doctor-test", "--wrap", "srun sleep 300")
    yield job
    cancel(job)


def test_doctor_into_a_job_checks_every_node_through_one_step(sleeping_job, tmp_path, py_spy):
    # GIVEN a running 2-node job of ours, nvidia-smi (the stand-in) replaying 8 GPUs
    env = dict(os.environ, SLURMDIAG_FAKE_NVSMI_DIR=str(REPLAY))
    result = doctor(sleeping_job, "--report-dir", str(tmp_path / "reports"), "--py-spy", py_spy,
                    "--nvidia-smi", str(REPO / "tests/tools/nvidia-smi"), env=env)
    out = result.stdout
    # THEN the step ran with --overlap --gres=gpu:0 on both nodes, and each node check is a line
    (srun,) = lines_of(out, "srun")
    assert srun.startswith("ok") and "--overlap --gres=gpu:0 ran on 2/2" in srun
    for name in ("node python", "py-spy", "strace", "ptrace", "trace test", "node cache",
                 "slurm client",
                 "squeue --json", "report dir", "state dir"):
        assert lines_of(out, name) and lines_of(out, name)[0].split()[0] == "ok", (name, out)
    assert "8 GPU(s)" in lines_of(out, "nvidia-smi")[0]
    # The one warning here is real: this host is a docker container (/.dockerenv).
    statuses = {line.split()[0] for line in out.splitlines()}
    assert "failed" not in statuses
    assert result.returncode == (1 if "warning" in statuses else 0), out
    assert result.stderr == ""


def test_doctor_names_a_missing_py_spy_and_an_unwritable_report_dir(sleeping_job):
    # GIVEN a py-spy path that does not exist on the nodes and a report dir nobody can create
    result = doctor(sleeping_job, "--py-spy", "/nonexistent/bin/py-spy",
                    "--report-dir", "/proc/slurmdiag-doctor-test")
    out = result.stdout
    # THEN both are failed lines with their fix, and the exit code is the worst: 12
    (pyspy,) = lines_of(out, "py-spy")
    assert pyspy.startswith("failed") and "/nonexistent/bin/py-spy does not exist" in pyspy
    assert "fix: " in pyspy
    (report,) = lines_of(out, "report dir")
    assert report.startswith("failed  controller:") and "cannot be created in /proc" in report
    assert result.returncode == 12
    # The real attach trial still runs with the strace that is there.
    (trial,) = lines_of(out, "trace test")
    assert trial.startswith("ok") and "strace attached" in trial and "py-spy" not in trial


def test_doctor_on_nodes_takes_a_tiny_allocation(local_cluster, tmp_path):
    result = doctor("--nodes", "node[001-002]", "--report-dir", str(tmp_path))
    (srun,) = lines_of(result.stdout, "srun")
    assert srun.startswith("ok      node[001-002]:") and "ran on 2/2" in srun, result.stdout
    assert result.returncode in (0, 1)


def test_doctor_unwritable_node_cache_is_a_warning(local_cluster, tmp_path):
    result = doctor("--nodes", "node001", "--node-cache", "/proc", "--report-dir", str(tmp_path))
    (cache,) = lines_of(result.stdout, "node cache")
    assert cache.startswith("warning") and "/proc is not writable" in cache
    assert result.returncode == 1
