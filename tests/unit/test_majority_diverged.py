"""A larger group of ranks can be the one that diverged (`early_stop_majority`, recorded by
`make accuracy`): three ranks left the training loop early and wait in the barrier after it,
rank 0 alone is still in the loop's all_reduce. By stacks alone that is rank 0 on a path of its
own too (one extra batch): the smaller group stays the culprit, but the verdict says the other
reading and does not claim high confidence."""

from __future__ import annotations

from snapfactory import recorded

from slurmdiag.analysis import diagnose


def verdict(name: str):  # type: ignore[no-untyped-def]
    return diagnose(recorded(f"{name}.default.majority")).verdicts[0]


def test_a_larger_group_in_a_barrier_is_named_as_the_other_reading() -> None:
    # GIVEN ranks 1-3 in a barrier after the loop, rank 0 in the loop's all_reduce
    v = verdict("early_stop_majority")
    # THEN rank 0, the smaller group, is still named, with medium confidence and the reading
    # in which ranks 1-3 took a path of their own
    assert (v.kind, v.culprit_ranks, v.confidence) == ("mismatched_collective", (0,), "medium"), v
    assert "; or ranks 1-3 took a path of their own (a barrier or object collective" in v.summary
    assert "stacks alone cannot tell" in v.summary
    assert any(e.startswith("the larger group shows a sign of a diverged path") for e in v.evidence)


def test_a_smaller_group_in_the_barrier_is_blamed_without_the_other_reading() -> None:
    # GIVEN the same program the other way round: rank 0 alone in the barrier after the loop
    v = verdict("early_stop_local")
    # THEN the signs agree with the sizes: rank 0, high confidence, one reading
    assert (v.kind, v.culprit_ranks, v.confidence) == ("mismatched_collective", (0,), "high"), v
    assert "took a path of their own" not in v.summary
    assert not any("the larger group shows" in e for e in v.evidence)
