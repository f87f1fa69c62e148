"""A pipeline's stages move an activation every second or so: a few send and receive calls a
rank in strace's window, not the hundreds of collectives (real looks with `--samples 1` of
`healthy_pipeline_p2p` and `healthy_pipeline_schedule`, session 25's full `make accuracy`).

Each caught two stages computing (state R) while the other two waited in a receive; strace saw
3-13 transfer calls a rank in its 2 s, and every rank's connections to other ranks carried data
in it (tcp_info). The traffic rule wanted 8 calls from most ranks, and the healthy jobs were
called spinning, a warning. A rank whose connections to other ranks carried data in the window
now talks from one call."""

from __future__ import annotations

from dataclasses import replace

from snapfactory import map_every_rank, recorded

from slurmdiag.analysis import diagnose
from slurmdiag.snapshot import Rank

LOOKS = ("healthy_pipeline_p2p.samples1.two_computing",
         "healthy_pipeline_schedule.samples1.two_computing")


def test_a_pipeline_moving_an_activation_a_second_is_progressing() -> None:
    for name in LOOKS:
        verdict = diagnose(recorded(name)).verdicts[0]
        assert (verdict.kind, verdict.severity) == ("progressing", "info"), (name, verdict.summary)
        assert "moved data over the network while strace watched" in verdict.summary


def _quiet(rank: Rank) -> Rank:
    """The rank as one whose connections carried nothing in strace's window."""
    assert rank.recent_traffic is not None
    return replace(rank, recent_traffic=replace(rank.recent_traffic, active=()))


def test_its_liar_the_same_calls_without_data_between_ranks_are_not_progress() -> None:
    # WHEN tcp_info says no connection to another rank carried data in the window (the calls
    # were a store's, or failed reads): a few calls prove nothing, the stacks decide
    for name in LOOKS:
        verdict = diagnose(map_every_rank(recorded(name), _quiet)).verdicts[0]
        assert (verdict.kind, verdict.severity) == ("spinning", "warning"), (name, verdict.summary)


def _not_read_again(rank: Rank) -> Rank:
    return replace(rank, recent_traffic=None)


def test_without_the_connections_read_again_the_bar_stays_eight_calls() -> None:
    # WHEN an older collector did not read the connections at strace's end
    for name in LOOKS:
        verdict = diagnose(map_every_rank(recorded(name), _not_read_again)).verdicts[0]
        assert verdict.kind == "spinning", (name, verdict.summary)
