"""Ranks that pass different roots to one rooted collective (`broadcast_root_mismatch`, recorded
by `make accuracy`): the roots are read from the c10d wrapper's locals (py-spy --locals)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from slurmdiag.analysis import diagnose
from slurmdiag.analysis.verdicts import _SECOND_ARG_RE
from slurmdiag.snapshot import Rank, Snapshot

ACCURACY = Path(__file__).resolve().parent.parent / "fixtures" / "accuracy"


def recorded(mode: str) -> Snapshot:
    return Snapshot.from_json(
        (ACCURACY / f"broadcast_root_mismatch.{mode}.roots.json").read_text())


def with_root(snapshot: Snapshot, number: int, src: int) -> Snapshot:
    """Rank ``number``'s broadcast called with ``src``."""
    def change(rank: Rank) -> Rank:
        first = rank.samples[0]
        groups = tuple((i, name, f'{{"src": {src}}}' if name == "kwargs" else text)
                       for i, name, text in first.groups)
        return replace(rank, samples=(replace(first, groups=groups), *rank.samples[1:]))

    return replace(snapshot, nodes=tuple(
        replace(n, ranks=tuple(change(r) if r.rank == number else r for r in n.ranks))
        for n in snapshot.nodes))


@pytest.mark.parametrize("mode", ["default", "samples1"])
def test_the_rank_that_broadcasts_from_another_root_is_the_culprit(mode: str) -> None:
    # GIVEN rank 0 in broadcast(src=0) (the sender, its send to rank 2 never taken), rank 2 in
    # broadcast(src=1) on the same line, ranks 1 and 3 (which received from 0) in all_reduce
    v = diagnose(recorded(mode)).verdicts[0]
    # THEN rank 2 alone is blamed (by stacks alone, a 2:2 tie that blamed ranks 0 and 2)
    assert (v.kind, v.culprit_ranks) == ("mismatched_collective", (2,)), v
    assert v.sites == (next(s for s in v.sites if s.endswith("broadcast_root_mismatch.py:29")),)
    assert "with src=1, a root the other ranks do not name" in v.summary
    assert any("rank 0 src=0, rank 2 src=1" in e and "src=0 taken as the agreed one" in e
               for e in v.evidence), v.evidence


def test_ranks_that_agree_on_the_root_leave_the_tie_rules_to_decide() -> None:
    # GIVEN the same stacks with rank 2 also passing src=0
    v = diagnose(with_root(recorded("default"), 2, 0)).verdicts[0]
    # THEN the roots say nothing, and the stacks' tie rule blames both broadcast ranks
    assert (v.kind, v.culprit_ranks) == ("mismatched_collective", (0, 2)), v
    assert not any("different roots" in e for e in v.evidence)


def test_a_root_passed_by_position_is_read() -> None:
    assert _SECOND_ARG_RE.match("(<Tensor at 0x7f8ba596d8b0>, 3)").group(1) == "3"
    assert _SECOND_ARG_RE.match("([1, 2], 0)").group(1) == "0"
    assert _SECOND_ARG_RE.match("(<Tensor at 0x7f8ba596d8b0>)") is None
