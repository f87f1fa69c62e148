"""postmortem against real jobs that ended on the local cluster, with Slurm accounting on.

Six jobs run at once (tests/scenarios/postmortem/*.json): a rank that segfaults (core in the
working directory), a gloo timeout with Flight Recorder dumps, a rank SIGKILLed while the others
wait, a job cancelled by its user, one that runs out of its time limit (>= 60 s, so all
start together) and one whose node dies under it (NODE_FAIL after SlurmdTimeout). Each is
checked against its ground truth through the real CLI.

The node that dies is one no other job runs on (every other post-mortem job excludes it): a
node that Slurm sets DOWN ends every job on it. With no such node the node-failure test is
skipped. The node is brought back afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from scenarios.postmortem.launch import (
    PostmortemRun,
    all_nodes,
    free_nodes,
    kill_node,
    names,
    node_states,
    restart_node,
    submit,
)

from slurmdiag.slurm.parse import format_int_ranges

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
SLURMDIAG = [sys.executable, "-m", "slurmdiag.cli"]


def run_cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SLURMDIAG, *args], capture_output=True, text=True, timeout=timeout,
                          check=False, cwd=REPO)


@pytest.fixture(scope="module")
def ended_jobs(local_cluster, tmp_path_factory):
    """Every post-mortem scenario, submitted together, acted upon, and waited until it ended."""
    base = tmp_path_factory.mktemp("postmortem")
    nodes = all_nodes()
    free = free_nodes()
    victim = free[-1] if free else None
    runs: dict[str, PostmortemRun] = {}
    killed: list[str] = []
    for name in names():
        truth_action = submit_action(name)
        if truth_action == "kill_node":
            if victim is None:
                continue  # no node without other jobs: the test is skipped
            partner = next(n for n in nodes if n != victim)
            runs[name] = submit(name, base / name, sbatch_extra=[f"--nodelist={partner},{victim}"])
        else:
            runs[name] = submit(name, base / name,
                                sbatch_extra=[f"--exclude={victim}"] if victim else [])
    running_answer = None
    try:
        for run in runs.values():
            run.wait_ready(timeout=150)
        for run in runs.values():
            if run.truth["action"] == "kill_node":
                assert victim is not None
                others = nodes_with_jobs_but(run.job_id, victim)
                assert not others, f"jobs {others} run on {victim}: killing it would fail them"
                killed.append(victim)
                assert kill_node(run, victim) == run.truth["culprit_ranks"]
            elif run.truth["action"] == "kill_culprit":
                record = run.rank_record(run.truth.get("culprit_rank", 3))
                assert record is not None
                os.kill(int(record["pid"]), signal.SIGKILL)
            elif run.truth["action"] == "scancel":
                # while it still runs: postmortem must refuse and point to attach
                running_answer = run_cli("postmortem", run.job_id)
                run.cancel()
        for run in runs.values():
            run.wait_ended(timeout=180)
        while killed:  # the dead node comes back (its slurmd again; ReturnToService=2)
            restart_node(killed.pop())
        yield runs, running_answer
    finally:
        for run in runs.values():
            run.cancel()
            run.remove_cores()
        for node in killed:
            restart_node(node)


def submit_action(name: str) -> str | None:
    from scenarios.postmortem.launch import load_truth

    return load_truth(name)["action"]


def nodes_with_jobs_but(job_id: str, node: str) -> list[str]:
    done = subprocess.run(["squeue", "-h", "-w", node, "-o", "%i"], capture_output=True, text=True,
                          timeout=30, check=True)
    return [j for j in done.stdout.split() if j != job_id]


@pytest.mark.parametrize("name", names())
def test_postmortem_matches_ground_truth(ended_jobs, name, tmp_path):
    runs, _ = ended_jobs
    if name not in runs:
        pytest.skip("every node runs another job: killing one would fail them")
    run: PostmortemRun = runs[name]
    truth = run.truth
    argv = ["postmortem", run.job_id, "--out", str(tmp_path / "out"), "--json"]
    if truth.get("flight_recorder"):
        argv += ["--flight-recorder", str(run.state_dir / "fr-")]
    # WHEN postmortem runs on the ended job
    done = run_cli(*argv)
    assert done.returncode == 0, done.stderr
    snapshot = json.loads(done.stdout)
    section = snapshot["postmortem"]
    # THEN Slurm's record came from accounting, in the state the truth says
    assert section["source"].startswith("sacct"), section
    assert snapshot["job"]["state"] == truth["expected_state"]
    # AND the first verdict names the culprit and the kind
    top = snapshot["verdicts"][0]
    assert top["kind"] == truth["expected_kind"], snapshot["verdicts"]
    assert top["culprit_ranks"] == truth["culprit_ranks"]
    if truth["culprit_site"]:
        sites = [s.replace(str(REPO) + "/", "") for s in top["sites"]]
        assert truth["culprit_site"] in sites, top
    if truth["victim_ranks"]:  # the ranks that only died because of the culprit are named
        victims = f"ranks {format_int_ranges(truth['victim_ranks'])}"
        assert victims in top["summary"], top["summary"]
    # AND the report and snapshot files were written
    assert (tmp_path / "out" / "report.html").stat().st_size > 1000
    assert json.loads((tmp_path / "out" / "snapshot.json").read_text())["verdicts"][0]["kind"] == top["kind"]
    # AND what is special to each ending is there
    if truth.get("core"):
        cores = section["cores"]
        assert cores and cores[0]["rank"] == 3 and cores[0]["tool"] == "pystack", cores
        assert any("decode_sample" in frame for frame in cores[0]["frames"])
    if truth.get("flight_recorder"):
        # every rank whose collective failed dumped; rank 3's entry came after the timeout
        assert snapshot["flight_recorder"]["missing_ranks"] == []
        assert sorted(snapshot["flight_recorder"]["dumps"]) == ["0", "1", "2", "3"]
        assert "all_reduce" in top["summary"]
        assert any("ranks 3 entered it only after the timeout" in e for e in top["evidence"]), top
    if truth["action"] == "kill_node":
        # the node that died is named, and it is back in service
        assert f"node {_victim_of(run)} failed" in top["summary"], top
        states = node_states()
        assert not any(s.startswith(("down", "drain")) for s in states.values()), states
    assert section["logs"]["labelled"] is truth["label"]


def _victim_of(run: PostmortemRun) -> str:
    record = run.rank_record(run.truth["culprit_ranks"][0])
    assert record is not None
    return str(record["node"])


def test_running_job_points_to_attach(ended_jobs):
    _, running_answer = ended_jobs
    assert running_answer is not None
    assert running_answer.returncode == 4, running_answer.stderr
    lines = running_answer.stderr.strip().splitlines()
    assert lines[0].startswith("error: ") and "RUNNING" in lines[0]
    assert lines[1].startswith("hint: ") and "slurmdiag attach" in lines[1]


def test_job_that_never_ran(local_cluster):
    done = run_cli("postmortem", "99999999")
    assert done.returncode == 3
    assert done.stderr.startswith("error: job 99999999 is not known") and "hint:" in done.stderr


def test_logs_gone(local_cluster, tmp_path):
    # GIVEN a finished job whose log file was removed afterwards
    job = subprocess.run(["sbatch", "--parsable", "--wait", f"--chdir={tmp_path}",
                          "--output=gone-%j.out", "--wrap", "echo hello; exit 3"],
                         capture_output=True, text=True, timeout=120, check=False).stdout.strip()
    logs = list(tmp_path.glob("gone-*.out"))
    assert logs
    for log in logs:
        log.unlink()
    # WHEN postmortem runs THEN one error line with a hint, exit 9
    done = run_cli("postmortem", job, "--no-cores")
    assert done.returncode == 9, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2 and "none of its logs can be read" in lines[0] and "--log" in lines[1]


def test_without_accounting_slurmctld_and_the_logs_are_used(local_cluster, tmp_path):
    # GIVEN a client whose slurm.conf has no accounting (sacct then says so, for real), and a job
    # that just failed (slurmctld keeps it for MinJobAge, 60 s on the local cluster)
    conf = Path(os.environ["SLURM_CONF"])
    no_acct = tmp_path / "slurm.conf"
    no_acct.write_text("\n".join(
        "AccountingStorageType=accounting_storage/none"
        if line.startswith(("AccountingStorageType", "AccountingStorageHost", "AccountingStoragePort"))
        else line for line in conf.read_text().splitlines()
    ) + "\n")
    env = {**os.environ, "SLURM_CONF": str(no_acct)}
    script = ("srun --label bash -c 'if [ $SLURM_PROCID = 1 ]; then "
              "echo boom >&2; kill -SEGV $$; fi; sleep 2'")
    job = subprocess.run(["sbatch", "--parsable", "--wait", f"--chdir={tmp_path}", "-N1", "-n2",
                          "--output=job-%j.out", "--wrap", script],
                         capture_output=True, text=True, timeout=120, check=False,
                         env=env).stdout.strip()
    assert job
    # WHEN postmortem runs with that client config
    done = subprocess.run([*SLURMDIAG, "postmortem", job, "--json", "--no-report", "--no-cores",
                           "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120, check=False, cwd=REPO, env=env)
    assert done.returncode == 0, done.stderr
    snapshot = json.loads(done.stdout)
    # THEN Slurm's record came from slurmctld, the report says why, and the log names the rank
    assert snapshot["postmortem"]["source"] == "scontrol"
    assert any("accounting" in note for note in snapshot["postmortem"]["notes"])
    assert snapshot["job"]["state"] == "FAILED"
    top = snapshot["verdicts"][0]
    assert top["kind"] == "rank_crashed" and top["culprit_ranks"] == [1], snapshot["verdicts"]


HET_EXIT_SCRIPT = """#!/bin/bash
#SBATCH --time=5
#SBATCH -N1 --ntasks-per-node=1
#SBATCH hetjob
#SBATCH -N1 --ntasks-per-node=1
srun --het-group=0,1 --kill-on-bad-exit=1 {python} -c '
import os, sys, time
if os.environ["SLURM_PROCID"] == "1":
    time.sleep(2)
    print("rank 1: cannot open shard 7", file=sys.stderr, flush=True)
    sys.exit(3)
