"""How the collector finds a job's processes below its slurmstepds, on real process trees.

Fake slurmstepds (the Python interpreter run under the name ``slurmstepd`` with a stepd's title
as argv[0]) stand for three nodes' steps of job 999999 on one host, as on the emulated cluster:
this test process is their common parent, as init is for real stepds. The probe, the
collector's part, runs as the one task of "our own" step and reports what each walk found.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmdiag.collector import discovery

REPO = Path(__file__).resolve().parents[2]
PYTHON = os.path.realpath(sys.executable)
JOB = "999999"

# A stepd: starts its tasks from its main thread (as slurmstepd does), then waits.
FAKE_STEPD = r"""
import json, os, subprocess, sys
spec = json.loads(sys.argv[1])
tasks = [subprocess.Popen([spec["python"], "-I", "-S", "-c", spec["task"], json.dumps(t)],
                          env=dict(os.environ, **t["env"])) for t in spec["tasks"]]
for task in tasks:
    task.wait()
"""

# A task: a child started from a second thread (listed under that thread, not the main one),
# or the probe.
TASK = r"""
import json, os, subprocess, sys, threading, time
spec = json.loads(sys.argv[1])
if spec.get("probe"):
    sys.path.insert(0, spec["repo"])
    from slurmdiag.collector import discovery as ns
    if spec.get("tiny_budget"):
        ns.CHILDREN_READS_BEFORE_BUDGET = 0
        ns._proc_entries = lambda: 1
    reads, real_read = [], ns._read
    def counting_read(path, *args, **kwargs):
        reads.append(path)
        return real_read(path, *args, **kwargs)
    ns._read = counting_read
    own = os.environ["SLURM_STEP_ID"]
    result = {"siblings": ns.sibling_stepd_descendants(spec["job"], spec["node"], own)}
    result["sibling_reads"], reads[:] = list(reads), []
    result["walk"] = ns.stepd_descendants(spec["job"], spec["node"], own)
    result["walk_reads"] = list(reads)
    with open(spec["out"] + ".tmp", "w") as f:
        json.dump(result, f)
    os.rename(spec["out"] + ".tmp", spec["out"])
    sys.exit(0)
if spec.get("thread_child"):
    # The thread stays: when it ends, the kernel moves its children to another thread.
    def start():
        subprocess.Popen([sys.executable, "-I", "-S", "-c", "import time; time.sleep(120)"])
        time.sleep(120)
    threading.Thread(target=start, daemon=True).start()
