"""From the merged srun output to snapshot Nodes: per-node outcomes, then assembly (pure)."""

from __future__ import annotations

import json
from pathlib import Path

from slurmdiag.assemble import flight_recorder_section, node_from_document, node_from_outcome
from slurmdiag.options import AttachOptions
from slurmdiag.transport import collect
from slurmdiag.transport.collect import node_command
from slurmdiag.transport.framing import encode_frames
from slurmdiag.transport.run import CommandResult
from slurmdiag.transport.srun import (
    GO_AFTER_FIRST_S,
    SrunTransport,
    StartGate,
    nodes_without_system_python,
    outcomes_from_output,
    srun_argv,
)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "collector"
REAL_STDOUT = (FIXTURES / "srun_stdout_2nodes_simple.txt").read_text()
REAL_DOC = json.loads((FIXTURES / "node001_simple_sleep.json").read_text())
# Slurm 22.05's stderr when the task's program does not exist on the nodes (/usr/bin/python3-nope)
EXECVE_STDERR = (FIXTURES / "srun_stderr_22.05_execve_missing_interpreter.txt").read_text()


def result(stdout="", stderr="", timed_out=False, returncode=0):
    return CommandResult(("srun",), returncode, stdout, stderr, timed_out, 1.0)


def test_srun_argv_is_one_overlapping_step_without_gpus():
    # GIVEN a 3-node job
    options = AttachOptions(timeout_s=20)
    argv = srun_argv("77", ["n1", "n2", "n3"], options)
    # THEN it is one srun step into the job, one task per node, not taking the job's GPUs
    assert argv[0] == "srun"
    for flag in ("--jobid=77", "--overlap", "--gres=gpu:0", "--nodes=3", "--ntasks-per-node=1",
                 "--nodelist=n1,n2,n3", "--kill-on-bad-exit=0", "--mpi=none"):
        assert flag in argv
    # AND each task is the node command (nodes need no install), with the args last, and the
    # collector's source in the step's environment, not in argv (Python decodes argv at start)
    command = node_command("77", options, source_in_env=True, aligned=True)
    assert argv[-len(command):] == command and argv[-2] == "-"
    digest, source = collect.collector_payload()
    assert argv[-3] == digest and source not in argv
    env = collect.node_environment({"PATH": "/usr/bin", "SLURM_JOB_ID": "5"})
    assert env == {"PATH": "/usr/bin", collect.PAYLOAD_ENV: source}
    args = json.loads(argv[-1])
    assert args["job_id"] == "77" and args["deadline_s"] < 20
    # AND srun passes its stdin to every task: the go each collector waits for before its
    # first sample (at most align_s)
    assert "--input=all" in argv and args["align_s"] == options.align_s > 0


def test_without_alignment_the_step_has_no_input_and_the_collectors_do_not_wait():
    argv = srun_argv("77", ["n1", "n2"], AttachOptions(align_s=0))
    assert "--input=all" not in argv and "align_s" not in json.loads(argv[-1])
    # AND a transport that sends no go (ssh) never asks its collectors to wait for one
    assert "align_s" not in json.loads(node_command("77", AttachOptions(), "n1")[-1])


def test_het_component_step_names_the_leader_and_the_group():
    # GIVEN component +1 of heterogeneous job 193 (its own job id is 194)
    argv = srun_argv("194", ["node002"], AttachOptions(), het_group=("193", 1))
    # THEN srun gets the leader's id and the group; the collector looks for the component's id
    assert "--jobid=193" in argv and "--het-group=1" in argv
    assert not any(a.startswith("--jobid=194") for a in argv)
    assert json.loads(argv[-1])["job_id"] == "194"


def test_real_merged_output_gives_every_node():
    # GIVEN the stdout of a real srun step over 2 nodes of the local cluster
    out = outcomes_from_output(["node001", "node002"], result(REAL_STDOUT), "srun")
    # THEN both nodes are ok with their documents
    assert {n: o.status for n, o in out.nodes.items()} == {"node001": "ok", "node002": "ok"}
    assert out.nodes["node002"].document["node"] == "node002"


