"""A rank whose connect() nothing answers (`connect_dropped`, recorded by `make accuracy`):
its socket in SYN_SENT, the far end read by the collector. The verdict says it connects, to
where, and that nothing answers; the next step is about reaching that address."""

from __future__ import annotations

from dataclasses import replace

import pytest
from snapfactory import map_rank, recorded

from slurmdiag.analysis import diagnose
from slurmdiag.snapshot import Rank


@pytest.mark.parametrize("mode", ["default", "samples1"])
def test_a_rank_in_an_unanswered_connect_is_said_connecting_to_its_address(mode: str) -> None:
    v = diagnose(recorded(f"connect_dropped.{mode}.syn_sent")).verdicts[0]
    assert (v.kind, v.culprit_ranks) == ("straggler", (1,)), v
    assert v.sites[0].endswith("connect_dropped.py:51")
    assert ", connecting to 127.0.0.1:" in v.summary
    assert "(SYN_SENT: nothing answers its connection request)" in v.summary
    assert "nc -vz" in v.next_step and "connect timeout" in v.next_step


def _established(rank: Rank) -> Rank:
    return replace(rank, connections=tuple(
        replace(c, state="ESTABLISHED") if c.state == "SYN_SENT" else c for c in rank.connections))


def test_a_connect_that_completed_is_not_called_unanswered() -> None:
    # GIVEN the recording with rank 1's socket connected by the time it was read
    v = diagnose(map_rank(recorded("connect_dropped.default.syn_sent"), 1, _established)).verdicts[0]
    # THEN the rank is still the straggler, without the connect phrase or its next step
    assert v.culprit_ranks == (1,) and "connecting" not in v.summary, v.summary
    assert "nc -vz" not in v.next_step


def test_a_far_end_the_collector_did_not_read_is_not_made_up() -> None:
    # GIVEN an older collector's document: the connecting socket's far end unknown
    def unknown(rank: Rank) -> Rank:
        return replace(rank, blocked_calls=tuple(
            replace(c, remote="0.0.0.0:0") for c in rank.blocked_calls))

    v = diagnose(map_rank(recorded("connect_dropped.default.syn_sent"), 1, unknown)).verdicts[0]
    # THEN it is connecting, to no named address
    assert ", connecting (SYN_SENT: nothing answers" in v.summary, v.summary
