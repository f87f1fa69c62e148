"""Submit a post-mortem scenario: a job that ENDS (crash, timeout, kill, cancel, time limit).

    run = submit("postmortem_segfault", state_dir)   # sbatch; its working directory is state_dir
    run.wait_ready(timeout=90)                        # every rank at step 3 (rank<R>.json)
    run.wait_ended(timeout=150)                       # the job left squeue

Ground truth: tests/scenarios/postmortem/<name>.json. The job runs with ``ulimit -c unlimited``
and ``--chdir`` = state_dir, so a crashing rank's core lands there (delete it: ~170 MB).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scenarios.launch import (
    NICENESS,
    SCENARIO_DIR,
    ScenarioError,
    submission_environment,
    torchrun_step,
)

POSTMORTEM_DIR = Path(__file__).resolve().parent
REPO_ROOT = POSTMORTEM_DIR.parents[2]
#: The gloo_timeout scenario's process-group timeout (seconds).
PG_TIMEOUT_S = 20
#: squeue's states of a job that has ended (shown for MinJobAge).
ENDED_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


def names() -> list[str]:
    return sorted(p.stem for p in POSTMORTEM_DIR.glob("postmortem_*.json"))


def load_truth(name: str) -> dict[str, Any]:
    return json.loads((POSTMORTEM_DIR / f"{name}.json").read_text())


def batch_script(truth: dict[str, Any], state_dir: Path, python: str) -> str:
    program = REPO_ROOT / truth["program"]
    env = {
        "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": str(SCENARIO_DIR), "SLURMDIAG_SCENARIO_DIR": str(state_dir),
        "POSTMORTEM_MODE": truth["mode"], "POSTMORTEM_PG_TIMEOUT_S": str(PG_TIMEOUT_S),
    }
    env.update(truth.get("env", {}))  # the scenario's own (TORCH_DISTRIBUTED_DEBUG)
    if truth.get("stall_s"):
        env["POSTMORTEM_STALL_S"] = str(truth["stall_s"])
    if truth.get("flight_recorder"):
        env["TORCH_FR_DUMP_TEMP_FILE"] = str(state_dir / "fr-")
        env["TORCH_FR_BUFFER_SIZE"] = "2000"
    if truth.get("launcher") == "torchrun":  # one agent a node, workers carry RANK
        step = torchrun_step(python, program, truth["nodes"], truth["ntasks_per_node"],
                             srun_args=truth["srun_args"])
    else:
        step = [shlex.join(["srun", *truth["srun_args"], f"--nodes={truth['nodes']}",
                            f"--ntasks-per-node={truth['ntasks_per_node']}", "nice", "-n",
                            str(NICENESS), python, "-u", str(program)])]
    return "\n".join([
        "#!/bin/bash",
        f"# post-mortem scenario {truth['name']}, written by tests/scenarios/postmortem/launch.py",
        "unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT",
        *(f"export {k}={shlex.quote(v)}" for k, v in env.items()),
        "ulimit -c unlimited" if truth.get("core") else "ulimit -c 0",
        *step,
    ]) + "\n"


def sbatch_argv(truth: dict[str, Any], state_dir: Path, script: Path,
                extra: Sequence[str] = ()) -> list[str]:
    return ["sbatch", "--parsable", f"--job-name={truth['name']}", f"--nodes={truth['nodes']}",
            f"--ntasks-per-node={truth['ntasks_per_node']}", *truth["sbatch_args"], *extra,
            *([] if any(a.startswith("--time") for a in truth["sbatch_args"]) else ["--time=10"]),
            "--output=job-%j.out", f"--chdir={state_dir}", str(script)]


@dataclass
class PostmortemRun:
    name: str
    job_id: str
    truth: dict[str, Any]
    state_dir: Path

    def rank_record(self, rank: int) -> dict[str, Any] | None:
        try:
            return json.loads((self.state_dir / f"rank{rank}.json").read_text())
        except (OSError, ValueError):
            return None

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self.rank_record(r) for r in range(self.truth["world_size"])):
                time.sleep(0.5)
                return
            if self.job_state() not in (None, "PENDING", "RUNNING", "CONFIGURING"):
                raise ScenarioError(f"{self.name}: job ended before its ranks were ready")
            time.sleep(0.3)
        raise ScenarioError(f"{self.name}: ranks not ready after {timeout:.0f} s")

    def job_state(self) -> str | None:
        done = subprocess.run(["squeue", "-h", "-j", self.job_id, "-o", "%T"], capture_output=True,
                              text=True, timeout=30, check=False)
        return done.stdout.strip() or None

    def wait_ended(self, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.job_state() in (None, *ENDED_STATES):
                return
            time.sleep(1.0)
        raise ScenarioError(f"{self.name}: job {self.job_id} still {self.job_state()} after {timeout:.0f} s")

    def output(self) -> Path:
        return self.state_dir / f"job-{self.job_id}.out"

    def cancel(self) -> None:
        subprocess.run(["scancel", self.job_id], capture_output=True, timeout=30, check=False)

    def remove_cores(self) -> None:
        for core in self.state_dir.glob("core*"):
            core.unlink(missing_ok=True)


def submit(name: str, state_dir: Path, python: str | None = None,
           sbatch_extra: Sequence[str] = ()) -> PostmortemRun:
    """``sbatch_extra``: arguments for this submission only (e.g. ``--nodelist``/``--exclude``)."""
    truth = load_truth(name)
    state_dir = state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    script = state_dir / "job.sbatch"
    script.write_text(batch_script(truth, state_dir, python or sys.executable))
    argv = sbatch_argv(truth, state_dir, script, sbatch_extra)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False,
                          env=submission_environment())
    if done.returncode != 0:
        raise ScenarioError(f"{name}: {shlex.join(argv)} failed: {done.stderr.strip()}")
    return PostmortemRun(name=name, job_id=done.stdout.strip().split(";")[0], truth=truth,
                         state_dir=state_dir)


# ---------------------------------------------------------------- a node dies under a job

CLUSTER_DIR = Path(os.environ.get("SLURMDIAG_CLUSTER_DIR", "/tmp/slurmdiag-cluster"))


def nodes_with_jobs() -> set[str]:
    """Nodes some running job is on (any user's, any job: they would fail with the node)."""
    done = subprocess.run(["squeue", "-h", "-t", "RUNNING,COMPLETING,CONFIGURING", "-o", "%N"],
                          capture_output=True, text=True, timeout=30, check=True)
    busy: set[str] = set()
    for nodelist in filter(None, done.stdout.split()):
        busy.update(subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True,
                                   text=True, timeout=30, check=True).stdout.split())
    return busy


