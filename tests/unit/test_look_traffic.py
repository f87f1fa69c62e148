"""A look without strace (`--samples 1 --strace 0`) reads the ranks' connections at its end: when
most ranks moved data to other ranks in its last 0.25 s, the collectives complete and the job is
progressing (real looks: `healthy_ddp_dataloader`, the textbook DDP job, of which four of five
such looks were a hang warning before; fresh hangs of `mismatched_collectives` and
`spinning_rank`, attached the moment their ranks were ready, ~0.8 s without data)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from snapfactory import recorded

from slurmdiag.analysis import diagnose
from slurmdiag.snapshot import Rank, Snapshot


def _aged(snapshot: Snapshot, ms: int) -> Snapshot:
    """``snapshot`` as if read ``ms`` later with nothing moving: every time since data grows."""
    def older(rank: Rank) -> Rank:
        recent = rank.recent_traffic
        if recent is None:
            return rank
        return replace(rank, recent_traffic=replace(
            recent, quiet_ms=(recent.quiet_ms or 0) + ms,
            active=tuple(replace(c, last_sent_ms=c.last_sent_ms + ms,
                                 last_received_ms=c.last_received_ms + ms) for c in recent.active)))
    return replace(snapshot, nodes=tuple(
        replace(n, ranks=tuple(older(r) for r in n.ranks)) for n in snapshot.nodes))


def test_the_textbook_ddp_job_moving_data_as_it_is_looked_at_is_progressing() -> None:
    snapshot = recorded("healthy_ddp_dataloader.look")
    assert {r.recent_traffic.read_at for _, r in snapshot.all_ranks() if r.recent_traffic} == {"look"}
    verdict = diagnose(snapshot).verdicts[0]
    assert (verdict.kind, verdict.severity) == ("progressing", "info"), verdict.summary
    assert verdict.summary == ("the job is progressing, not hung: 4 of 4 ranks (0-3) moved data "
                               "to other ranks in the look's last 0.2 s (tcp_info)")


def _unread(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` as a collector that did not read the connections at the look's end left it."""
    return replace(snapshot, nodes=tuple(
        replace(n, ranks=tuple(replace(r, recent_traffic=None) for r in n.ranks))
        for n in snapshot.nodes))


def test_its_liar_the_same_look_after_a_second_of_silence_is_not_progress() -> None:
    # the same stacks with every connection quiet for a second more: a hang that just formed
    look = recorded("healthy_ddp_dataloader.look")
    verdict = diagnose(_aged(look, 1000)).verdicts[0]
    # THEN the stacks alone decide, as if the connections were not read (a one-sample warning)
    unread = diagnose(_unread(look)).verdicts[0]
    assert unread.severity == "warning"
    assert (verdict.kind, verdict.severity, verdict.culprit_ranks) == (
        unread.kind, unread.severity, unread.culprit_ranks), verdict.summary


@pytest.mark.parametrize(("look", "kind", "culprits"), [
    ("mismatched_collectives.look", "mismatched_collective", (1,)),
    ("spinning_rank.look", "spinning", (3,)),
])
def test_its_liar_a_hang_a_moment_old_stays_a_hang(look: str, kind: str, culprits: tuple) -> None:
    snapshot = recorded(look)
    quiet = [r.recent_traffic.quiet_ms for _, r in snapshot.all_ranks() if r.recent_traffic]
    assert quiet and min(q for q in quiet if q is not None) < 1000  # a hang under a second old
    verdict = diagnose(snapshot).verdicts[0]
    assert (verdict.kind, verdict.severity, verdict.culprit_ranks) == (kind, "warning", culprits)
