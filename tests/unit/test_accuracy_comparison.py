"""The accuracy table's comparison: site matching, culprit sets, false alarms, batches, totals.

Saved snapshots (tests/fixtures/accuracy/) are real `slurmdiag attach --json` outputs of the
scenario jobs, taken by tests/accuracy.py on the local cluster.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from accuracy import (
    Comparison,
    batches,
    compare,
    culprits_by_role,
    failed,
    parse_shape,
    produced_verdict,
    render_markdown,
    shaped_truth,
    site_matches,
    totals,
)
from scenarios.launch import load_truth

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "accuracy"


def snapshot(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


# ---------------------------------------------------------------- sites

@pytest.mark.parametrize(("site", "right"), [
    ("/work/wt/x/tests/scenarios/p2p_deadlock.py:43", True),  # absolute on the node
    ("tests/scenarios/p2p_deadlock.py:43", True),
    ("/work/wt/x/tests/scenarios/p2p_deadlock.py:44", False),  # next line
    ("/work/wt/x/tests/scenarios/p2p_deadlock.py:4", False),  # a prefix of the line number
    ("/work/wt/x/tests/scenarios/p2p_deadlock.py:143", False),  # the line is a suffix
    ("/work/wt/x/tests/scenarios/_p2p_deadlock.py:43", False),  # another file, same tail
    ("/work/wt/x/oldtests/scenarios/p2p_deadlock.py:43", False),  # not a path component
    ("/work/wt/x/tests/scenarios/_training.py:39", False),
])
def test_site_matches_path_and_exact_line(site, right):
    truth = {"culprit_site": "tests/scenarios/p2p_deadlock.py:43", "culprit_function": None}
    assert site_matches(site, truth) is right


@pytest.mark.parametrize(("site", "right"), [
    ("/r/tests/scenarios/spinning_rank.py:sample_crop_box", True),
    ("/r/tests/scenarios/spinning_rank.py:Augmenter.sample_crop_box", True),  # 3.11 qualname
    ("/r/tests/scenarios/spinning_rank.py:resample_crop_box", False),
    ("/r/tests/scenarios/spinning_rank.py:41", False),  # a line is not the function
    ("/r/tests/scenarios/other.py:sample_crop_box", False),
])
def test_site_matches_function_for_a_moving_culprit(site, right):
    truth = {"culprit_site": None,
             "culprit_function": "tests/scenarios/spinning_rank.py:sample_crop_box"}
    assert site_matches(site, truth) is right


def test_site_matches_through_a_link(tmp_path):
    # GIVEN a package linked into a site-packages (installed_package), as the frames name it
    source = tmp_path / "repo" / "tests" / "scenarios" / "trainkit"
    source.mkdir(parents=True)
    (source / "shards.py").write_text("")
    site_packages = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    site_packages.mkdir(parents=True)
    (site_packages / "trainkit").symlink_to(source)
    truth = {"culprit_site": "tests/scenarios/trainkit/shards.py:20", "culprit_function": None}
    # THEN the link's path names the truth's file; another installed file does not
    assert site_matches(f"{site_packages}/trainkit/shards.py:20", truth)
    assert not site_matches(f"{site_packages}/trainkit/loop.py:20", truth)
    assert not site_matches(f"{site_packages}/trainkit/shards.py:21", truth)


# ---------------------------------------------------------------- real snapshots

def test_wrong_culprits_in_a_real_snapshot_are_counted_wrong():
    # GIVEN the real attach of p2p_deadlock, where slurmdiag blamed ranks 0-1 (truth: 2-3)
    result = compare(load_truth("p2p_deadlock"), snapshot("p2p_deadlock.default"))
    # THEN the kind is right but the culprit set and the site are not
    assert result.produced.culprit_ranks == (0, 1)
    assert result.kind_right and not result.culprits_right and not result.site_right
    assert not result.right and not result.false_alarm


def test_right_verdict_in_a_real_snapshot_with_one_sample():
    result = compare(load_truth("broadcast_object_mismatch"),
                     snapshot("broadcast_object_mismatch.samples1"), "samples1")
    assert (result.kind_right, result.culprits_right, result.site_right) == (True, True, True)
    assert result.right and result.mode == "samples1"


def test_site_in_a_package_module_matches():
    # GIVEN the python -m scenario, whose culprit frame is in tests/scenarios/trainer/
    result = compare(load_truth("module_lock_deadlock"), snapshot("module_lock_deadlock.default"))
    assert result.site_right and result.culprits_right


def test_culprit_set_ignores_order():
    truth = {**load_truth("p2p_deadlock"), "culprit_ranks": [1, 0]}
    assert compare(truth, snapshot("p2p_deadlock.default")).culprits_right
    truth = {**load_truth("p2p_deadlock"), "culprit_ranks": [0]}  # blamed more than the truth
    assert not compare(truth, snapshot("p2p_deadlock.default")).culprits_right
    truth = {**load_truth("p2p_deadlock"), "culprit_ranks": [0, 1, 2]}  # blamed fewer
    assert not compare(truth, snapshot("p2p_deadlock.default")).culprits_right


def test_missing_mention_makes_an_otherwise_right_verdict_wrong():
    # GIVEN child_process_wait: kind, culprit and site right, but the verdict never names
    # the child's command line (the truth asks for "flock")
    truth = load_truth("child_process_wait")
    result = compare(truth, snapshot("child_process_wait.default"))
    assert result.kind_right and result.culprits_right and result.site_right
    assert result.mentions_missing == ("flock",) and not result.right
    # AND without that demand it is right
    relaxed = {k: v for k, v in truth.items() if k != "verdict_mentions"}
    assert compare(relaxed, snapshot("child_process_wait.default")).right


def test_progressing_job_without_hang_verdict_is_no_false_alarm():
    result = compare(load_truth("slow_but_moving"), snapshot("slow_but_moving.default"))
    assert result.produced.kind == "progressing" and not result.produced.is_hang
    assert result.right and not result.false_alarm


def test_hang_verdict_on_a_progressing_job_is_a_false_alarm():
    # GIVEN a real attach (--samples 1) of the slow-but-moving control that said
    # "warning spinning: rank 3 is busy ..." while every rank kept finishing steps
    result = compare(load_truth("slow_but_moving"),
                     snapshot("slow_but_moving.samples1.false_alarm"), "samples1")
    # THEN a warning counts as a hang verdict: a false alarm
    assert (result.produced.kind, result.produced.severity) == ("spinning", "warning")
    assert result.false_alarm and not result.right


def test_only_hang_verdicts_count_for_a_hung_job():
    # GIVEN a hung job's truth and a snapshot with only an info verdict naming the culprit
    info = {"verdicts": [{"kind": "mismatched_collective", "severity": "info",
                          "culprit_ranks": [2, 3],
                          "sites": ["/r/tests/scenarios/p2p_deadlock.py:43"], "summary": "s"}]}
    result = compare(load_truth("p2p_deadlock"), info)
    assert not (result.kind_right or result.culprits_right or result.site_right)


def test_first_hang_verdict_is_taken_after_info_verdicts():
    verdicts = [{"kind": "idle", "severity": "info", "culprit_ranks": [], "sites": []},
                {"kind": "straggler", "severity": "warning", "culprit_ranks": [3], "sites": []},
                {"kind": "spinning", "severity": "critical", "culprit_ranks": [1], "sites": []}]
    assert produced_verdict({"verdicts": verdicts}).kind == "straggler"
    assert produced_verdict({"verdicts": []}).kind is None


# ---------------------------------------------------------------- batches and the table

def test_batches_never_exceed_the_rank_budget():
    names = ["store_key_never_set", "fifo_open", "p2p_deadlock", "early_stop_local",
             "healthy_slow", "many_threads"]  # 8 + 4 x 5 ranks
    packed = batches(names, max_ranks=12)
    assert packed == [["store_key_never_set", "fifo_open"], ["p2p_deadlock", "early_stop_local",
                      "healthy_slow"], ["many_threads"]]
    assert [n for batch in packed for n in batch] == names


def test_totals_and_markdown_count_each_mode():
    results: list[Comparison] = [
        compare(load_truth("p2p_deadlock"), snapshot("p2p_deadlock.default"), "default"),
        compare(load_truth("broadcast_object_mismatch"),
                snapshot("broadcast_object_mismatch.samples1"), "default"),
        compare(load_truth("slow_but_moving"), snapshot("slow_but_moving.default"), "default"),
        failed(load_truth("fifo_open"), "samples1", "job FAILED"),
    ]
    t = totals(results, "default")
    assert (t.hang_runs, t.culprits_right, t.site_right, t.quiet_runs, t.false_alarms) == (
        2, 1, 1, 1, 0)
    assert totals(results, "samples1").errors == 1
    text = render_markdown(results, when="now", version="0", commit="abc")
    assert "| culprit ranks right (hang scenarios) | 1/2 | 0/1 |" in text
    assert "| false alarms (no-hang scenarios) | 0/1 | 0/0 |" in text
    assert "`p2p_deadlock` ran" not in text and "| `p2p_deadlock` |" in text
    assert "error: job FAILED" in text
    assert "`make accuracy`" in text
    other = render_markdown(results, when="now", version="0", commit="abc", threads="default")
    assert "`tests/accuracy.py --threads default`" in other


def test_a_run_that_could_not_be_judged_says_why_on_its_console_line(monkeypatch, tmp_path):
    # GIVEN a batch whose scenario job is ready but whose attach fails (the job still PENDING)
    import accuracy

    class Ready:
        name, job_id, truth = "store_wait", "14", load_truth("store_wait")

        def wait_ready(self, timeout):
            return {}

        def cancel(self):
            pass

        def job_state(self):
            return None

    error = "slurmdiag.cli attach 14 --json: exit 4: error: job 14 is PENDING: it has no processes yet"
    monkeypatch.setattr(accuracy, "submit", lambda name, state, truth=None: Ready())
    monkeypatch.setattr(accuracy, "judge", lambda run, keep: [
        accuracy.failed(run.truth, mode, error) for mode in accuracy.MODES])
    lines: list[str] = []
    # WHEN the batch runs
    results = accuracy.run_batch(["store_wait"], tmp_path, None, log=lines.append)
    # THEN each mode's line says it was not judged, and why, rather than a verdict of None
    assert [r.right for r in results] == [False, False]
    assert lines == [f"  store_wait [{mode}]: WRONG: not judged: {error}" for mode in accuracy.MODES]


def test_a_shape_is_nodes_by_tasks_and_anything_else_is_refused():
    assert parse_shape("4x2") == (4, 2) and parse_shape("3X2") == (3, 2)
    import argparse
    for bad in ("4", "x2", "4x", "0x2", "4x0", "00x2", "4x2x1", "four x two"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_shape(bad)


def test_a_reshaped_hang_is_judged_by_the_ranks_own_roles():
    # GIVEN async_work_wait (its culprit the last rank) at 4 nodes x 2 tasks
    truth = shaped_truth("async_work_wait", (4, 2))
    assert (truth["nodes"], truth["ntasks_per_node"], truth["world_size"]) == (4, 2, 8)
    assert load_truth("async_work_wait")["culprit_ranks"] == [3]  # its own shape's
    ready = {r: {"role": "waiting"} for r in range(7)} | {7: {"role": "culprit"}}
    # THEN the culprit is the rank that said so; a dead rank is one too
    assert culprits_by_role(truth, ready)["culprit_ranks"] == [7]
    assert culprits_by_role(truth, ready | {2: {"role": "dead"}})["culprit_ranks"] == [2, 7]
    # AND a control keeps its truth (no culprits)
    control = shaped_truth("healthy_slow", (4, 2))
    assert culprits_by_role(control, {r: {"role": "healthy"} for r in range(8)}) == control
    assert shaped_truth("healthy_slow", None) == load_truth("healthy_slow")


def test_every_recorded_look_is_listed_where_it_came_from():
    # GIVEN the recorded looks THEN LOCAL_SOURCES.md says of each when and what it was (ten
    # went unlisted for sessions: a newcomer could not tell a recording from a hand-made file)
    listed = (FIXTURES.parent / "LOCAL_SOURCES.md").read_text()
    unlisted = [p.name for p in sorted(FIXTURES.glob("*.json")) if f"`accuracy/{p.name}`" not in listed]
    assert unlisted == []
