"""A pipeline's stages move an activation every second or so: a few send and receive calls a
rank in strace's window, not the hundreds of collectives (real looks with `--samples 1` of
`healthy_pipeline_p2p` and `healthy_pipeline_schedule`, session 25's and 29's full
`make accuracy`).

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
    # were a store's, or failed reads): a few calls prove nothing, the stacks decide (two
    # stages computing in native code, two waiting: a step longer than the look, or a hang)
    for name in LOOKS:
        verdict = diagnose(map_every_rank(recorded(name), _quiet)).verdicts[0]
        assert (verdict.kind, verdict.severity) == ("slow_step", "info"), (name, verdict.summary)


def _not_read_again(rank: Rank) -> Rank:
    return replace(rank, recent_traffic=None)


def test_without_the_connections_read_again_the_bar_stays_eight_calls() -> None:
    # WHEN an older collector did not read the connections at strace's end
    for name in LOOKS:
        verdict = diagnose(map_every_rank(recorded(name), _not_read_again)).verdicts[0]
        assert verdict.kind == "slow_step", (name, verdict.summary)


#: Session 29's full `make accuracy` (2 of 50 controls alarmed with `--samples 1`): the same
#: sight on a more crowded machine (20 ranks on 2 cores, the busy stages at 0-14 % CPU), and
#: nothing moved on the waiting stages' connections in strace's 2 s.
QUIET = ("healthy_pipeline_p2p.samples1.quiet", "healthy_pipeline_schedule.samples1.quiet")


def test_two_stages_computing_in_native_code_while_two_wait_is_no_alarm() -> None:
    for name in QUIET:
        verdict = diagnose(recorded(name)).verdicts[0]
        assert (verdict.kind, verdict.severity, verdict.culprit_ranks) == (
            "slow_step", "info", (0, 1)), (name, verdict.summary)


def _in_python(rank: Rank) -> Rank:
    """A busy rank as one computing in Python (its main thread holding the GIL: a spin)."""
    if not any(t.active for x in rank.samples for t in x.threads):
        return rank
    return replace(rank, samples=tuple(
        replace(x, threads=tuple(replace(t, owns_gil=t.active) for t in x.threads))
        for x in rank.samples))


def test_its_liar_two_stages_spinning_in_python_are_spinning() -> None:
    # WHEN the two busy stages hold the GIL (pipeline_stage_spinning's loop, on two stages)
    for name in QUIET:
        verdict = diagnose(map_every_rank(recorded(name), _in_python)).verdicts[0]
        assert (verdict.kind, verdict.severity, verdict.culprit_ranks) == (
            "spinning", "warning", (0, 1)), (name, verdict.summary)