time.sleep(300)'
"""


def test_a_het_job_is_read_whole_and_its_second_component_names_its_rank(local_cluster, tmp_path):
    # GIVEN a heterogeneous job whose one step spans both components: rank 1 (component 1's
    # first task: srun calls it "task 0") exits 3 with no traceback, srun ends rank 0
    script = tmp_path / "het.sh"
    script.write_text(HET_EXIT_SCRIPT.format(python=sys.executable))
    leader = subprocess.run(["sbatch", "--parsable", "--wait", f"--chdir={tmp_path}",
                             "--output=het-%j.out", str(script)],
                            capture_output=True, text=True, timeout=240, check=False).stdout.strip()
    leader = leader.split("+")[0].split(";")[0]
    assert leader.isdigit(), leader
    # WHEN postmortem reads the whole job, then component 1 alone
    whole = run_cli("postmortem", leader, "--json", "--no-report", "--no-cores",
                    "--out", str(tmp_path / "whole"))
    alone = run_cli("postmortem", f"{leader}+1", "--json", "--no-report", "--no-cores",
                    "--log", str(tmp_path / f"het-{leader}.out"), "--out", str(tmp_path / "one"))
    # THEN the whole job: both components' steps, its log found from the submit line (22.05's
    # JSON has none), and the culprit is rank 1, on component 1's node
    assert whole.returncode == 0, whole.stderr
    snapshot = json.loads(whole.stdout)
    steps = {s["id"]: (s["state"], s["exit_code"]) for s in snapshot["postmortem"]["steps"]}
    assert steps[f"{leader}+1.0"] == ("FAILED", 3) and f"{leader}+0.0" in steps, steps
    top = snapshot["verdicts"][0]
    assert (top["kind"], top["culprit_ranks"]) == ("rank_exited", [1]), snapshot["verdicts"]
    assert snapshot["postmortem"]["world_size"] == 2
    assert len(snapshot["job"]["nodes"]) == 2 and snapshot["job"]["het_job_id"] == leader
    # AND one component is itself: its steps only
    assert alone.returncode == 0, alone.stderr
    one = json.loads(alone.stdout)
    assert [s["id"] for s in one["postmortem"]["steps"]] == [f"{leader}+1.0"]
    assert one["job"]["het_job_offset"] == "1"
