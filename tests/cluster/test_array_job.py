"""attach to an array job's tasks on the real local cluster: two tasks of a hung gloo job run at
once, and the array's id is also the job id of one of them (Slurm gives the array the id of its
first record, which ends as its last task)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scenarios.launch import (
    batch_script,
    load_truth,
    sbatch_argv,
    submission_environment,
)

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
SLURMDIAG = [sys.executable, "-m", "slurmdiag.cli"]
TASKS = (0, 1)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SLURMDIAG, *args], capture_output=True, text=True, timeout=120,
                          check=False, cwd=REPO)


@pytest.fixture(scope="module")
def hung_array(local_cluster: dict[str, str], tmp_path_factory: pytest.TempPathFactory):
    """`sbatch --array=0-1` of rank_gated_collective's batch script, each task its own state
    folder; yields the array's id once every rank of both tasks is in its hang."""
    truth = load_truth("rank_gated_collective")
    state = tmp_path_factory.mktemp("array")
    text = batch_script(truth, state, sys.executable).replace(
        f"export SLURMDIAG_SCENARIO_DIR={state}",
        f"mkdir -p {state}/task$SLURM_ARRAY_TASK_ID\n"
        f"export SLURMDIAG_SCENARIO_DIR={state}/task$SLURM_ARRAY_TASK_ID")
    assert "task$SLURM_ARRAY_TASK_ID" in text
    script = state / "job.sh"
    script.write_text(text)
    argv = sbatch_argv(truth, state, script)
    argv.insert(2, f"--array={TASKS[0]}-{TASKS[-1]}")
    submitted = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True,
                               env=submission_environment())
    array = submitted.stdout.strip().split(";")[0]
    try:
        deadline = time.monotonic() + 240
        while not all(len(list((state / f"task{t}").glob("rank*.json"))) == truth["world_size"]
                      for t in TASKS):
            assert time.monotonic() < deadline, f"array {array} not ready: {sorted(state.rglob('*'))}"
            time.sleep(1)
        time.sleep(2)  # every rank reported just before its hang: let it get there
        yield array
    finally:
        subprocess.run(["scancel", array], capture_output=True, timeout=30, check=False)


def test_the_array_id_alone_names_the_running_tasks(hung_array: str) -> None:
    # WHEN the user attaches to the array's id while both tasks run
    done = _cli("attach", hung_array, "--samples", "1", "--strace", "0", "--no-report")
    # THEN it is a usage error naming the tasks, not a look at the task that shares the id
    assert done.returncode == 2, done.stderr
    assert f"job {hung_array} is an array with 2 tasks, 2 running" in done.stderr
    assert f"name one task: {hung_array}_0, {hung_array}_1" in done.stderr


@pytest.mark.parametrize("task", TASKS)
def test_each_task_is_attached_to_as_squeue_names_it(hung_array: str, task: int,
                                                     tmp_path: Path) -> None:
    # WHEN the user attaches to one task as squeue shows it
    done = _cli("attach", f"{hung_array}_{task}", "--samples", "1", "--strace", "0",
                "--no-report", "--out", str(tmp_path))
    # THEN that task's hang is read (rank 0 in the gated barrier), the header names the task
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"slurmdiag: job {hung_array}_{task} (job id ")
    snapshot = json.loads((tmp_path / "snapshot.json").read_text())
    assert (snapshot["job"]["array_job_id"], snapshot["job"]["array_task_id"]) == (
        hung_array, str(task))
    verdict = snapshot["verdicts"][0]
    assert verdict["kind"] == "mismatched_collective" and verdict["culprit_ranks"] == [0]