def test_node_that_started_but_did_not_finish_is_a_timeout_with_reason():
    # GIVEN node001 answered, node002 said hello only, node003 never started, and srun timed out
    stdout = encode_frames("node001", REAL_DOC) + "@SDG1-HELLO node002 99\n"
    out = outcomes_from_output(["node001", "node002", "node003"],
                               result(stdout, timed_out=True, returncode=-15), "srun")
    # THEN each node's status says what happened, and node001's data is kept
    assert out.nodes["node001"].status == "ok"
    assert out.nodes["node002"].status == "timeout"
    assert out.nodes["node002"].message == (
        "collector started but did not finish before the deadline")
    assert out.nodes["node003"].status == "timeout"
    assert "never started" in out.nodes["node003"].message


def test_node_that_started_and_stopped_before_the_deadline_is_an_error_not_damage():
    # GIVEN node002 said hello and nothing more, and srun ended before the deadline
    stdout = encode_frames("node001", REAL_DOC) + "@SDG1-HELLO node002 99\n"
    out = outcomes_from_output(["node001", "node002"], result(stdout, returncode=1), "srun")
    # THEN it is an error that says its collector started, not output damaged in transit
    assert out.nodes["node002"].status == "error"
    assert out.nodes["node002"].message == "collector started but returned no result"


def test_refused_step_is_reported_with_the_ssh_hint():
    # GIVEN srun kept waiting because the nodes were busy, until the deadline
    stderr = "srun: Job 77 step creation temporarily disabled, retrying (Requested nodes are busy)\n"
    out = outcomes_from_output(["n1"], result("", stderr, timed_out=True), "srun")
    # THEN the node carries srun's words and a warning suggests the ssh transport
    assert "Requested nodes are busy" in out.nodes["n1"].message
    assert any("--transport ssh" in w for w in out.warnings)


def test_damaged_output_marks_only_that_node():
    # GIVEN node002's frames lost a chunk in transit
    lines = encode_frames("node002", REAL_DOC | {"node": "node002"}).splitlines()
    frames = [ln for ln in lines if ln.startswith("@SDG1 ")]
    assert len(frames) > 1
    stdout = encode_frames("node001", REAL_DOC) + "\n".join(frames[1:]) + "\n"
    out = outcomes_from_output(["node001", "node002"], result(stdout), "srun")
    # THEN node001 is fine and node002 is an error saying its output was damaged
    assert out.nodes["node001"].status == "ok"
    assert out.nodes["node002"].status == "error"
    assert "damaged" in out.nodes["node002"].message


def test_real_document_assembles_into_a_node():
    # GIVEN the real document of node001 (2 ranks sleeping, GPUs from the nvidia-smi stand-in)
    node = node_from_document("node001", REAL_DOC)
    # THEN ranks carry identity, stacks, strace and the process state
    assert [r.rank for r in node.ranks] == [0, 1]
    rank = node.ranks[0]
    assert rank.launcher == "srun" and rank.local_rank == 0 and rank.world_size == 4
    assert len(rank.samples) == 2
    assert rank.samples[0].threads[0].frames[0].function == "wait_forever"
    assert rank.strace is not None and rank.strace.status == "ok"
    assert rank.state == "S"
    # AND GPUs were read from the XML fallback of the replayed nvidia-smi (A100 with MIG)
    assert node.gpus.status == "ok"
    assert node.gpus.gpus[0].name == "NVIDIA A100-SXM4-80GB"
    assert "lo" in [i.name for i in node.nics.interfaces]
    # AND a document from before collectors measured their CPU has none
    assert node.collector_cpu_s is None
    assert node_from_document("node001", {**REAL_DOC, "cpu_s": 0.0123}).collector_cpu_s == 0.0123


def test_failed_outcome_keeps_status_and_message():
    from slurmdiag.transport.base import NodeOutcome

    node = node_from_outcome(NodeOutcome("n9", "unreachable", None, "the collector did not run"))
    assert (node.status, node.message, node.ranks) == ("unreachable", "the collector did not run", ())


def test_broken_document_is_an_error_node_not_an_exception():
    from slurmdiag.transport.base import NodeOutcome

    node = node_from_outcome(
        NodeOutcome("n1", "ok", {"format": 1, "processes": [{"role": "rank"}]}))
    assert node.status == "error" and "could not be read" in node.message


