"""A culprit alive in the function that caught an exception the job's log holds.

Real input: the recorded snapshot of `error_cleanup_barrier` (tests/scenarios/error_cleanup_barrier.json,
`make accuracy`, defaults): rank 3's ValueError (load_batch) is caught in main, whose `finally`
runs a barrier while ranks 0-2 wait in step 3's all_reduce; the traceback is in the job's log,
unlabelled. Each variation is one that would make the rule lie.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from slurmdiag.analysis import diagnose
from slurmdiag.snapshot import LogFinding, Snapshot

RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "accuracy" / \
    "error_cleanup_barrier.default.json"


def recorded() -> Snapshot:
    return Snapshot.from_json(RECORDED.read_text())


def with_findings(snapshot: Snapshot, change) -> Snapshot:  # type: ignore[no-untyped-def]
    return replace(snapshot, log_findings=tuple(change(f) for f in snapshot.log_findings))


def traceback_of(snapshot: Snapshot) -> LogFinding:
    (finding,) = [f for f in snapshot.log_findings if f.kind == "traceback"]
    return finding


def test_the_recording_holds_one_unlabelled_traceback_caught_in_main():
    finding = traceback_of(recorded())
    assert finding.rank is None and finding.text.startswith("ValueError: batch of step 3")
    assert finding.fields["frames"].splitlines()[0].endswith(":main")


def test_the_culprit_in_the_catching_function_is_said_to_have_caught_it():
    raised = traceback_of(recorded()).fields["site"]
    assert raised.endswith("tests/scenarios/error_cleanup_barrier.py:30")
    verdict = diagnose(recorded()).verdicts[0]
    assert verdict.kind == "mismatched_collective" and verdict.culprit_ranks == (3,)
    assert verdict.summary.endswith(
        "; rank 3 caught ValueError: batch of step 3: 15 features, expected 16 (raised at "
        f"{raised}) in main, where it waits now")
    assert verdict.evidence[0].startswith("traceback in ")
    assert "caught in main (" in verdict.evidence[0]
    assert verdict.next_step.startswith("the error the rank caught is the cause")


def test_a_traceback_caught_in_another_function_says_nothing_of_the_culprit():
    # GIVEN the same traceback caught in a function no rank sits in
    def elsewhere(f: LogFinding) -> LogFinding:
        frames = f.fields["frames"].splitlines()
        frames[0] = frames[0].rsplit(":", 1)[0] + ":evaluate"
        return replace(f, fields={**f.fields, "frames": "\n".join(frames)})

    verdict = diagnose(with_findings(recorded(), elsewhere)).verdicts[0]
    assert verdict.culprit_ranks == (3,) and " caught " not in verdict.summary
    assert not verdict.next_step.startswith("the error the rank caught")


def test_a_crash_traceback_is_not_a_caught_one():
    # GIVEN the traceback's outermost frame is <module>: it ended a program, nobody caught it
    def crashed(f: LogFinding) -> LogFinding:
        frames = f.fields["frames"].splitlines()
        path = frames[0].split(":", 1)[0]
        return replace(f, fields={**f.fields, "frames": "\n".join([f"{path}:57:<module>",
                                                                   *frames])})

    verdict = diagnose(with_findings(recorded(), crashed)).verdicts[0]
    assert " caught " not in verdict.summary


def test_a_traceback_labelled_with_another_rank_is_not_the_culprits():
    verdict = diagnose(with_findings(recorded(), lambda f: replace(f, rank=1))).verdicts[0]
    assert verdict.culprit_ranks == (3,) and " caught " not in verdict.summary


def test_a_traceback_labelled_with_the_culprit_is_its():
    verdict = diagnose(with_findings(recorded(), lambda f: replace(f, rank=3))).verdicts[0]
    assert "; rank 3 caught ValueError" in verdict.summary


def test_an_error_the_job_went_on_after_is_not_the_culprits_path():
    # GIVEN the traceback followed by more output than two lines a rank (the job trained on
    # after it: stale_caught_error's start-up error, caught in main long before the hang)
    def went_on(f: LogFinding) -> LogFinding:
        return replace(f, fields={**f.fields, "lines_after": "9"})

    verdict = diagnose(with_findings(recorded(), went_on)).verdicts[0]
    assert verdict.culprit_ranks == (3,) and " caught " not in verdict.summary
    # AND up to two lines a rank it is still taken (the culprit's own "ready" line follows it)
    def little(f: LogFinding) -> LogFinding:
        return replace(f, fields={**f.fields, "lines_after": "8"})

    assert "; rank 3 caught ValueError" in diagnose(with_findings(recorded(), little)).verdicts[0].summary


def test_the_recorded_liar_an_old_error_caught_where_the_culprit_waits():
    # GIVEN stale_caught_error's recorded look: start-up tracebacks caught in main, dozens of
    # lines before rank 0 hangs in main's barrier (lines_after read by the collector's parser)
    snapshot = Snapshot.from_json((RECORDED.parent / "stale_caught_error.default.json").read_text())
    afters = [int(f.fields["lines_after"]) for f in snapshot.log_findings if f.kind == "traceback"]
    assert afters and min(afters) > 8
    verdict = diagnose(snapshot).verdicts[0]
    # THEN the culprit is named by its stack alone, the old error not called its path
    assert verdict.culprit_ranks == (0,) and " caught " not in verdict.summary
    assert not verdict.next_step.startswith("the error the rank caught")
