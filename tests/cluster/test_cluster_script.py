"""deploy/local-cluster/cluster itself: up to 32 nodes, idempotent, status, env, down.

Runs a second cluster in its own state directory and ports, so the shared test cluster (and the
scenario jobs on it) are never touched.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "local-cluster" / "cluster"


@pytest.fixture
def second_cluster(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env.update(SLURMDIAG_CLUSTER_DIR=str(tmp_path / "cluster"), SLURMDIAG_CTLD_PORT="6967",
               SLURMDIAG_SLURMD_PORT="18501")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(SCRIPT), *args], env=env, capture_output=True, text=True,
                              timeout=300, check=False)

    yield run, env
    run("down")


def sinfo(env: dict, conf: Path) -> str:
    return subprocess.run(["sinfo", "-h", "-o", "%D %t"], env={**env, "SLURM_CONF": str(conf)},
                          capture_output=True, text=True, timeout=30, check=True).stdout.split()


def test_up_32_nodes_idempotent_reconfigure_status_env_down(second_cluster, tmp_path):
    run, env = second_cluster
    conf = tmp_path / "cluster" / "slurm.conf"
    # GIVEN a 4-node cluster
    assert run("up", "--nodes", "4").returncode == 0
    assert sinfo(env, conf) == ["4", "idle"]
    # WHEN up runs again THEN nothing restarts
    again = run("up", "--nodes", "4")
    assert again.returncode == 0 and "no restart" in again.stderr
    # WHEN it is reconfigured to 32 nodes THEN 32 nodes are idle
    assert run("up", "--nodes", "32").returncode == 0
    assert sinfo(env, conf) == ["32", "idle"]
    # AND status says so, and env prints the config to use
    assert run("status").returncode == 0
    assert run("env").stdout.strip() == f"export SLURM_CONF={conf}"
    # WHEN it goes down THEN status reports it (exit 3)
    assert run("down").returncode == 0
    assert run("status").returncode == 3


def test_up_recovers_from_daemons_killed_without_cleanup(second_cluster):
    # GIVEN a cluster whose daemons were all killed -9 (as at the end of a machine session)
    run, env = second_cluster
    assert run("up", "--nodes", "2").returncode == 0
    state = Path(run("env").stdout.split("=", 1)[1].strip()).parent
    pids = [p.read_text().strip() for p in (state / "run").glob("*.pid")]
    # accounting too: slurmdbd and MariaDB
    accounting = [state / "run" / "dbd" / "slurmdbd.pid", state / "mysql" / "mysqld.pid"]
    assert all(p.is_file() for p in accounting)
    pids += [p.read_text().strip() for p in accounting]
    assert pids
    subprocess.run(["kill", "-9", *pids], check=False)
    # WHEN up runs again THEN it starts them afresh despite the stale pid files
    assert run("up", "--nodes", "2").returncode == 0
    status = run("status")
    assert status.returncode == 0, status.stdout
    assert "slurmdbd: running" in status.stdout and "mariadbd: running" in status.stdout
    # AND accounting answers: a finished job is in sacct
    job = subprocess.run(["sbatch", "--parsable", "--wait", "--output=/dev/null", "--wrap", "true"],
                         env={**env, "SLURM_CONF": str(state / "slurm.conf")}, capture_output=True,
                         text=True, timeout=120, check=True).stdout.strip()
    listed = ""
    for _ in range(50):  # slurmctld sends the end record to slurmdbd just after the job ends
        listed = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "JobID,State"],
                                env={**env, "SLURM_CONF": str(state / "slurm.conf")},
                                capture_output=True, text=True, timeout=60, check=True).stdout
        if listed.strip() == f"{job}|COMPLETED":
            break
        time.sleep(0.2)
    assert listed.strip() == f"{job}|COMPLETED"
