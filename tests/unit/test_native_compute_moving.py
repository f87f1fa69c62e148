"""A rank computing in tensor kernels while the others wait, its line moving: an evaluation
on rank 0 alone (`rank0_eval_barrier`, a control) and its hung twin, a forward pass retried
forever (`nan_retry_loop`), both recorded by `make accuracy` with the defaults."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from slurmdiag.analysis import diagnose
from slurmdiag.snapshot import Rank, Snapshot

ACCURACY = Path(__file__).resolve().parent.parent / "fixtures" / "accuracy"


def recorded(name: str) -> Snapshot:
    return Snapshot.from_json((ACCURACY / f"{name}.default.native_moving.json").read_text())


def with_gil(snapshot: Snapshot, number: int, held: int) -> Snapshot:
    """Rank ``number``'s main thread holding the GIL in its first ``held`` samples."""
    def change(rank: Rank) -> Rank:
        samples = tuple(
            replace(s, threads=tuple(
                replace(t, owns_gil=True) if t.os_thread_id == rank.pid and i < held else t
                for t in s.threads))
            for i, s in enumerate(rank.samples))
        return replace(rank, samples=samples)

    return replace(snapshot, nodes=tuple(
        replace(n, ranks=tuple(change(r) if r.rank == number else r for r in n.ranks))
        for n in snapshot.nodes))


def test_rank_zero_evaluating_alone_while_the_others_wait_in_a_barrier_is_no_alarm() -> None:
    # GIVEN rank 0 in its evaluation: active in 3 samples, without the GIL in 2 (the encoder's
    # forward), then in its per-sample metrics in Python; ranks 1-3 idle in the barrier
    v = diagnose(recorded("rank0_eval_barrier")).verdicts[0]
    # THEN it is said as a slow step or a hang (info), rank 0 and its function named
    assert (v.kind, v.severity, v.confidence, v.culprit_ranks) == ("slow_step", "info", "low", (0,))
    assert v.sites[0].endswith("rank0_eval_barrier.py:evaluate")
    assert any("without the GIL in 2 of 3 samples, its line moving" in e for e in v.evidence), \
        v.evidence


def test_a_moving_rank_holding_the_gil_in_most_samples_is_no_native_compute() -> None:
    # GIVEN the same evaluation with the GIL held in 2 of its 3 samples (a loop in Python)
    v = diagnose(with_gil(recorded("rank0_eval_barrier"), 0, held=2)).verdicts[0]
    # THEN it is not said as native compute; with the others in a barrier it is a rank-gated
    # phase (a rank late for an all_reduce would be spinning: test_moving_transfers)
    assert (v.kind, v.severity, v.culprit_ranks) == ("slow_step", "info", (0,)), v
    assert v.summary.startswith("a rank-gated phase or a hang, cannot tell")
    assert not any("without the GIL in" in e for e in v.evidence), v.evidence


def test_a_forward_pass_retried_forever_is_the_known_miss_with_its_culprit_named() -> None:
    # GIVEN rank 2 retrying its loss forever in tensor maths (samples without the GIL, in
    # encoded_loss called from robust_loss's loop), ranks 0, 1, 3 in the gradient all_reduce
    v = diagnose(recorded("nan_retry_loop")).verdicts[0]
    # THEN (a look of a few seconds cannot tell it from a long compute) no alarm, but the
    # culprit, its function and its callers' line are named
    assert (v.kind, v.severity, v.culprit_ranks) == ("slow_step", "info", (2,)), v
    assert v.summary.startswith("a slow step or a hang, cannot tell: rank 2 is busy")
    assert v.sites[0].endswith("nan_retry_loop.py:encoded_loss")