def test_document_of_another_format_is_refused_with_the_reason():
    from slurmdiag.transport.base import NodeOutcome

    # GIVEN a real document as a collector of another format version would label it
    document = dict(REAL_DOC, format=2)
    # WHEN it is assembled
    node = node_from_outcome(NodeOutcome("n1", "ok", document))
    # THEN the node is an error that names both formats, and nothing of it is guessed at
    assert node.status == "error" and not node.ranks
    assert "format 2" in node.message and "reads format 1" in node.message
    # AND the same document with the right format assembles
    assert node_from_outcome(NodeOutcome("n1", "ok", dict(REAL_DOC, format=1))).status == "ok"


def test_controller_reads_the_format_the_collector_writes():
    import ast

    from slurmdiag.node_document import NODE_DOCUMENT_FORMAT

    # The collector is stdlib-only and never imported by the controller: read its constant.
    source = (Path(collect.__file__).parent.parent / "collector" / "framing.py").read_text()
    values = [node.value.value for node in ast.parse(source).body
              if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
              and any(isinstance(t, ast.Name) and t.id == "FORMAT" for t in node.targets)]
    assert values == [NODE_DOCUMENT_FORMAT]


def test_flight_recorder_section_collects_dumps_and_missing_ranks():
    # GIVEN two ranks: one hooked with a dump, one not hooked
    fr = (Path(__file__).parent.parent / "fixtures/flight_recorder/local_gloo_torch2.13_hook_rank0.json").read_text()
    docs = {"n1": {"processes": [
        {"role": "rank", "rank": 0, "flight_recorder": {"status": "ok", "format": "json", "text": fr}},
        {"role": "rank", "rank": 1, "flight_recorder": {"status": "not_hooked", "message": "x"}},
    ]}}
    section = flight_recorder_section(docs, requested=True)
    assert list(section["dumps"]) == ["0"] and section["missing_ranks"] == [1]


def test_pickled_dump_with_code_is_refused():
    # GIVEN a pickle that would run code when loaded
    import base64
    import os
    import pickle

    class Evil:
        def __reduce__(self):
            return (os.system, ("true",))

    payload = base64.b64encode(pickle.dumps(Evil())).decode()
    docs = {"n1": {"processes": [{"role": "rank", "rank": 3, "flight_recorder": {
        "status": "ok", "format": "pickle", "base64": payload}}]}}
    # WHEN it is gathered THEN it is refused as unreadable, never executed
    section = flight_recorder_section(docs, requested=True)
    assert section["dumps"] == {}
    assert section["missing_ranks"] == [3]
    assert "refusing" in section["errors"][0]


def test_srun_environment_drops_the_callers_job_context():
    # GIVEN slurmdiag runs inside a job (a scrontab watchdog pass, an salloc shell)
    from slurmdiag.transport.collect import srun_environment

    env = {"SLURM_JOB_ID": "9", "SLURM_NTASKS": "1", "SLURM_MEM_PER_NODE": "1024",
           "SBATCH_PARTITION": "service", "SRUN_CPUS_PER_TASK": "4",
           "SLURM_CONF": "/etc/slurm/slurm.conf", "PATH": "/usr/bin"}
    # THEN the step into the attached job gets none of the variables srun reads as options
    assert srun_environment(env) == {"SLURM_CONF": "/etc/slurm/slurm.conf", "PATH": "/usr/bin"}


def test_srun_environment_is_an_allowlist_secrets_stay_on_the_controller():
    # GIVEN the controller's environment holds a webhook URL, tokens and the usual variables
    from slurmdiag.transport.collect import PAYLOAD_ENV, node_environment

    env = {"SLURMDIAG_WEBHOOK_URL": "https://hooks.example/T0/B0/s3cr3t",
           "SLACK_URL": "https://hooks.slack.com/services/T/B/x", "GITHUB_TOKEN": "ghp_x",
           "AWS_SECRET_ACCESS_KEY": "k", "PYTHONPATH": "/home/u/lib", "SSH_AUTH_SOCK": "/tmp/a",
           "PATH": "/usr/bin", "HOME": "/root", "LANG": "C.UTF-8", "LC_ALL": "C",
           "SLURM_CONF": "/etc/slurm/slurm.conf", "TMPDIR": "/scratch"}
    # WHEN the step's environment is built
    step = node_environment(env)
    # THEN only the allowlisted names (and the collector's source) reach the nodes
    assert set(step) == {"PATH", "HOME", "LANG", "LC_ALL", "SLURM_CONF", "TMPDIR", PAYLOAD_ENV}
    assert not any("s3cr3t" in v or "ghp_" in v for v in step.values())


