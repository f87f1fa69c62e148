"""The scenarios' ground truth matches their source, and the launch scripts are built right."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from scenarios import _harness as harness
from scenarios.launch import (
    LAUNCHERS,
    REPO_ROOT,
    SCENARIO_DIR,
    TIME_LIMIT_MINUTES,
    ScenarioError,
    batch_script,
    load_truth,
    sbatch_argv,
    scenario_names,
    waiting_sites,
)

KINDS = {"mismatched_collective", "straggler", "spinning", "missing_rank", "all_waiting",
         "progressing", "no_ranks"}
REQUIRED = {
    "name": str, "program": str, "launcher": str, "nodes": int, "ntasks_per_node": int,
    "world_size": int, "culprit_ranks": list, "culprit_site": (str, type(None)),
    "culprit_function": (str, type(None)), "culprit_evidence": (str, type(None)),
    "expected_kind": str, "waiting_ranks": list, "waiting_ranks_site": (str, list, type(None)),
    "notes": str,
}
NAMES = scenario_names()


def source_line(site: str) -> str:
    path, line = site.rsplit(":", 1)
    return (REPO_ROOT / path).read_text().splitlines()[int(line) - 1]


def test_the_scenarios_exist():
    assert {"rank_gated_collective", "uneven_inputs", "blocked_outside_collective",
            "spinning_rank", "mismatched_collectives", "dead_rank", "healthy_slow"} <= set(NAMES)
    assert {load_truth(n)["launcher"] for n in NAMES} == set(LAUNCHERS)


@pytest.mark.parametrize("name", NAMES)
def test_truth_is_well_formed(name):
    truth = load_truth(name)
    for key, kind in REQUIRED.items():
        assert isinstance(truth.get(key), kind), f"{name}: {key} = {truth.get(key)!r}"
    assert truth["name"] == name
    assert (REPO_ROOT / truth["program"]).is_file()
    assert truth["launcher"] in LAUNCHERS
    assert truth["expected_kind"] in KINDS
    # torchrun --standalone on each node: a world a node
    per_world = 1 if truth["launcher"] == "torchrun-standalone" else truth["nodes"]
    assert truth["world_size"] == per_world * truth["ntasks_per_node"]
    # a world asked bigger than the processes launched (world_size_overcount): the ranks the
    # launch never started are in the world too
    asked = truth.get("world_size_asked", truth["world_size"])
    assert isinstance(asked, int) and asked >= truth["world_size"]
    ranks = set(range(asked))
    culprits, waiting = set(truth["culprit_ranks"]), set(truth["waiting_ranks"])
    # ranks that finished and exited before the look (exit_waits_uploader): no process
    exited = set(truth.get("exited_ranks", []))
    if truth["expected_kind"] == "no_ranks":
        # no rank ever starts (a node's launcher held back): the culprits are nodes, by their
        # index in the job's node list, and the job is ready when its log says so
        assert not culprits and not waiting and set(truth["unstarted_ranks"]) == ranks
        assert truth["culprit_nodes"] and all(0 <= i < truth["nodes"] for i in truth["culprit_nodes"])
        assert truth["ready_pattern"] and truth["culprit_site"]
        return
    # ranks whose process the job never starts: culprits that cannot report ready
    assert set(truth.get("unstarted_ranks", [])) <= culprits
    assert culprits <= ranks and waiting <= ranks and not culprits & waiting
    assert not exited & (culprits | waiting)
    # ranks that report ready before the look, the others not started yet
    assert set(truth.get("ready_ranks", [])) <= ranks
    if truth["expected_kind"] == "progressing":
        assert not culprits and not waiting and not exited
        # its progress: log lines, or (a job past its program's end) data its ranks move
        assert truth.get("progress_pattern") or truth.get("progress_evidence") == "connections"
    else:
        assert culprits and culprits | waiting | exited == ranks
        assert (truth["culprit_site"] is None) != (truth["culprit_function"] is None)
        assert truth["culprit_evidence"] in {"stack", "log"}
        assert bool(truth["waiting_ranks_site"]) == bool(waiting)


@pytest.mark.parametrize("name", [n for n in NAMES if load_truth(n)["culprit_site"]])
def test_culprit_site_line_carries_the_marker(name):
    # GIVEN the ground truth's culprit_site THEN that source line is marked, so drift shows
    site = load_truth(name)["culprit_site"]
    assert source_line(site).rstrip().endswith("# CULPRIT"), f"{site}: {source_line(site)!r}"


@pytest.mark.parametrize("name", [n for n in NAMES if load_truth(n)["culprit_function"]])
def test_culprit_function_is_defined_on_a_marked_line(name):
    path, function = load_truth(name)["culprit_function"].rsplit(":", 1)
    lines = (REPO_ROOT / path).read_text().splitlines()
    definitions = [line for line in lines if re.match(rf"\s*def {function}\(", line)]
    assert len(definitions) == 1 and "# CULPRIT" in definitions[0], definitions


@pytest.mark.parametrize("name", [n for n in NAMES if load_truth(n)["waiting_ranks_site"]])
def test_waiting_site_line_carries_the_marker(name):
    truth = load_truth(name)
    for site in waiting_sites(truth):
        if site == truth["culprit_site"]:
            continue  # the ranks wait where the fault is (a world asked bigger than launched)
        assert source_line(site).rstrip().endswith("# WAITING"), f"{site}: {source_line(site)!r}"


def test_every_marker_is_claimed_by_a_truth_file():
    # GIVEN all marked lines in the scenario sources
    marked = set()
    # a wrapper script's line can be the culprit (a node's staging that never ends)
    sources = set(SCENARIO_DIR.glob("*.py")) | set(SCENARIO_DIR.glob("*.sh"))
    for name in NAMES:  # a package run with `python -m` holds its own markers
        program = REPO_ROOT / load_truth(name)["program"]
        if program.parent != SCENARIO_DIR:
            sources |= set(program.parent.glob("*.py"))
    for source in sorted(sources):
        for number, line in enumerate(source.read_text().splitlines(), start=1):
            if "# CULPRIT" in line or "# WAITING" in line:
                marked.add(f"{source.relative_to(REPO_ROOT).as_posix()}:{number}")
    # THEN each is some scenario's culprit or waiting site (a stale marker hides drift)
    claimed = set()
    for name in NAMES:
        truth = load_truth(name)
        claimed |= {truth["culprit_site"], *waiting_sites(truth)}
        if truth["culprit_function"]:
            path, function = truth["culprit_function"].rsplit(":", 1)
            lines = (REPO_ROOT / path).read_text().splitlines()
            claimed |= {f"{path}:{i}" for i, line in enumerate(lines, start=1)
                        if re.match(rf"\s*def {function}\(", line)}
    assert marked == claimed - {None}


def test_every_program_has_a_truth_file():
    programs = {p.name for p in SCENARIO_DIR.glob("*.py")
                if not p.name.startswith("_") and p.name != "launch.py"}
    top_level = {Path(load_truth(n)["program"]) for n in NAMES}
    assert programs == {p.name for p in top_level if p.parent.as_posix() == "tests/scenarios"}


def test_module_scenarios_run_their_program_as_a_module():
    # GIVEN scenarios launched with `python -m` THEN the module is the program, importable
    # from the scenario directory (which the batch script puts on PYTHONPATH)
    for name in NAMES:
        module = load_truth(name).get("module")
        if module:
            program = REPO_ROOT / load_truth(name)["program"]
            assert program == SCENARIO_DIR.joinpath(*module.split(".")).with_suffix(".py")


def test_wrapper_and_module_scenarios_get_their_launch_lines(tmp_path):
    wrapped = batch_script(load_truth("wrapper_no_exec"), tmp_path, "/venv/bin/python")
    wrapper = REPO_ROOT / "tests/scenarios/run_training.sh"
    assert f"nice -n 5 bash {wrapper} /venv/bin/python -u " in wrapped
    code = [line for line in wrapper.read_text().splitlines() if not line.startswith("#")]
    assert not any(line.lstrip().startswith("exec") for line in code)  # python is its child
    module = batch_script(load_truth("module_lock_deadlock"), tmp_path, "/venv/bin/python")
    assert "nice -n 5 /venv/bin/python -u -m trainer.main" in module


def test_multi_prog_scenarios_give_some_tasks_another_command(tmp_path):
    # GIVEN an srun --multi-prog scenario WHEN its batch script is built
    script = batch_script(load_truth("multi_prog_leader_stalled"), tmp_path, "/venv/bin/python")
    config = tmp_path / "multi-prog.conf"
    lines = script.splitlines()
    start = lines.index(f"cat > {config} <<'MULTIPROG'")
    entries = lines[start + 1:lines.index("MULTIPROG")]
    # THEN task 0 runs the leader with its argument, every other task the program, each
    # under nice as the other launchers' ranks, and one srun step reads that file
    leader = REPO_ROOT / "tests/scenarios/_multi_prog_leader.py"
    program = REPO_ROOT / "tests/scenarios/multi_prog_training.py"
    assert entries == [f"0 nice -n 5 /venv/bin/python -u {leader} --stall-tracker",
                       f"* nice -n 5 /venv/bin/python -u {program}"]
    assert lines[-1] == f"srun -K0 --nodes=2 --ntasks-per-node=2 --multi-prog {config}"


def test_het_scenarios_make_one_component_a_node_and_one_step_across_them(tmp_path):
    truth = load_truth("het_job_sleep_left_in")
    lines = batch_script(truth, tmp_path, "/venv/bin/python").splitlines()
    # THEN the shape is in the script (a component a node), not on sbatch's line
    assert lines[1:4] == ["#SBATCH --nodes=1 --ntasks-per-node=2", "#SBATCH hetjob",
                          "#SBATCH --nodes=1 --ntasks-per-node=2"]
    assert lines[-1].startswith("srun -K0 --het-group=0,1 nice -n 5 /venv/bin/python -u ")
    argv = sbatch_argv(truth, tmp_path, tmp_path / "job.sbatch")
    assert not any(a.startswith(("--nodes", "--ntasks-per-node")) for a in argv)


def test_salloc_scenarios_allocate_without_a_shell_and_srun_into_the_allocation(tmp_path):
    from scenarios.launch import interactive_step_script, salloc_argv

    truth = load_truth("salloc_mismatched_collectives")
    assert salloc_argv(truth)[:2] == ["salloc", "--no-shell"]
    assert "--nodes=2" in salloc_argv(truth) and "--ntasks-per-node=2" in salloc_argv(truth)
    lines = interactive_step_script(truth, tmp_path, "/venv/bin/python", "77").splitlines()
    # THEN the step joins allocation 77 from outside it, with the batch scripts' environment
    assert lines[-1].startswith("srun --jobid=77 -K0 --nodes=2 --ntasks-per-node=2 nice -n 5 ")
    assert f"export SLURMDIAG_SCENARIO_DIR={tmp_path}" in lines


def test_timeout_wrapper_leaves_timeout_as_the_ranks_parent():
    code = [line for line in (REPO_ROOT / "tests/scenarios/run_under_timeout.sh").read_text()
            .splitlines() if line and not line.startswith("#")]
    assert code[-1] == 'exec timeout --kill-after=30 7200 "$@"'


# ---------------------------------------------------------------- launch scripts (pure)

def test_srun_batch_script_keeps_survivors_and_limits_time(tmp_path):
    # GIVEN an srun scenario WHEN its batch script and sbatch line are built
    truth = load_truth("dead_rank")
    script = batch_script(truth, tmp_path, "/venv/bin/python")
    argv = sbatch_argv(truth, tmp_path, tmp_path / "job.sbatch")
    # THEN srun does not kill the step when a task exits non-zero, and the job ends by itself
    assert "srun -K0 --nodes=2 --ntasks-per-node=2 nice -n 5 /venv/bin/python -u " in script
    assert str(REPO_ROOT / "tests/scenarios/dead_rank.py") in script
    assert f"export SLURMDIAG_SCENARIO_DIR={tmp_path}" in script
    assert f"--time={TIME_LIMIT_MINUTES}" in argv and TIME_LIMIT_MINUTES <= 30
    assert f"--output={tmp_path}/job-%j.out" in argv and "--parsable" in argv


def test_torchrun_in_the_batch_script_runs_without_srun_on_one_node(tmp_path):
    truth = load_truth("mismatched_collectives_batch_torchrun")
    script = batch_script(truth, tmp_path, "/venv/bin/python")
    assert "nice -n 5 /venv/bin/torchrun --standalone --nproc-per-node=4 --max-restarts=0 " in script
    assert "srun" not in script.split("echo", 1)[1]
    with pytest.raises(ScenarioError, match="one node"):
        batch_script({**truth, "nodes": 2}, tmp_path, "/venv/bin/python")


def test_background_ranks_start_from_the_batch_script_each_with_its_rank(tmp_path):
    script = batch_script(load_truth("mismatched_collectives_background"), tmp_path,
                          "/venv/bin/python")
    body = script.split("echo", 1)[1]
    assert "srun" not in body and body.rstrip().endswith("wait")
    for rank in range(4):
        assert f"RANK={rank} LOCAL_RANK={rank} nice -n 5 /venv/bin/python -u " in body
    assert "export MASTER_ADDR=127.0.0.1 " in body and " WORLD_SIZE=4" in body


def test_torchrun_batch_script_starts_one_agent_per_node(tmp_path):
    truth = load_truth("rank_gated_collective_torchrun")
    script = batch_script(truth, tmp_path, "/venv/bin/python")
    assert "srun -K0 --nodes=2 --ntasks=2 --ntasks-per-node=1 bash -c" in script
    assert "--nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d" in script
    assert "/venv/bin/torchrun" in script


# ---------------------------------------------------------------- the ranks' harness (pure)

@pytest.mark.parametrize(("nodelist", "first"), [
    ("node[001-004]", "node001"),
    ("node[003,005-007],gpu1", "node003"),
    ("gpu7,gpu8", "gpu7"),
    ("r[2-3]n[1-2]", "r2n1"),
    ("login", "login"),
])
def test_first_hostname(nodelist, first):
    assert harness.first_hostname(nodelist) == first


def test_rank_comes_from_torchrun_before_slurm():
    env = {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "TORCHELASTIC_RUN_ID": "7",
           "SLURM_PROCID": "1", "SLURM_NTASKS": "2"}
    info = harness.rank_info(env)
    assert (info.rank, info.world_size, info.local_rank, info.launcher) == (5, 8, 1, "torchrun")


def test_rank_comes_from_slurm_under_srun():
    env = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_NODEID": "1"}
    info = harness.rank_info(env)
    assert (info.rank, info.world_size, info.local_rank, info.node_rank) == (3, 4, 1, 1)
    assert info.launcher == "srun"


def test_ports_differ_between_jobs_and_stay_out_of_the_ephemeral_range():
    ports = {harness.derived_ports(job)[i] for job in range(1000, 1100) for i in (0, 1)}
    assert len(ports) == 200
    assert all(20000 <= p < 30000 for p in ports)


def test_master_address_prefers_the_environment():
    assert harness.master_address({"MASTER_ADDR": "10.1.2.3"}) == "10.1.2.3"
    assert harness.master_address({}) == "127.0.0.1"


def test_a_resubmitted_scenario_is_not_ready_on_the_last_runs_rank_files(tmp_path, monkeypatch):
    # GIVEN a state directory holding every rank file of an earlier run of the scenario
    import subprocess

    from scenarios import launch

    truth = launch.load_truth("store_wait")
    for rank in range(int(truth["world_size"])):
        (tmp_path / f"rank{rank}.json").write_text(json.dumps({"rank": rank, "pid": 1}))
    monkeypatch.setattr(launch, "_run", lambda argv, **kw: subprocess.CompletedProcess(
        argv, 0, "77\n", ""))
    # WHEN it is submitted again there (sbatch answering job 77)
    run = launch.submit("store_wait", tmp_path)
    # THEN the new run has no rank reported yet: it waits for its own job's ranks
    assert run.job_id == "77"
    assert run.rank_records() == {}


def test_a_monitor_scenario_starts_its_monitor_step_first(tmp_path):
    script = batch_script(load_truth("node_monitor_step"), tmp_path, "/venv/bin/python")
    lines = script.splitlines()
    monitor = next(i for i, line in enumerate(lines) if "_node_monitor.py" in line)
    training = next(i for i, line in enumerate(lines) if "rank_gated_collective.py" in line)
    assert monitor < training
    assert lines[monitor].startswith("srun --overlap --nodes=2 --ntasks=2 --ntasks-per-node=1 ")
    assert lines[monitor].endswith(" &") and lines[monitor + 1].startswith("sleep ")


@pytest.mark.parametrize(("asked", "seen"), [(None, "1"), ("default", "unset"), ("4", "4")])
def test_a_scenario_runs_one_intra_op_thread_unless_the_run_asks_for_others(tmp_path, asked, seen):
    # GIVEN the environment lines of a batch script, run by bash as the job runs them, with
    # and without tests/accuracy.py --threads (SLURMDIAG_SCENARIO_THREADS)
    import os
    import subprocess

    from scenarios.launch import _environment_lines

    lines = _environment_lines(tmp_path)
    env = {"PATH": os.environ["PATH"], **({"SLURMDIAG_SCENARIO_THREADS": asked} if asked else {})}
    out = subprocess.run(["bash", "-c", "\n".join([*lines, 'echo "${OMP_NUM_THREADS-unset}"'])],
                         env=env, capture_output=True, text=True, check=True).stdout
    # THEN OMP_NUM_THREADS is 1 by default, left unset for "default" (torch's own count)
    assert out.strip() == seen
