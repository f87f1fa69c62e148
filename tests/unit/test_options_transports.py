"""One options object with one set of defaults, and the transports behind one interface."""

from __future__ import annotations

import dataclasses
import inspect
import json
import signal
from pathlib import Path

import pytest
from test_api import _fake_slurm

from slurmdiag import api
from slurmdiag.cli import attach_options, build_parser
from slurmdiag.errors import UsageError
from slurmdiag.options import DEFAULTS, AttachOptions, SshSettings
from slurmdiag.transport.base import NodeOutcome, transport_for
from slurmdiag.transport.memory import InMemoryTransport, run_collector_here
from slurmdiag.transport.run import CommandResult
from slurmdiag.transport.srun import STEP_NAME, SrunTransport
from slurmdiag.transport.ssh import SshTransport

# What node001's collector sent for a real job (tests/fixtures/collector).
RECORDED = json.loads((Path(__file__).parent.parent / "fixtures" / "collector"
                       / "node001_simple_sleep.json").read_text())


def test_the_cli_and_the_api_take_their_defaults_from_the_options():
    # GIVEN the attach command line with nothing but a job id, and the API's signature
    args = build_parser().parse_args(["attach", "42"])
    signature = inspect.signature(api.attach).parameters
    # THEN the flags make exactly the default options
    assert attach_options(args) == AttachOptions()
    # AND each API keyword defaults to the options' own default
    for keyword, field in (("samples", "samples"), ("interval", "interval_s"),
                           ("strace_s", "strace_s"), ("timeout_s", "timeout_s"),
                           ("native", "native"), ("flight_recorder", "flight_recorder"),
                           ("transport", "transport"), ("node_python", "node_python"),
                           ("node_cache", "node_cache")):
        assert signature[keyword].default == getattr(DEFAULTS, field), keyword
    # AND --help shows them
    help_text = " ".join(build_parser()._subparsers._group_actions[0]  # type: ignore[union-attr]
                         .choices["attach"].format_help().split())
    assert f"(default: {DEFAULTS.samples})" in help_text
    assert f"(default: {DEFAULTS.node_cache})" in help_text


def test_every_attach_flag_lands_in_the_options():
    # GIVEN an attach command line that sets every option
    args = build_parser().parse_args([
        "attach", "42", "--samples", "2", "--interval", "0.5", "--strace", "0", "--timeout",
        "1m", "--native", "--flight-recorder", "--py-spy", "/opt/py-spy", "--nvidia-smi",
        "/opt/nvidia-smi", "--node-python", "/opt/python3", "--node-cache", "", "--transport",
        "ssh", "--ssh-user", "bob", "--ssh-port", "2222", "--ssh-key", "/k", "--ssh-known-hosts",
        "/kh", "--ssh-accept-new",
    ])
    # THEN the options object holds each of them, the ssh ones as typed settings
    assert attach_options(args) == AttachOptions(
        samples=2, interval_s=0.5, strace_s=0.0, timeout_s=60.0, native=True,
        flight_recorder=True, pyspy_paths=("/opt/py-spy",), nvidia_smi_paths=("/opt/nvidia-smi",),
        node_python="/opt/python3", node_cache="", transport="ssh",
        ssh=SshSettings(user="bob", port=2222, key_filename="/k", known_hosts="/kh",
                        accept_new=True),
    )


@pytest.mark.parametrize(("change", "says"), [
    ({"samples": 0}, "--samples"),
    ({"interval_s": -1}, "--interval"),
    ({"timeout_s": 0}, "--timeout"),
    ({"concurrency": 0}, "concurrency"),
    ({"transport": "telnet"}, "unknown transport 'telnet'"),
])
def test_options_that_cannot_work_are_a_usage_error_when_made(change, says):
    with pytest.raises(UsageError, match=says):
        dataclasses.replace(DEFAULTS, **change)


def test_ssh_options_of_the_api_are_checked_by_name():
    assert SshSettings.from_mapping({"user": "bob", "port": 2222}) == SshSettings("bob", 2222)
    assert SshSettings.from_mapping(None) == SshSettings()
    with pytest.raises(UsageError, match="unknown ssh option.*prot") as error:
        SshSettings.from_mapping({"prot": 2222})
    assert "port" in (error.value.hint or "")


def test_the_transport_is_chosen_in_one_place():
    srun = transport_for(AttachOptions())
    ssh = transport_for(AttachOptions(transport="ssh", ssh=SshSettings(user="bob")))
    assert isinstance(srun, SrunTransport) and srun.name == "srun"
    assert isinstance(ssh, SshTransport) and ssh.settings == SshSettings(user="bob")