def test_refused_ptrace_becomes_one_clear_node_error():
    # GIVEN (SYNTHETIC, from the real messages) py-spy and strace refused by the kernel
    doc = json.loads(json.dumps(REAL_DOC))
    doc["ptrace_scope"] = "1"
    for proc in doc["processes"]:
        for sample in proc["samples"]:
            sample["threads"] = None
            sample["error"] = ("py-spy: Permission Denied: Try running again with elevated "
                               "permissions by going 'sudo env \"PATH=$PATH\" !!'")
    node = node_from_document("node001", doc)
    # THEN the node says why once, with the policy and what to do
    (hint,) = [e for e in node.errors if "ptrace" in e]
    assert "kernel.yama.ptrace_scope = 1" in hint and "root" in hint


def _only(node: str) -> str:
    return "".join(line for line in REAL_STDOUT.splitlines(keepends=True) if f" {node} " in line)


def test_nodes_without_the_system_python_are_named_by_slurmstepd(monkeypatch):
    monkeypatch.setattr(collect, "SYSTEM_PYTHON", "/usr/bin/python3-nope")
    nodes = ["node001", "node002", "node003"]
    # GIVEN node001 and node002 could not exec it; node003 answered
    out = outcomes_from_output(nodes, result(stdout=_only("node003"), stderr=EXECVE_STDERR), "srun")
    assert nodes_without_system_python(nodes, out, EXECVE_STDERR) == ["node001", "node002"]
    # AND a release whose slurmstepd does not name its node: srun's exit lines decide
    older = EXECVE_STDERR.replace("slurmstepd-node001:", "slurmstepd:").replace(
        "slurmstepd-node002:", "slurmstepd:").replace("node002: task 1", "nodeZZ: task 1")
    assert nodes_without_system_python(nodes, out, older) == ["node001"]
    # AND another program's failure, or none, is not this
    other = EXECVE_STDERR.replace("/usr/bin/python3-nope", "/opt/py/bin/python3")
    assert nodes_without_system_python(nodes, out, other) == []
    assert nodes_without_system_python(nodes, out, "") == []


def test_nodes_without_the_system_python_get_the_portable_command_in_a_second_step(monkeypatch):
    # GIVEN a controller with the system Python, and node002 without it
    monkeypatch.setattr(collect, "SYSTEM_PYTHON", collect.preferred_node_python())
    calls = []

    def runner(argv, timeout, **kwargs):
        calls.append((list(argv), timeout))
        if len(calls) == 1:
            stderr = (f"srun: error: node002: task 1: Exited with exit code 2\n"
                      f"slurmstepd-node002: error: execve(): {collect.SYSTEM_PYTHON}: "
                      "No such file or directory\n")
            return result(stdout=_only("node001"), stderr=stderr, returncode=2)
        return result(stdout=_only("node002"))

    out = SrunTransport(runner).collect("77", ["node001", "node002"], AttachOptions(timeout_s=30))
    # THEN the first step ran the system Python directly on both nodes
    first, second = calls
    assert "--nodelist=node001,node002" in first[0]
    assert first[0][first[0].index("--input=all") + 1] == collect.SYSTEM_PYTHON
    # AND the second, only on node002, the shell that picks an interpreter, within the time left
    assert "--nodelist=node002" in second[0]
    assert second[0][second[0].index("--input=all") + 1:][:2] == ["/bin/sh", "-c"]
    assert second[1] <= 30 and json.loads(second[0][-1])["deadline_s"] < second[1]
    # AND both nodes are there, in order
    assert [(n, o.status) for n, o in out.nodes.items()] == [("node001", "ok"), ("node002", "ok")]


