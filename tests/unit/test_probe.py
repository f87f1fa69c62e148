"""slurmdiag probe without a cluster: the node program's pieces, the analysis on real probe
snapshots (recorded on the netns cluster, tests/fixtures/snapshots/probe_netns_*.json), the
snapshot section, the report and the CLI's usage errors."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
from pathlib import Path

import pytest

from slurmdiag.analysis import analyze
from slurmdiag.cli import main
from slurmdiag.probe.analysis import probe_verdicts
from slurmdiag.probe.run import ProbeOptions, assemble_collective, assemble_probe, probe_argv
from slurmdiag.probe.view import probe_view
from slurmdiag.report.render import render_html
from slurmdiag.snapshot import Probe, ProbeLink, Snapshot
from slurmdiag.transport.base import NodeOutcome
from slurmdiag.transport.framing import decode_frames

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "snapshots"
NODE_PY = Path(__file__).resolve().parents[2] / "slurmdiag" / "probe" / "node.py"


def load(name: str) -> Snapshot:
    return Snapshot.from_json((FIXTURES / f"probe_netns_{name}.json").read_text())


@pytest.fixture(scope="module")
def node():
    spec = importlib.util.spec_from_file_location("probe_node", NODE_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kinds(verdicts) -> list[str]:
    return [v.kind for v in verdicts]


# ------------------------------------------------------------------ node program pieces


@pytest.mark.parametrize("n", list(range(2, 41)) + [64, 100, 256])
def test_the_schedule_tests_every_ordered_pair_once_in_ceil_log2_rounds(node, n):
    rounds = node.schedule(n)
    # THEN ceil(log2 n) rounds (more once a round would hold over 16 tests), every offset
    # once: node i tests i+d for each d in 1..n-1
    assert len(rounds) == max(math.ceil(math.log2(n)), math.ceil((n - 1) / 16))
    assert len(rounds) == math.ceil(math.log2(n)) or n > 100
    offsets = [d for r in rounds for d in r]
    assert sorted(offsets) == list(range(1, n))
    pairs = {(i, (i + d) % n) for i in range(n) for d in offsets}
    assert len(pairs) == n * (n - 1)
    # AND each node has at most ceil((n-1)/rounds) tests running at once
    assert max(len(r) for r in rounds) == math.ceil((n - 1) / len(rounds)) <= 16


def test_bisection_levels_halve_down_to_pairs(node):
    order = [f"n{i}" for i in range(7)]
    levels = node.levels_for(order, "n5")
    assert [lv["members"] for lv in levels] == [order, ["n4", "n5", "n6"], ["n4", "n5"]]
    assert [lv["level"] for lv in levels] == [0, 1, 2]
    assert node.levels_for(["a", "b"], "a") == [{"level": 0, "members": ["a", "b"]}]


def test_interface_specs_follow_nccl_syntax(node):
    names = ["docker0", "eth0", "eth1", "ib0", "lo"]
    assert node.match_ifname("eth", names) == ["eth0", "eth1"]
    assert node.match_ifname("=eth1", names + ["eth10"]) == ["eth1"]
    assert node.match_ifname("^docker,lo", names) == ["eth0", "eth1", "ib0"]
    assert node.match_ifname("ib,eth0", names) == ["eth0", "ib0"]


def test_the_node_programs_frames_decode_on_the_controller(node):
    doc = {"format": "slurmdiag-probe/1", "node": "n1", "results": [{"peer": "n2"}] * 300}
    text = "".join(node.frame_lines("n1", doc))
    assert decode_frames(text).documents == {"n1": doc}


def test_this_hosts_interfaces_are_read_from_its_own_network_namespace(node):
    # THEN lo is there with its address, MTU and state (ioctls, not /sys)
    info = node.interface_info("lo")
    assert info["address"] == "127.0.0.1" and info["mtu"] and info["operstate"] == "up"
    assert node.interface_info("no-such-if0")["address"] is None


# ------------------------------------------------------------------ analysis on real runs


def test_a_clean_run_names_nothing():
    snapshot = load("clean")
    assert kinds(probe_verdicts(snapshot.probe)) == ["probe_clean"]


@pytest.mark.parametrize(("name", "kind", "named"), [
    ("blackhole_nsnode1_nsnode2", "probe_bad_link", "link nsnode1 <-> nsnode2"),
    ("mtu1400_nsnode3", "probe_mtu_mismatch", "nsnode3 (1400)"),
    ("slow_nsnode3_to_nsnode4", "probe_slow_link", "link nsnode3 <-> nsnode4"),
    ("eth1_down_nsnode2", "probe_bad_node", "node nsnode2: interface eth1 is down"),
])
def test_each_recorded_fault_is_named_exactly(name, kind, named):
    verdicts = [v for v in probe_verdicts(load(name).probe) if v.kind != "probe_collective_failed"]
    assert kinds(verdicts) == [kind]
    assert named in verdicts[0].summary
    assert verdicts[0].next_step


def test_a_drain_line_is_given_for_a_bad_node():
    (verdict,) = probe_verdicts(load("eth1_down_nsnode2").probe)
    assert verdict.next_step.startswith(
        'scontrol update NodeName=nsnode2 State=DRAIN Reason="slurmdiag probe: interface eth1 is down"')
    assert "--exclude=nsnode2" in verdict.next_step


def _without_node_result(probe: Probe, name: str) -> Probe:
    nodes = tuple(dataclasses.replace(n, status="timeout", message="no result") if n.name == name
                  else n for n in probe.nodes)
    links = tuple(x for x in probe.links if x.source != name)
    links = tuple(dataclasses.replace(x, error="timed out after 3.0 s") if x.target == name else x
                  for x in links)
    return dataclasses.replace(probe, nodes=nodes, links=links)


def test_a_node_that_announced_itself_but_never_answered_is_the_node_not_its_links():
    probe = _without_node_result(load("clean").probe, "nsnode4")
    verdicts = probe_verdicts(probe)
    assert kinds(verdicts) == ["probe_bad_node"]
    assert verdicts[0].summary.startswith("node nsnode4: its probe never answered")


def test_one_slow_measurement_of_a_healthy_link_is_not_a_slow_link():
    # GIVEN a clean run where one transfer was starved for CPU (a loaded host), the other
    # measurement of the same direction normal
    probe = load("clean").probe
    first = probe.links[0]
    links = (dataclasses.replace(first, up_mbps=0.01),) + probe.links[1:]
    assert kinds(probe_verdicts(dataclasses.replace(probe, links=links))) == ["probe_clean"]
    # AND the report's matrix says the same: no slow cell (a CI run drew one from a single
    # starved round while the verdict was probe_clean)
    cells = [c.kind for row in probe_view(dataclasses.replace(probe, links=links)).rows for c in row.cells]
    assert "slow" not in cells and cells.count("ok") == 12


def test_the_matrix_marks_slow_the_directions_the_verdict_calls_slow():
    probe = load("slow_nsnode3_to_nsnode4").probe
    slow = {(row.name, probe_view(probe).names[i]) for row in probe_view(probe).rows
            for i, c in enumerate(row.cells) if c.kind == "slow"}
    assert slow == {("nsnode3", "nsnode4"), ("nsnode4", "nsnode3")}


def test_when_no_pair_can_talk_the_interface_is_named_not_every_link():
    probe = load("clean").probe
    links = tuple(dataclasses.replace(x, connect=False, error="No route to host") for x in probe.links)
    verdicts = probe_verdicts(dataclasses.replace(probe, links=links))
    assert kinds(verdicts) == ["probe_no_path"]
    assert "eth1" in verdicts[0].summary


def test_two_nodes_with_a_failing_link_name_the_link():
    probe = Probe(mode="nodes", nodes=load("clean").probe.nodes[:2], links=(
        ProbeLink("nsnode1", "nsnode2", False, error="timed out"),
        ProbeLink("nsnode2", "nsnode1", False, error="timed out")))
    assert kinds(probe_verdicts(probe)) == ["probe_bad_link"]


def test_the_collective_check_names_the_smallest_failing_group():
    snapshot = load("blackhole_nsnode1_nsnode2")
    collective = snapshot.probe.collective
    assert collective.status == "failed"
    assert collective.smallest_failing == (("nsnode1", "nsnode2"),)
    (verdict,) = [v for v in snapshot.verdicts if v.kind == "probe_collective_failed"]
    assert "[nsnode1, nsnode2]" in verdict.summary


def test_members_that_passed_level_0_skip_the_lower_levels():
    ok = {"levels": [{"level": 0, "members": ["a", "b", "c"], "ok": True, "seconds": 0.1}]}
    result = assemble_collective(["a", "b", "c"], {"a": ok, "b": ok, "c": ok})
    assert result.status == "ok" and not result.smallest_failing
    skipped = assemble_collective(["a", "b"], {"a": {"error": "torch not importable: x", "levels": []},
                                               "b": {"error": "torch not importable: x", "levels": []}})
    assert skipped.status == "skipped" and "torch not importable" in skipped.message


def test_nodes_that_sent_nothing_or_something_else_are_findings():
    outcomes = {"a": NodeOutcome("a", "ok", {"format": "slurmdiag-node/9"}),
                "b": NodeOutcome("b", "timeout", None, "no answer before the deadline")}
    probe = assemble_probe("nodes", ["a", "b", "c"], outcomes, {"b": {"address": "10.0.0.2"}}, 1.0)
    status = {n.name: (n.status, n.message) for n in probe.nodes}
    assert status["a"][0] == "error" and "slurmdiag-node/9" in status["a"][1]
    assert status["b"][0] == "timeout" and "announced 10.0.0.2" in status["b"][1]
    assert status["c"][0] == "unreachable"


# ------------------------------------------------------------------ snapshot, report, CLI


def test_a_probe_snapshot_round_trips_and_attach_snapshots_have_no_probe_key():
    snapshot = load("mtu1400_nsnode3")
    assert Snapshot.from_json(snapshot.to_json()) == snapshot
    # an attach snapshot written before the probe existed still loads, and writes no probe key
    old = Snapshot.from_json((FIXTURES / "synthetic_rank_gated.json").read_text())
    assert old.probe is None and "probe" not in old.to_dict()


def test_the_report_draws_the_matrix_autoescaped():
    snapshot = load("blackhole_nsnode1_nsnode2")
    nodes = tuple(dataclasses.replace(n, chosen_by="<script>x</script>") for n in snapshot.probe.nodes)
    links = tuple(dataclasses.replace(x, error="<b>boom</b>") if x.error else x
                  for x in snapshot.probe.links)
    snapshot = dataclasses.replace(snapshot, probe=dataclasses.replace(snapshot.probe, nodes=nodes,
                                                                       links=links))
    html = render_html(snapshot, analyze(snapshot))
    assert 'id="probe"' in html and html.count('class="pm-fail') == 2
    assert "&lt;b&gt;boom&lt;/b&gt;" in html and "<b>boom</b>" not in html
    assert 'id="classes"' not in html  # a probe alone has no stacks to show


def test_the_step_is_one_srun_into_the_job_or_a_bounded_fresh_allocation():
    into = probe_argv("123", ["n1", "n2"], ProbeOptions())
    assert into[:4] == ["srun", "--jobid=123", "--overlap", "--gres=gpu:0"]
    assert "--input=all" in into and "--nodelist=n1,n2" in into
    fresh = probe_argv(None, ["n1", "n2"], ProbeOptions(timeout_s=60))
    assert "--time=2" in fresh and "--immediate=20" in fresh
    assert not any(a.startswith("--jobid") for a in fresh)
    # a het job's component: srun takes only the leader's id; the node looks for the component's
    component = probe_argv("124", ["n3"], ProbeOptions(), het_group=("123", 1))
    assert component[:5] == ["srun", "--jobid=123", "--het-group=1", "--overlap", "--gres=gpu:0"]
    assert json.loads(component[-1])["job_id"] == "124"


@pytest.mark.parametrize("argv", [["probe"], ["probe", "12", "--nodes", "n[1-2]"],
                                  ["probe", "--nodes", "n1"], ["probe", "--nodes", "n[1-2]", "--timeout", "3"]])
def test_usage_errors_exit_2_with_a_hint(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "hint: " in err


def test_the_terminal_summary_gives_the_verdict_the_next_step_and_the_matrix():
    from slurmdiag.probe.cli import summary_lines

    lines = summary_lines(load("blackhole_nsnode1_nsnode2"))
    text = "\n".join(lines)
    assert "[critical] probe_bad_link: link nsnode1 <-> nsnode2" in text
    assert "next: have the link between nsnode1 and nsnode2 checked" in text
    matrix = [line for line in lines if line.startswith("  nsnode")][-4:]
    assert matrix[0].split()[1:5] == ["-", "X", ".", "."]
    assert matrix[1].split()[1:5] == ["X", "-", ".", "."]