time.sleep(120)
"""


def _start_stepd(tmp_path: Path, title: str, tasks: list[dict]) -> subprocess.Popen:
    name = tmp_path / "slurmstepd"
    if not name.exists():
        name.symlink_to(PYTHON)
    spec = {"python": PYTHON, "task": TASK, "tasks": tasks}
    return subprocess.Popen([title, "-I", "-S", "-c", FAKE_STEPD, json.dumps(spec)],
                            executable=str(name))


def _task(node_name: str, step: str, cluster: str = "alpha", **extra) -> dict:
    return {"env": {"SLURMD_NODENAME": node_name, "SLURM_JOB_ID": JOB, "SLURM_STEP_ID": step,
                    "SLURM_CLUSTER_NAME": cluster}, **extra}


def _descendants(pid: int) -> set[int]:
    found, stack = set(), [pid]
    while stack:
        parent = stack.pop()
        try:
            tids = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                children = Path(f"/proc/{parent}/task/{tid}/children").read_text().split()
            except OSError:
                children = []
            for child in map(int, children):
                found.add(child)
                stack.append(child)
    return found


def _wait_for_tree(stepd: subprocess.Popen, count: int) -> set[int]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = _descendants(stepd.pid)
        if len(found) >= count:
            return found
        time.sleep(0.05)
    raise AssertionError(f"stepd {stepd.pid} did not start its {count} processes")


@pytest.fixture(params=["ours_first", "foreign_first"])
def three_nodes(tmp_path, request):
    """Job 999999 step 0 on nodeA and nodeB of cluster alpha (ours) and on nodeA of cluster beta,
    job 888 on nodeA; returns (run_probe, nodeA's pids).

    ``run_probe.foreign`` holds nodeB's processes; the param says whose stepd starts first (the
    order the walks meet them in)."""
    started = []

    def stepd(title, tasks):
        started.append(_start_stepd(tmp_path, title, tasks))
        return started[-1]

    def ours():
        return stepd(f"slurmstepd: [{JOB}.0]", [
            _task("nodeA", "0", thread_child=True), _task("nodeA", "0")])

    def theirs():
        return stepd(f"slurmstepd: [{JOB}.0]", [_task("nodeB", "0"), _task("nodeB", "0")])

    try:
        # Another emulated cluster on the host, with the same job id and node names, comes first
        other_cluster = stepd(f"slurmstepd: [{JOB}.0]", [_task("nodeA", "0", cluster="beta")])
        if request.param == "ours_first":
            mine, foreign = ours(), theirs()
        else:
            foreign, mine = theirs(), ours()
        other_job = stepd("slurmstepd: [888.0]", [
            {"env": {"SLURMD_NODENAME": "nodeA", "SLURM_JOB_ID": "888"}}])
        expected = _wait_for_tree(mine, 3)
        foreign_pids = _wait_for_tree(foreign, 2)
        _wait_for_tree(other_cluster, 1)
        _wait_for_tree(other_job, 1)

        def run_probe(**extra):
            out = tmp_path / f"probe-{len(started)}.json"
            probe = _task("nodeA", "7", probe=True, repo=str(REPO), job=JOB, node="nodeA",
                          out=str(out), **extra)
            own = stepd(f"slurmstepd: [{JOB}.7]", [probe])
            own.wait(timeout=60)
            return json.loads(out.read_text())

        run_probe.foreign = foreign_pids
        run_probe.foreign_stepd = foreign.pid
        run_probe.order = request.param
        yield run_probe, expected
    finally:
        for proc in started:
            for pid in _descendants(proc.pid) if proc.poll() is None else ():
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
            proc.kill()
            proc.wait()


def test_our_stepds_siblings_give_this_nodes_processes_only(three_nodes):
    # GIVEN job 999999's step 0 on this node (nodeA: two tasks, one with a child started from a
    # second thread), the same step of another emulated node (nodeB), another job on nodeA, and
    # the probe running as the task of our own step 7
    run_probe, expected = three_nodes
    # WHEN both walks run from the probe
    result = run_probe()
    # THEN the sibling walk finds exactly nodeA's processes of step 0, the thread's child too,
    # nothing of nodeB, of job 888 or of our own step; the full /proc walk agrees
    siblings = {int(pid): step for pid, step in result["siblings"].items()}
    assert set(siblings) == expected
    assert set(siblings.values()) == {"0"}
    walk = {int(pid): step for pid, step in result["walk"].items()}
    assert walk == siblings


def _environs_read(paths: list[str], pids: set[int]) -> set[int]:
    return {int(p.split("/")[2]) for p in paths if p.endswith("/environ")} & pids


def test_a_stepd_of_a_step_this_node_already_has_is_not_read(three_nodes):
    # GIVEN nodeA's and nodeB's stepds of step 0 on one host, in either order
    run_probe, expected = three_nodes
    # WHEN both walks run from the probe
    result = run_probe()
    # THEN both find nodeA's processes; a node runs one stepd per step, so once a task's
    # environment has named nodeA for step 0, nodeB's stepd of step 0 is skipped unread; met
    # first, one of its tasks' environment is read to learn it is nodeB's
    foreign = run_probe.foreign
    assert {int(pid) for pid in result["siblings"]} == expected
    assert {int(pid) for pid in result["walk"]} == expected
    for walk in ("sibling_reads", "walk_reads"):
        read = _environs_read(result[walk], foreign)
        if run_probe.order == "ours_first":
            assert read == set(), walk
        else:
            assert len(read) == 1, (walk, read)
    # (nor, by the sibling walk, the list of its children)
    listed = [p for p in result["sibling_reads"] if p.startswith(f"/proc/{run_probe.foreign_stepd}/")]
    assert listed == [f"/proc/{run_probe.foreign_stepd}/cmdline"] if run_probe.order == "ours_first" \
        else len(listed) > 1


def test_sibling_walk_gives_way_when_the_jobs_threads_cost_more_than_proc(three_nodes):
    # GIVEN the same host, with a budget smaller than the files the sibling walk needs
    run_probe, expected = three_nodes
    # WHEN the probe runs
    result = run_probe(tiny_budget=True)
    # THEN the sibling walk declines (None: the caller walks /proc), which still finds them
    assert result["siblings"] is None
    assert {int(pid) for pid in result["walk"]} == expected


def test_sibling_walk_needs_a_slurmstepd_parent():
    # GIVEN this test process, whose parent is no slurmstepd (as over ssh)
    # WHEN / THEN the sibling walk declines
    assert discovery.sibling_stepd_descendants(JOB, "nodeA", None) is None
