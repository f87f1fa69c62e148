"""`slurmdiag doctor`: the node program's decisions on text, the step's output, the exit code."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmdiag.collector import doctor_node as node
from slurmdiag.doctor import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_WARNING,
    Check,
    directory_check,
    node_checks_from_output,
    worst_exit,
)
from slurmdiag.transport.run import CommandResult

# /proc/self/status lines as Linux prints them: root in a container (CAP_SYS_PTRACE = bit 19 set)
# and an ordinary user (no capability).
STATUS_ROOT = "Name:\tpython3\nCapEff:\t000001fffeffffff\nSeccomp:\t0\n"
STATUS_USER = "Name:\tpython3\nCapEff:\t0000000000000000\nSeccomp:\t2\n"


@pytest.mark.parametrize("scope, status, file_caps, expected", [
    (None, STATUS_USER, False, "ok"),  # no Yama
    ("0\n", STATUS_USER, False, "ok"),
    ("1\n", STATUS_USER, False, "failed"),  # the ranks are not the collector's children
    ("1\n", STATUS_ROOT, False, "ok"),  # CAP_SYS_PTRACE in effect
    ("1\n", STATUS_USER, True, "ok"),  # setcap cap_sys_ptrace+ep py-spy
    ("2\n", STATUS_USER, False, "failed"),
    ("2\n", STATUS_ROOT, False, "ok"),
    ("3\n", STATUS_ROOT, True, "failed"),  # nobody, not even root
])
def test_ptrace_scope_decision(scope, status, file_caps, expected):
    result = node.ptrace_decision(scope, node.parse_cap_eff(status), file_caps)
    assert result["status"] == expected
    if expected == "failed":
        assert result["fix"] and "ptrace_scope=" + scope.strip() in result["detail"]


def test_capabilities_and_seccomp_are_read_from_proc_status():
    assert node.parse_cap_eff(STATUS_ROOT) >> node.CAP_SYS_PTRACE & 1 == 1
    assert node.parse_cap_eff(STATUS_USER) == 0 and node.parse_cap_eff("") == 0
    assert node.parse_seccomp(STATUS_USER) == 2 and node.parse_seccomp("Name: x") is None
    # And from this process's real status file.
    assert isinstance(node.parse_cap_eff(Path("/proc/self/status").read_text()), int)


MOUNTINFO = (
    "25 24 0:23 / /dev/shm rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,size=24683656k\n"
    "30 25 0:27 / / rw,relatime - overlay overlay rw,lowerdir=/x\n"
    "31 25 0:28 / /scratch ro,relatime - nfs srv:/s ro,vers=4\n"
)


def test_mount_options_of_the_cache_directory():
    point, options = node.parse_mountinfo(MOUNTINFO, "/dev/shm")
    assert point == "/dev/shm" and "noexec" in options
    assert node.parse_mountinfo(MOUNTINFO, "/scratch/cache")[0] == "/scratch"
    assert node.parse_mountinfo(MOUNTINFO, "/tmp")[0] == "/"
    # The real mountinfo of this host parses too.
    assert node.parse_mountinfo(Path("/proc/self/mountinfo").read_text(), "/dev/shm")[0]


def test_cache_decision():
    assert node.cache_decision("/dev/shm", True, True, ["rw", "noexec"], "")["status"] == "ok"
    assert "noexec does not matter" in node.cache_decision(
        "/dev/shm", True, True, ["noexec"], "")["detail"]
    assert node.cache_decision("/scratch", True, True, ["ro"], "")["status"] == "warning"
    assert node.cache_decision("/x", False, False, [], "")["status"] == "warning"
    assert node.cache_decision("/dev/shm", True, False, [], "")["status"] == "warning"
    assert node.cache_decision("/dev/shm", True, True, [], "not 0700")["status"] == "warning"
    assert node.cache_decision("", False, False, [], "")["status"] == "ok"


def test_container_hints():
    assert node.container_hints({}, "0::/user.slice\n", []) == []
    hints = node.container_hints({"APPTAINER_CONTAINER": "/c.sif"}, "0::/kubepods/pod1\n",
                                 ["/.dockerenv"])
    assert hints == ["APPTAINER_CONTAINER=/c.sif", "/.dockerenv", "cgroup names kubepods"]


def frames(name: str, checks: list[dict]) -> str:
    return "".join(node.frame_lines(name, {"format": node.FORMAT, "node": name,
                                           "checks": checks}))


def test_step_output_is_one_line_per_check_and_a_silent_node_fails():
    # GIVEN two nodes that answered alike and one whose task never ran
    same = [node.check("strace", "ok", "/usr/bin/strace")]
    out = frames("n1", same) + frames("n2", same)
    result = CommandResult(("srun",), 1, out, "srun: error: n3: task 2: Exited with exit code 1\n")
    checks = node_checks_from_output(["n1", "n2", "n3"], result, ["srun", "--overlap"])
    # THEN one line for both nodes' strace, one failed line for n3 with srun's reason
    assert [(c.name, c.status, c.where) for c in checks] == [
        ("srun", "ok", "n[1-2]"), ("srun", "failed", "n3"), ("strace", "ok", "n[1-2]")]
    assert "task 2: Exited" in checks[1].detail
    assert worst_exit(checks) == EXIT_FAILED


def test_exit_code_is_the_worst_check():
    ok, warn, bad = (Check("x", s, "d") for s in ("ok", "warning", "failed"))
    assert (worst_exit([ok]), worst_exit([ok, warn]), worst_exit([warn, bad, ok])) == (
        EXIT_OK, EXIT_WARNING, EXIT_FAILED)
    assert bad.line().startswith("failed  controller: x: d")


def test_directory_check_tries_for_real(tmp_path):
    assert directory_check("report dir", tmp_path).status == "ok"
    assert directory_check("report dir", tmp_path / "a" / "b").status == "ok"
    proc = directory_check("report dir", Path("/proc/slurmdiag-test"))
    assert proc.status == "failed" and "cannot be created in /proc" in proc.detail


SLURM_FIXTURES = Path(__file__).parent.parent / "fixtures" / "slurm"


def test_a_het_job_by_its_plain_id_is_checked_a_step_a_component():
    from slurmdiag.doctor import node_checks
    from slurmdiag.slurm.discover import caller_name

    # GIVEN the real running het job 5 (5+0 on node002, 5+1 on node003, local 22.05 capture);
    # srun answers for the component its --het-group names, and 5+1's node has no strace
    het = (SLURM_FIXTURES / "local_22.05_show_job_d_o_het_running.txt").read_text()
    ok, missing = node.check("strace", "ok", "/usr/bin/strace"), node.check(
        "strace", "failed", "not found", "apt-get install strace")
    steps = []

    def runner(argv, timeout, **kwargs):
        argv = list(argv)
        if argv[:2] == ["scontrol", "--version"]:
            return CommandResult(tuple(argv), 0, "slurm-wlm 22.05.8\n", "")
        if argv[:3] == ["scontrol", "show", "job"]:
            return CommandResult(tuple(argv), 0, het, "")
        if argv[:3] == ["scontrol", "show", "config"]:
            return CommandResult(tuple(argv), 0, f"SlurmUser = {caller_name()}(1)\n", "")
        assert argv[0] == "srun", argv
        steps.append([a for a in argv if a.startswith(("--jobid", "--het-group", "--nodelist"))])
        if "--het-group=0" in argv:
            return CommandResult(tuple(argv), 0, frames("node002", [ok]), "")
        return CommandResult(tuple(argv), 0, frames("node003", [missing]), "")

    checks = node_checks(job="5", nodes_list=None, pyspy_path=None, nvidia_smi_path=None,
                         node_python=None, node_cache=None, timeout_s=20, runner=runner)
    # THEN one step went into each component, through the leader's id
    assert sorted(steps) == [["--jobid=5", "--het-group=0", "--nodelist=node002"],
                             ["--jobid=5", "--het-group=1", "--nodelist=node003"]]
    # AND the lines cover both components' nodes: one srun line, each node's own finding
    assert [(c.name, c.status, c.where) for c in checks] == [
        ("srun", "ok", "node[002-003]"), ("strace", "ok", "node002"),
        ("strace", "failed", "node003")]
    assert checks[0].detail == "step with --overlap --gres=gpu:0 ran on 2/2 node(s)"
    assert worst_exit(checks) == EXIT_FAILED


def test_a_silent_component_fails_with_its_own_reason_and_the_other_is_kept():
    from slurmdiag.doctor import node_checks_from_steps

    # GIVEN two steps: one answered, one whose srun could not start
    same = [node.check("strace", "ok", "/usr/bin/strace")]
    answered = CommandResult(("srun",), 0, frames("a1", same), "")
    refused = CommandResult(("srun",), 1, "", "srun: error: Unable to create step for job 5\n")
    checks = node_checks_from_steps([(["a1"], answered, ["srun", "--overlap"]),
                                     (["b1", "b2"], refused, ["srun", "--overlap"])])
    # THEN the answered node's lines stay, the silent component's nodes fail with srun's line
    assert [(c.name, c.status, c.where) for c in checks] == [
        ("srun", "ok", "a1"), ("srun", "failed", "b[1-2]"), ("strace", "ok", "a1")]
    assert "ran on 1/3 node(s)" in checks[0].detail
    assert "Unable to create step for job 5" in checks[1].detail