def test_no_second_step_without_the_system_python_on_the_controller(monkeypatch):
    monkeypatch.setattr(collect, "SYSTEM_PYTHON", "/no/such/python3")
    calls = []

    def runner(argv, timeout, **kwargs):
        calls.append(list(argv))
        return result(stdout=REAL_STDOUT)

    out = SrunTransport(runner).collect("77", ["node001", "node002"], AttachOptions())
    assert len(calls) == 1 and calls[0][calls[0].index("--input=all") + 1] == "/bin/sh"
    assert {o.status for o in out.nodes.values()} == {"ok"}


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_go_goes_out_once_every_node_said_it_is_ready():
    # GIVEN a gate for three nodes
    clock = FakeClock()
    gate = StartGate(["n1", "n2", "n3"], clock)
    # WHEN nothing has started yet, or only some nodes, or a stranger said hello
    assert gate() is None
    gate.saw("@SDG1-READY n1")
    gate.saw("@SDG1-READY other")  # not a node of this step
    gate.saw("  1: @SDG1-READY n2")  # a labelled line counts
    gate.saw("@SDG1-HELLO n3 14")  # started, not ready
    gate.saw("@SDG1 n3 0 1 0000abcd payload")  # a document's chunk is not ready either
    clock.now += GO_AFTER_FIRST_S / 2
    # THEN no go yet
    assert gate() is None and gate.ready == {"n1", "n2"}
    # AND the last node's ready line sends it, once, saying when and how many were ready
    gate.saw("@SDG1-READY n3")
    assert gate() == b"go\n" and gate.sent == (clock.now, 3)
    assert gate() is None


def test_a_node_that_never_starts_delays_the_others_by_go_after_first_s_at_most():
    clock = FakeClock()
    gate = StartGate(["n1", "n2"], clock)
    gate.saw("@SDG1-READY n1")
    clock.now += GO_AFTER_FIRST_S - 0.01
    assert gate() is None
    clock.now += 0.02
    assert gate() == b"go\n" and gate.sent == (clock.now, 1)


def test_the_srun_transport_feeds_the_gate_with_the_steps_lines():
    # GIVEN a runner standing in for srun, which plays the step's ready lines to the callback
    # and asks the feed after each, then returns the whole output (those lines first, as
    # run_command's output holds every line it passed on)
    fed = []
    ready = [f"@SDG1-READY {node}" for node in ("node001", "node002")]

    def runner(argv, timeout, **kwargs):
        for line in ready:
            kwargs["on_stdout_line"](line)
            fed.append(kwargs["feed"]())
        return result(stdout="".join(f"{line}\n" for line in ready) + REAL_STDOUT)

    out = SrunTransport(runner).collect("77", ["node001", "node002"], AttachOptions())
    # THEN the go is fed once both collectors said they are ready, not before
    assert fed == [None, b"go\n"]
    # AND every node's document is read, no line of the output cut into noise
    assert {n: o.status for n, o in out.nodes.items()} == {"node001": "ok", "node002": "ok"}
    assert out.warnings == []


def test_the_srun_transport_decodes_what_it_read_as_it_came_and_the_rest_after():
    # GIVEN a runner standing in for srun that plays the step's first lines to the callback
    # and returns the whole output (the rest read after srun was ended: no callback for it)
    lines = REAL_STDOUT.split("\n")
    played = 15  # node001's document whole, node002's begun

    def runner(argv, timeout, **kwargs):
        for line in lines[:played]:
            kwargs["on_stdout_line"](line)
        return result(stdout=REAL_STDOUT)

    # WHEN the transport collects
    out = SrunTransport(runner).collect("77", ["node001", "node002"], AttachOptions())
    # THEN every node's document is there, as decoding the whole output gives
    expected = outcomes_from_output(["node001", "node002"], result(stdout=REAL_STDOUT), "srun")
    assert {n: o.status for n, o in out.nodes.items()} == {"node001": "ok", "node002": "ok"}
    assert {n: o.document for n, o in out.nodes.items()} == {
        n: o.document for n, o in expected.nodes.items()}
