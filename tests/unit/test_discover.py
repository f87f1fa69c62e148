"""Discovery: scontrol text through an injected runner (no subprocess), then the job checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmdiag.errors import JobNotFound, JobNotRunning, NotPermitted, SlurmUnavailable, UsageError
from slurmdiag.slurm.discover import (
    check_caller_may_attach,
    discover_job,
    job_ref_from_user,
    parse_slurm_user,
    parse_slurm_version,
    to_job,
)
from slurmdiag.transport.run import CommandResult

FIXTURES = Path(__file__).parent.parent / "fixtures" / "slurm"


class FakeRunner:
    """Answers each argv prefix with a canned CommandResult and records the calls."""

    def __init__(self, answers):
        self.answers = answers
        self.calls = []

    def __call__(self, argv, timeout, **kwargs):
        self.calls.append(list(argv))
        for prefix, result in self.answers:
            if list(argv[: len(prefix)]) == prefix:
                return CommandResult(tuple(argv), *result)
        raise AssertionError(f"unexpected command {argv}")


VERSION_2205 = (["scontrol", "--version"], (0, "slurm-wlm 22.05.8\n", ""))


def job_text(state: str, reason: str = "None", nodes: str = "node[001-002]") -> str:
    return (
        f"JobId=42 JobName=train UserId=alice(1000) GroupId=alice(1000) Priority=1 "
        f"JobState={state} Reason={reason} Dependency=(null) RunTime=00:05:00 "
        f"TimeLimit=00:30:00 SubmitTime=2026-11-22T00:00:00 StartTime=2026-11-22T00:00:01 "
        f"Partition=debug NodeList={nodes} NumNodes=2 NumCPUs=4 NumTasks=4 "
        f"StdOut=/tmp/job-42.out StdErr=/tmp/job-42.out\n"
    )


def test_running_job_is_found_with_its_nodes_and_logs():
    # GIVEN scontrol reports a running 2-node job
    runner = FakeRunner([VERSION_2205, (["scontrol", "show", "job"], (0, job_text("RUNNING"), ""))])
    # WHEN it is discovered
    job = discover_job(job_ref_from_user("42"), runner)
    # THEN nodes are expanded and the text form was used (22.05 has no scontrol --json)
    assert job.nodes == ("node001", "node002")
    snapshot_job = to_job(job)
    assert snapshot_job.user == "alice" and snapshot_job.ntasks == 4
    assert snapshot_job.stdout == "/tmp/job-42.out"
    assert ["scontrol", "show", "job", "-d", "-o", "42"] in runner.calls


@pytest.mark.parametrize(
    "state, error", [("PENDING", JobNotRunning), ("COMPLETED", JobNotRunning), ("SUSPENDED", JobNotRunning)]
)
def test_job_that_is_not_running_is_refused_with_its_state(state, error):
    # GIVEN scontrol reports the job in a state without processes
    runner = FakeRunner([VERSION_2205, (["scontrol", "show", "job"], (0, job_text(state, "Resources", "(null)"), ""))])
    # WHEN / THEN discovery says why, naming the state, with a hint
    with pytest.raises(error) as info:
        discover_job(job_ref_from_user("42"), runner)
    assert state in info.value.message
    assert info.value.hint
    assert info.value.exit_code == 4


def test_unknown_job_is_job_not_found():
    runner = FakeRunner([VERSION_2205, (["scontrol", "show", "job"],
                                        (1, "", "slurm_load_jobs error: Invalid job id specified\n"))])
    with pytest.raises(JobNotFound) as info:
        discover_job(job_ref_from_user("99"), runner)
    assert info.value.exit_code == 3


def test_controller_down_is_slurm_unavailable():
    runner = FakeRunner([VERSION_2205, (["scontrol", "show", "job"],
                                        (1, "", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n"))])
    with pytest.raises(SlurmUnavailable):
        discover_job(job_ref_from_user("99"), runner)


def test_missing_scontrol_is_slurm_unavailable():
    def runner(argv, timeout, **kwargs):
        return CommandResult(tuple(argv), None, "", "", start_error="[Errno 2] No such file or directory: 'scontrol'")

    with pytest.raises(SlurmUnavailable) as info:
        discover_job(job_ref_from_user("1"), runner)
    assert info.value.exit_code == 5


@pytest.mark.parametrize("text", ["abc", "12.3", "12_", "-1", "1_2_3", "12+x", ""])
def test_bad_job_id_forms_are_usage_errors(text):
    with pytest.raises(UsageError) as info:
        job_ref_from_user(text)
    assert info.value.exit_code == 2


def test_array_task_record_is_selected_from_the_real_fixture():
    # GIVEN the real scontrol record of an array task (Slurm 17.11/18.08 era)
    text = (FIXTURES / "irush_array_task_completed.txt").read_text()
    runner = FakeRunner([VERSION_2205, (["scontrol", "show", "job"], (0, text, ""))])
    # WHEN the user names the task by array id and task id
    with pytest.raises(JobNotRunning) as info:
        discover_job(job_ref_from_user("2398463_150"), runner)
    # THEN that task is found, and refused because it has COMPLETED
    assert "COMPLETED" in info.value.message


ARRAY_TWO = FIXTURES / "local_slurm22_array_two_tasks_running.txt"


def _array_runner(text: str) -> FakeRunner:
    return FakeRunner([VERSION_2205, (["scontrol", "show", "job"], (0, text, ""))])


def test_an_array_id_that_is_also_a_tasks_job_id_names_the_array():
    # GIVEN the real records of array 1 on the local cluster: task 1_1 is job 1 (Slurm gives
    # the array the id of its first record, which ends as its last task), task 1_0 is job 2,
    # both running
    text = ARRAY_TWO.read_text()
    # WHEN the user attaches to "1"
    with pytest.raises(UsageError) as info:
        discover_job(job_ref_from_user("1"), _array_runner(text))
    # THEN it is the array, not task 1_1 alone: the running tasks are named, in order
    assert "array with 2 tasks, 2 running" in info.value.message
    assert info.value.hint == "name one task: 1_0, 1_1" and info.value.exit_code == 2
    # AND a task named either way is that task
    assert discover_job(job_ref_from_user("1_0"), _array_runner(text)).job_id == "2"
    assert discover_job(job_ref_from_user("1_1"), _array_runner(text)).job_id == "1"


def test_a_raw_job_id_is_that_job_even_where_it_is_its_arrays_id():
    # GIVEN the same records, and the job id as squeue's %A prints it (the watchdog's)
    from slurmdiag.slurm.parse import parse_job_id

    job = discover_job(parse_job_id("1"), _array_runner(ARRAY_TWO.read_text()), raw_id=True)
    # THEN it is task 1_1, job 1 itself
    assert (job.job_id, job.array_task_id) == ("1", "1")


def test_the_watchdog_attaches_to_an_array_task_by_its_array_form():
    # GIVEN the running tasks as scontrol (or squeue) gives them
    from slurmdiag.slurm.parse import parse_scontrol_job
    from slurmdiag.watch.watchdog import attach_name

    jobs = parse_scontrol_job(ARRAY_TWO.read_text())
    # THEN each is attached to as squeue shows it, never by the id its array shares
    assert sorted(attach_name(j) for j in jobs) == ["1_0", "1_1"]


def test_an_array_with_one_task_running_is_that_task():
    # GIVEN the same array with task 1_1 finished: only 1_0 runs
    lines = ARRAY_TWO.read_text().splitlines()
    done = [line.replace("JobState=RUNNING", "JobState=COMPLETED")
            if line.startswith("JobId=1 ") else line for line in lines]
    job = discover_job(job_ref_from_user("1"), _array_runner("\n".join(done) + "\n"))
    # THEN "1" is the one running task
    assert (job.job_id, job.array_task_id) == ("2", "0")


def test_json_is_used_on_slurm_23_02_and_later():
    # GIVEN a Slurm 25.11 whose scontrol --json gives the real slurmrestd v0.0.44 document
    text = (FIXTURES / "slurmrestd_25.11_v0044_job_running.json").read_text()
    runner = FakeRunner([(["scontrol", "--version"], (0, "slurm 25.11.0\n", "")),
                         (["scontrol", "--json"], (0, text, ""))])
    from slurmdiag.slurm.parse import parse_scontrol_job_json

    expected = parse_scontrol_job_json(text)[0]
    # WHEN that job is discovered
    job = discover_job(job_ref_from_user(expected.job_id), runner)
    # THEN the JSON form was used and no text call was made
    assert job.job_id == expected.job_id
    assert not any(call[:3] == ["scontrol", "show", "job"] for call in runner.calls)


def test_version_parsing():
    assert parse_slurm_version("slurm-wlm 22.05.8") == (22, 5)
    assert parse_slurm_version("slurm 25.11.0-1") == (25, 11)
    assert parse_slurm_version("garbage") is None


# --------------------------------------------------------------------------------------------
# Error paths a new user meets: no Slurm configuration, another user's job
# --------------------------------------------------------------------------------------------


def test_no_slurm_config_is_one_line_from_scontrols_fatal_line():
    # GIVEN scontrol's real stderr without SLURM_CONF on a host without Slurm's DNS records
    stderr = (FIXTURES / "scontrol_no_config_dns.stderr").read_text()
    runner = FakeRunner([VERSION_2205, (["scontrol", "show"], (1, "", stderr))])
    # WHEN the job is looked up
    with pytest.raises(SlurmUnavailable) as info:
        discover_job(job_ref_from_user("42"), runner)
    # THEN one line taken from the fatal line, and the hint to set SLURM_CONF
    assert info.value.message == "scontrol: Could not establish a configuration source"
    assert "SLURM_CONF" in info.value.hint


def test_slurm_conf_naming_no_file_fails_at_once(tmp_path, monkeypatch):
    # GIVEN SLURM_CONF pointing nowhere (scontrol would retry for 60 s)
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "missing.conf"))
    runner = FakeRunner([])
    with pytest.raises(SlurmUnavailable) as info:
        discover_job(job_ref_from_user("42"), runner)
    assert "is not a file" in info.value.message and runner.calls == []


def _running_job_of(owner: str):
    from slurmdiag.slurm.parse import parse_scontrol_job

    return parse_scontrol_job(job_text("RUNNING").replace("alice", owner))[0]


def test_parse_slurm_user_from_a_real_show_config():
    text = (FIXTURES / "local_22.05_show_config.txt").read_text()
    assert parse_slurm_user(text) == "root"
    assert parse_slurm_user("SlurmUser               = slurm(64030)\n") == "slurm"
    assert parse_slurm_user("nothing") is None


@pytest.mark.parametrize("caller, uid, slurm_user, allowed", [
    ("alice", 1000, "slurm", True),  # the owner
    ("root", 0, "slurm", True),  # root
    ("slurm", 64030, "slurm", True),  # SlurmUser may add steps to any job
    ("bob", 1001, "slurm", False),  # anyone else
])
def test_another_users_job_is_refused_before_any_step(caller, uid, slurm_user, allowed):
    # GIVEN alice's running job and a caller
    config = f"SlurmUser               = {slurm_user}(64030)\n"
    runner = FakeRunner([(["scontrol", "show", "config"], (0, config, ""))])
    job = _running_job_of("alice")
    if allowed:
        check_caller_may_attach(job, job_ref_from_user("42"), runner, caller=caller, uid=uid)
        return
    # THEN a one-line refusal naming the owner and what is needed (exit 11)
    with pytest.raises(NotPermitted) as info:
        check_caller_may_attach(job, job_ref_from_user("42"), runner, caller=caller, uid=uid)
    assert "belongs to alice, not to bob" in info.value.message
    assert "sudo -u alice" in info.value.hint and info.value.exit_code == 11


def test_another_users_job_over_ssh_needs_the_owners_login():
    job = _running_job_of("alice")
    ref = job_ref_from_user("42")
    check_caller_may_attach(job, ref, FakeRunner([]), caller="bob", uid=1001, transport="ssh",
                            ssh_user="alice")
    with pytest.raises(NotPermitted):
        check_caller_may_attach(job, ref, FakeRunner([]), caller="bob", uid=1001, transport="ssh")


# ------------------------------------------------------------ heterogeneous jobs, whole


def _het_runner(name: str = "local_22.05_show_job_d_o_het_running.txt") -> FakeRunner:
    text = (FIXTURES / name).read_text()
    return FakeRunner([VERSION_2205, (["scontrol", "show", "job"], (0, text, ""))])


def test_a_het_job_by_its_plain_id_is_every_component_leader_first():
    from slurmdiag.slurm.discover import discover_components, whole_het_job

    # GIVEN the real running het job 5 (5+0 on node002, 5+1 on node003, local 22.05 capture)
    components = discover_components(job_ref_from_user("5"), _het_runner())
    # THEN both components come, leader first; looked at together they are one job
    assert [(j.job_id, j.het_job_offset, j.nodes) for j in components] == [
        ("5", 0, ("node002",)), ("6", 1, ("node003",))]
    whole = whole_het_job(components)
    assert (whole.job_id, whole.het_job_id, whole.het_job_offset) == ("5", "5", None)
    assert whole.nodes == ("node002", "node003") and whole.num_nodes == 2
    # AND a component named alone is that component only
    (one,) = discover_components(job_ref_from_user("5+1"), _het_runner())
    assert (one.job_id, one.het_job_offset) == ("6", 1)


def test_het_components_sharing_a_node_are_attached_one_at_a_time():
    from slurmdiag.slurm.discover import discover_components

    # GIVEN the same job with both components on node002 (each node's collector looks for one
    # job's processes, so the two cannot be looked at together)
    text = (FIXTURES / "local_22.05_show_job_d_o_het_running.txt").read_text()
    runner = FakeRunner([VERSION_2205, (["scontrol", "show", "job"],
                                        (0, text.replace("node003", "node002"), ""))])
    # THEN the plain id is refused with the components named, as before
    with pytest.raises(UsageError, match=r"heterogeneous with 2 components") as caught:
        discover_components(job_ref_from_user("5"), runner)
    assert caught.value.hint == "name one component: 5+0, 5+1"
