"""A collective issued on a second thread by some ranks only (`side_thread_collective`, recorded
by `make accuracy` before the rule): rank 0 starts a thread that calls dist.barrier() while its
main thread goes on to the gradient all_reduce, where ranks 1-3 wait. Every main thread waits at
the same line, so the look was read as `all_waiting` (the cause below Python); the extra call is
on rank 0's side thread."""

from __future__ import annotations

from dataclasses import replace

import pytest
from snapfactory import recorded

from slurmdiag.analysis import diagnose
from slurmdiag.snapshot import Rank, Snapshot

SIDE = "side_thread_collective.py:26"
SIDE_THREAD = "eval-publisher"


def _side_thread_of(snapshot: Snapshot, rank: int):  # type: ignore[no-untyped-def]
    proc = next(r for n in snapshot.nodes for r in n.ranks if r.rank == rank)
    return [next(t for t in s.threads if t.name == SIDE_THREAD) for s in proc.samples]


def _with_side_thread(snapshot: Snapshot, threads) -> Snapshot:  # type: ignore[no-untyped-def]
    """Every rank given rank 0's side thread (each sample its own copy)."""
    def change(rank: Rank) -> Rank:
        if any(t.name == SIDE_THREAD for s in rank.samples for t in s.threads):
            return rank
        samples = tuple(replace(s, threads=(*s.threads, replace(threads[min(i, len(threads) - 1)],
                                                                  thread_id=990000 + rank.rank)))
                        for i, s in enumerate(rank.samples))
        return replace(rank, samples=samples)
    return replace(snapshot, nodes=tuple(
        replace(n, ranks=tuple(change(r) for r in n.ranks)) for n in snapshot.nodes))


@pytest.mark.parametrize("mode", ["default", "samples1"])
def test_a_collective_on_one_ranks_side_thread_is_the_mismatch(mode: str) -> None:
    # GIVEN the recorded look: every main thread in all_reduce at one line, rank 0's side
    # thread in barrier
    snapshot = recorded(f"side_thread_collective.{mode}")
    # WHEN it is diagnosed
    verdict = diagnose(snapshot).verdicts[0]
    # THEN rank 0 is named, at its side thread's barrier, and the evidence says why
    assert verdict.kind == "mismatched_collective"
    assert verdict.culprit_ranks == (0,)
    assert verdict.sites[0].endswith(SIDE)
    assert f"thread {SIDE_THREAD}; its main thread waits in all_reduce" in verdict.summary
    assert any("second thread" in line for line in verdict.evidence)


def test_the_same_side_thread_on_every_rank_says_nothing_of_who_diverged() -> None:
    # GIVEN the liar: every rank has that thread, stuck in the same barrier
    snapshot = recorded("side_thread_collective.default")
    every = _with_side_thread(snapshot, _side_thread_of(snapshot, 0))
    # THEN no rank is singled out: every rank waits alike
    verdict = diagnose(every).verdicts[0]
    assert verdict.kind == "all_waiting" and verdict.culprit_ranks == ()
