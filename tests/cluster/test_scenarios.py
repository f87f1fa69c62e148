"""The scenario jobs really hang where their ground truth says, checked with the real py-spy.

The scenario_run fixture submits every job these tests name at once, then each test waits
for the one it needs: nine jobs importing torch on 2 cores take about 40-60 s in all.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from scenarios.launch import REPO_ROOT, ScenarioRun, load_truth, suite_scenarios, waiting_sites

pytestmark = pytest.mark.cluster

ALL = suite_scenarios()  # SLURMDIAG_ALL_SCENARIOS=1: every scenario
TRUTH = {name: load_truth(name) for name in ALL}
HUNG = [n for n in ALL if TRUTH[n]["expected_kind"] != "progressing"]
CULPRIT_IN_STACK = [n for n in HUNG if TRUTH[n]["culprit_evidence"] == "stack"]
#: A rank writes its ready file a moment before it blocks: dumps are retried this long.
SITE_DEADLINE_SECONDS = 15.0

Frame = dict[str, Any]
Dump = list[dict[str, Any]]  # py-spy dump --json: one dict per thread, each with "frames"


def dump(py_spy: str, pid: int) -> Dump:
    # --nonblocking: a rank held by a debugger (debugger_left_attached) cannot be suspended
    done = subprocess.run([py_spy, "dump", "--json", "--nonblocking", "--pid", str(pid)],
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, f"py-spy dump --pid {pid}: {done.stderr.strip()}"
    return json.loads(done.stdout)


def repo_relative(filename: str) -> str:
    try:
        return Path(filename).resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return filename


def frames(threads: Dump) -> list[Frame]:
    return [frame for thread in threads for frame in thread["frames"]]


def at_site(site: str) -> Callable[[Frame], bool]:
    """'path:line' -> does a frame sit on that line?"""
    path, line = site.rsplit(":", 1)
    return lambda f: repo_relative(f["filename"]) == path and f["line"] == int(line)


def in_function(where: str) -> Callable[[Frame], bool]:
    """'path:function' -> is a frame inside that function (3.11 names are qualified)?"""
    path, function = where.rsplit(":", 1)
    return lambda f: (repo_relative(f["filename"]) == path
                      and (f["name"] == function or f["name"].endswith("." + function)))


def dump_until(py_spy: str, pid: int, wanted: Callable[[Frame], bool]) -> Dump:
    """Dump until a frame matches (the rank may be a few lines short of its hang)."""
    deadline = time.monotonic() + SITE_DEADLINE_SECONDS
    while True:
        threads = dump(py_spy, pid)
        if any(wanted(f) for f in frames(threads)) or time.monotonic() > deadline:
            return threads
        time.sleep(0.5)


def describe(threads: Dump) -> str:
    return "\n".join(
        f"thread {t.get('thread_name')}:\n" + "\n".join(
            f"    {f['name']} ({repo_relative(f['filename'])}:{f['line']})" for f in t["frames"])
        for t in threads)


def culprit_matcher(truth: dict[str, Any]) -> Callable[[Frame], bool]:
    if truth["culprit_site"]:
        return at_site(truth["culprit_site"])
    return in_function(truth["culprit_function"])


@pytest.mark.parametrize("scenario", CULPRIT_IN_STACK)
def test_culprit_rank_stack_shows_the_culprit_site(scenario, scenario_run, py_spy):
    # GIVEN the scenario job, every rank in its hang
    run: ScenarioRun = scenario_run(scenario)
    wanted = culprit_matcher(run.truth)
    for rank in run.truth["culprit_ranks"]:
        # WHEN py-spy dumps the culprit rank
        threads = dump_until(py_spy, run.pid(rank), wanted)
        # THEN its stack holds the culprit site (or function)
        where = run.truth["culprit_site"] or run.truth["culprit_function"]
        assert any(wanted(f) for f in frames(threads)), (
            f"{scenario}: rank {rank} (pid {run.pid(rank)}) not at {where}:\n{describe(threads)}")


@pytest.mark.parametrize("scenario", HUNG)
def test_waiting_ranks_stacks_show_the_waiting_site(scenario, scenario_run, py_spy):
    # GIVEN the scenario job, every rank in its hang
    run: ScenarioRun = scenario_run(scenario)
    sites = [at_site(site) for site in waiting_sites(run.truth)]

    def wanted(frame: Frame) -> bool:
        return any(at(frame) for at in sites)

    for rank in run.truth["waiting_ranks"]:
        # WHEN py-spy dumps a rank that waits for the culprit
        threads = dump_until(py_spy, run.pid(rank), wanted)
        # THEN its stack holds the waiting site and not the culprit's
        assert any(wanted(f) for f in frames(threads)), (
            f"{scenario}: rank {rank} not at {run.truth['waiting_ranks_site']}:\n"
            + describe(threads))
        if run.truth["culprit_evidence"] == "stack" and not run.truth.get("culprit_site_shared"):
            # (culprit_site_shared: the waiting ranks call the culprit's line on another group)
            assert not any(culprit_matcher(run.truth)(f) for f in frames(threads))


@pytest.mark.scenario("spinning_rank")
def test_spinning_rank_keeps_running_in_the_culprit_function(scenario_run, py_spy):
    # GIVEN the spinning scenario
    run = scenario_run("spinning_rank")
    wanted = culprit_matcher(run.truth)
    pid = run.pid(run.truth["culprit_ranks"][0])
    # WHEN its culprit rank is dumped several times
    dumps = [dump_until(py_spy, pid, wanted)]
    for _ in range(11):
        time.sleep(0.1)
        dumps.append(dump(py_spy, pid))
    # THEN every dump is inside the function, on the CPU, and the innermost line moves
    main_threads = [next(t for t in d if t.get("thread_name") == "MainThread") for d in dumps]
    assert all(any(wanted(f) for f in t["frames"]) for t in main_threads)
    assert all(t["active"] for t in main_threads)
    innermost = {(t["frames"][0]["name"], t["frames"][0]["line"]) for t in main_threads}
    assert len(innermost) > 1, f"the spinning rank sat still: {innermost}"


@pytest.mark.scenario("dead_rank")
def test_dead_rank_is_gone_and_its_traceback_names_the_site(scenario_run):
    # GIVEN the dead-rank scenario, ranks 0-2 waiting
    run = scenario_run("dead_rank")
    (dead,) = run.truth["culprit_ranks"]
    # THEN the dead rank's process is gone, the job still runs, and the log names the site
    assert not Path(f"/proc/{run.pid(dead)}").exists()
    assert run.job_state() == "RUNNING"
    path, line = run.truth["culprit_site"].rsplit(":", 1)
    assert re.search(rf'File ".*{re.escape(path)}", line {line}, in ', run.output())
    assert f"task {dead}: Exited with exit code 1" in run.output()


# controls whose progress is in their log (exit_slow_upload's is on its connections)
PROGRESSING = [n for n in ALL if TRUTH[n]["expected_kind"] == "progressing"
               and TRUTH[n].get("progress_pattern")]
#: A control's slowest step (slow_but_moving: ~3 s) must show within this.
PROGRESS_DEADLINE_SECONDS = 15.0


@pytest.mark.parametrize("scenario", PROGRESSING)
def test_control_keeps_making_progress(scenario, scenario_run, py_spy):
    # GIVEN a control job (healthy_slow, and slow_but_moving with every scenario)
    run = scenario_run(scenario)
    pattern = re.compile(run.truth["progress_pattern"])

    def last_steps() -> dict[int, int]:
        steps: dict[int, int] = {}
        for rank, step in pattern.findall(run.output()):
            steps[int(rank)] = max(steps.get(int(rank), -1), int(step))
        return steps

    # WHEN its log is read again until every rank printed a newer step (or a deadline)
    ranks = range(run.truth["world_size"])
    before = after = last_steps()
    # a control that logs once per long compute phase says how long a phase is
    deadline = time.monotonic() + PROGRESS_DEADLINE_SECONDS + run.truth.get("progress_period_s", 0)
    while time.monotonic() < deadline and not all(
            after.get(r, -1) > before.get(r, -1) for r in ranks):
        time.sleep(0.25)  # reads the log file only
        after = last_steps()
    # THEN every rank printed newer steps, and py-spy sees each rank inside the training loop
    assert sorted(after) == list(range(run.truth["world_size"]))
    assert all(after[r] > before.get(r, -1) for r in after), (before, after)
    for rank in ranks:
        names = [f["name"] for f in frames(dump(py_spy, run.pid(rank)))]
        assert {"train", "train_healthy"} & set(names), names


@pytest.mark.parametrize(
    "scenario", [n for n in ALL if TRUTH[n]["launcher"] != "srun"] + ["dead_rank"])
def test_ranks_run_under_the_declared_launcher(scenario, scenario_run):
    # GIVEN a scenario job and its declared launcher
    run = scenario_run(scenario)
    launcher = run.truth["launcher"]
    for rank, record in sorted(run.ready.items()):
        if record["role"] == "dead":
            continue
        # THEN each rank's process (or its parent) is the launcher's
        cmdline = _cmdline(record["pid"])
        parent = _cmdline(_parent_pid(record["pid"]))
        if launcher == "torchrun":
            assert "torchrun" in parent and record["launcher"] == "torchrun", (rank, parent)
        elif launcher == "submitit":
            assert "submitit.core._submit" in cmdline and record["launcher"] == "submitit"
        elif launcher == "mp.spawn":
            # a spawned child of the script that one srun task per node runs
            grandparent = _cmdline(_parent_pid(_parent_pid(record["pid"])))
            assert "--multiprocessing-fork" in cmdline and run.truth["program"] in parent, parent
            assert grandparent.startswith("slurmstepd") and record["launcher"] == "mp.spawn"
        else:
            assert parent.startswith("slurmstepd") and record["launcher"] == "srun", (rank, parent)


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()


def _parent_pid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