def test_the_api_keywords_reach_the_transport_as_one_options_object(monkeypatch):
    # GIVEN job 42 on two nodes whose recorded documents the in-memory transport replays
    memory = InMemoryTransport({"node001": RECORDED,
                                "node002": NodeOutcome("node002", "timeout", None, "too slow")})
    _fake_slurm(monkeypatch, memory)
    # WHEN a notebook user attaches with keywords, ssh settings as a dict
    snapshot = api.attach(42, samples=2, interval=0.5, strace_s=0, pyspy_path="/opt/py-spy",
                          transport="ssh", ssh_options={"user": "bob", "port": 2222})
    # THEN the transport was asked once, with one options object holding all of them
    (call,) = memory.calls
    assert call.job_id == "42" and call.nodes == ("node001", "node002")
    assert call.options == AttachOptions(samples=2, interval_s=0.5, strace_s=0,
                                         pyspy_paths=("/opt/py-spy",), transport="ssh",
                                         ssh=SshSettings(user="bob", port=2222))
    # AND the snapshot records the options and what each node sent
    assert snapshot.transport == "memory"
    assert snapshot.options["samples"] == 2 and snapshot.options["interval_s"] == 0.5
    assert [(n.name, n.status) for n in snapshot.nodes] == [("node001", "ok"),
                                                            ("node002", "timeout")]


def test_the_real_collector_through_the_in_memory_transport(monkeypatch, tmp_path):
    # GIVEN node001 answered by the real collector program run on this host, node002 silent
    memory = InMemoryTransport({"node001": run_collector_here})
    _fake_slurm(monkeypatch, memory)
    seen: list[tuple[int, int]] = []
    options = AttachOptions(samples=1, strace_s=0, timeout_s=20, node_cache=str(tmp_path))
    # WHEN attached (job 42 has no rank on this host)
    result = api.attach_job("42", options, write=False, transport=memory,
                            progress=lambda done, expected: seen.append((done, expected)))
    # THEN node001's document is the collector's own, for that node, and node002 is data
    node001, node002 = result.snapshot.nodes
    assert node001.status == "ok", node001.message
    assert node001.name == "node001" and node001.ranks == ()
    assert node001.collector_cpu_s is not None
    assert (node002.status, node002.message) == ("unreachable", "no answer recorded for this node")
    # AND progress counted the node that answered
    assert seen == [(1, 2)]


def test_the_in_memory_transport_can_be_interrupted_like_the_others(monkeypatch, tmp_path):
    # GIVEN a fan-out that was interrupted after node001 answered
    memory = InMemoryTransport({"node001": RECORDED}, interrupted=True,
                               warnings=["interrupted: the snapshot holds what the nodes sent"])
    _fake_slurm(monkeypatch, memory)
    # WHEN attached
    snapshot, warnings = api.collect_snapshot("42", DEFAULTS, transport=memory)
    # THEN the snapshot keeps node001's answer and says it is interrupted
    assert snapshot.options["interrupted"] is True
    assert [n.status for n in snapshot.nodes] == ["ok", "unreachable"]
    assert warnings == ["interrupted: the snapshot holds what the nodes sent"]


def test_srun_interrupt_sends_sigusr1_keeps_what_came_and_cancels_the_step():
    # GIVEN srun was interrupted (Ctrl-C) after node001 sent its document
    from slurmdiag.transport.framing import encode_frames

    calls: list[tuple[list[str], dict]] = []

    def runner(argv, timeout, **kwargs):
        calls.append((list(argv), kwargs))
        if argv[0] == "srun":
            stdout = encode_frames("node001", {"node": "node001"})
            return CommandResult(tuple(argv), -10, stdout, "", False, 1.0, interrupted=True)
        if argv[0] == "squeue":
            return CommandResult(tuple(argv), 0, f"77.3 {STEP_NAME}\n77.0 train\n", "")
        return CommandResult(tuple(argv), 0, "", "")

    # WHEN the srun transport collects
    out = SrunTransport(runner).collect("77", ["node001", "node002"], AttachOptions())
    # THEN srun was to forward SIGUSR1 to the collectors, node001's answer is kept
    assert calls[0][1]["interrupt_signal"] == signal.SIGUSR1
    assert out.interrupted and out.nodes["node001"].status == "ok"
    assert out.nodes["node002"].status != "ok"
    # AND only our own step was cancelled, and the warnings say both
    assert [argv for argv, _ in calls if argv[0] == "scancel"] == [["scancel", "--quiet", "77.3"]]
    assert any(w.startswith("interrupted") for w in out.warnings)
    assert any("77.3" in w for w in out.warnings)


def test_srun_says_the_fan_out_started_once_its_step_is_spawned():
    # GIVEN a runner standing for run_command: it tells the caller the child runs, then answers
    from slurmdiag.transport.framing import encode_frames

    order: list[str] = []

    def runner(argv, timeout, **kwargs):
        if argv[0] == "srun":
            order.append("srun spawned")
            if kwargs.get("on_started") is not None:
                kwargs["on_started"]()
            return CommandResult(tuple(argv), 0, encode_frames("node001", {"node": "node001"}), "")
        return CommandResult(tuple(argv), 0, "", "")

    # WHEN the srun transport collects with an on_started callback
    SrunTransport(runner).collect("77", ["node001"], AttachOptions(),
                                  on_started=lambda: order.append("told"))
    # THEN the runner was handed it for the step, and it was called once, after the spawn
    assert order == ["srun spawned", "told"]
