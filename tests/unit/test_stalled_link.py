"""A link that loses packets under a job waiting in one collective (`link_blackholed`, recorded
on the netns cluster): the stacks are all alike and the NICs up; the connections' tcp_info
says which link holds data never acknowledged. It was all_waiting with no culprit."""

from __future__ import annotations

from dataclasses import replace

from snapfactory import map_rank, recorded

from slurmdiag.analysis import diagnose
from slurmdiag.snapshot import Rank, RecentTraffic, StalledConnection


def test_the_link_that_holds_unacknowledged_data_is_named() -> None:
    v = diagnose(recorded("link_blackholed.default.stalled")).verdicts[0]
    assert (v.kind, v.severity, v.culprit_ranks) == ("all_waiting", "critical", (2, 3)), v
    assert v.summary.endswith("waits in all_reduce at /work/main/tests/scenarios/_training.py:39: "
                              "the network between nsnode3 and nsnode4 loses packets (data "
                              "between ranks 2-3 sent and never acknowledged)"), v.summary
    assert v.evidence[0].startswith("rank 3 (nsnode4) -> rank 2 (nsnode3): 1 segment "
                                    "unacknowledged on 10.213.8.14:59370 -> 10.213.8.13:39127")
    assert "slurmdiag probe" in v.next_step


def _stall(change):  # type: ignore[no-untyped-def]
    def apply(rank: Rank) -> Rank:
        traffic = rank.recent_traffic
        assert traffic is not None
        return replace(rank, recent_traffic=replace(
            traffic, stalled=tuple(change(c) for c in traffic.stalled)))
    return apply


def test_a_loss_acknowledged_within_a_second_is_no_stall() -> None:
    # GIVEN the recording with rank 3's last acknowledgement 600 ms old (a loss that recovers)
    snapshot = map_rank(recorded("link_blackholed.default.stalled"), 3,
                        _stall(lambda c: replace(c, last_ack_ms=600)))
    v = diagnose(snapshot).verdicts[0]
    # THEN every rank waits, the cause below Python, no rank named
    assert (v.kind, v.culprit_ranks) == ("all_waiting", ()), v
    assert "the cause is below Python" in v.summary


def test_a_stall_to_something_that_is_not_a_rank_names_no_link() -> None:
    # GIVEN the stalled connection's far end no rank's (a storage server's)
    snapshot = map_rank(recorded("link_blackholed.default.stalled"), 3,
                        _stall(lambda c: replace(c, remote="10.9.9.9:2049")))
    v = diagnose(snapshot).verdicts[0]
    # THEN the verdict does not blame the network between ranks
    assert (v.kind, v.culprit_ranks) == ("all_waiting", ()), v
    assert "loses packets" not in v.summary


def test_under_another_verdict_the_stall_is_told_beside_it() -> None:
    # GIVEN a straggler job (connect_dropped: rank 1 in an unanswered connect) where rank 0's
    # connection to rank 2 also holds data never acknowledged
    snapshot = recorded("connect_dropped.default.syn_sent")
    ends = {r.rank: r for n in snapshot.nodes for r in n.ranks}
    to_rank2 = next(c for c in ends[0].connections if c.state == "ESTABLISHED"
                    and any(c.remote == d.local for d in ends[2].connections))
    stall = StalledConnection(local=to_rank2.local, remote=to_rank2.remote, unacked=2,
                              retransmits=3, backoff=3, last_ack_ms=5000)
    snapshot = map_rank(snapshot, 0, lambda r: replace(r, recent_traffic=replace(
        r.recent_traffic or RecentTraffic(within_ms=2500, checked=1), stalled=(stall,))))
    v = diagnose(snapshot).verdicts[0]
    # THEN the straggler stays the verdict, and the stall is said as well
    assert (v.kind, v.culprit_ranks) == ("straggler", (1,)), v
    assert any(line.startswith("also: the network between") for line in v.evidence), v.evidence