def all_nodes() -> list[str]:
    return sorted(node_states())


def node_states() -> dict[str, str]:
    """Each node's state as sinfo prints it (idle, mixed, down*, ...)."""
    done = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True,
                          timeout=30, check=True)
    return dict(line.split(None, 1) for line in done.stdout.splitlines() if line.strip())


def free_nodes() -> list[str]:
    """Idle nodes no running job is on: one of them may die without failing another job."""
    busy = nodes_with_jobs()
    return [n for n, state in sorted(node_states().items()) if state == "idle" and n not in busy]


def _step_daemons(job_id: str, node: str) -> list[int]:
    """This job's slurmstepd processes on ``node``: each holds its node's slurmd log open."""
    node_log = str(CLUSTER_DIR.resolve() / "log" / f"slurmd-{node}.log")
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if (proc / "comm").read_text().strip() != "slurmstepd":
                continue
            title = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if f"[{job_id}." not in title:
                continue
            if any(os.readlink(fd) == node_log for fd in (proc / "fd").iterdir()):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def kill_node(run: PostmortemRun, node: str) -> list[int]:
    """Kill ``node`` as a machine dies: its slurmd, the job's step daemons and ranks there.

    Returns the ranks that were on it. Only this job's processes and this cluster's slurmd for
    that node are touched (other jobs' step daemons on it would die with a real machine; the
    caller picks a node no other job runs on)."""
    ranks = sorted(r for r in range(run.truth["world_size"])
                   if (record := run.rank_record(r)) and record.get("node") == node)
    slurmd = int((CLUSTER_DIR / "run" / f"slurmd-{node}.pid").read_text().strip())
    victims = [slurmd, *_step_daemons(run.job_id, node)]
    victims += [int(record["pid"]) for r in ranks if (record := run.rank_record(r))]
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return ranks


def restart_node(node: str) -> None:
    """Start the node's slurmd again (ReturnToService=2: the node returns once it registers)."""
    cluster = REPO_ROOT / "deploy" / "local-cluster" / "cluster"
    done = subprocess.run([str(cluster), "up", "--nodes", str(len(all_nodes()))], capture_output=True,
                          text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise ScenarioError(f"could not bring {node} back: {done.stderr.strip()[-500:]}")
