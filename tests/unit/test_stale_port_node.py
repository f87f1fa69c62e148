"""Ranks that never reached the rendezvous (`stale_port_node`, recorded by `make accuracy`):
node 1's ranks retry a stale MASTER_PORT, refused; rank 0 waits for them in the store's
constructor at the same line as theirs, rank 1 in gloo's mesh. It was all_waiting ("the
process group never formed"), no culprit; stacks alone would blame rank 1, the odd one."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from snapfactory import map_rank, recorded

from slurmdiag.analysis import diagnose
from slurmdiag.snapshot import BlockedCall, Connection, StraceSummary


@pytest.mark.parametrize("mode, severity", [("default", "critical"), ("samples1", "warning")])
def test_the_ranks_with_no_connection_to_the_rendezvous_are_the_culprits(mode: str, severity: str) -> None:
    v = diagnose(recorded(f"stale_port_node.{mode}.refused")).verdicts[0]
    assert (v.kind, v.severity, v.culprit_ranks) == ("straggler", severity, (2, 3)), v
    assert v.sites[0].endswith("stale_port_node.py:41")
    assert "never reached the rendezvous" in v.summary and "connect() calls fail" in v.summary
    assert any(re.search(r"rank [23]: .* [1-9]\d* of \d+ connect\(\) calls failed", line)
               for line in v.evidence), v.evidence
    assert "MASTER_PORT" in v.next_step
    # as many ranks reached nobody as met: which side holds the wrong setting is not known
    # (stale_port_host: the store's own node holds the stale port)
    assert v.confidence == "medium"
    assert any(line.startswith("unsure which side is wrong") for line in v.evidence)


def _joined_the_store(snapshot, number):  # type: ignore[no-untyped-def]
    # rank `number` holding a connection to rank 0's store, as ranks 0 and 1 do
    store = next(c for n in snapshot.nodes for r in n.ranks if r.rank == 0
                 for c in r.connections if c.state == "LISTEN")
    port = store.local.rpartition(":")[2]
    link = Connection(local="127.0.0.1:51000", remote=f"127.0.0.1:{port}", state="ESTABLISHED")
    return map_rank(snapshot, number, lambda r: replace(r, connections=(link,)))


def test_every_rank_joined_stays_a_rendezvous_that_never_formed() -> None:
    # GIVEN the recording with ranks 2 and 3 connected to the store like the others
    snapshot = recorded("stale_port_node.default.refused")
    for number in (2, 3):
        snapshot = _joined_the_store(snapshot, number)
    v = diagnose(snapshot).verdicts[0]
    # THEN nothing sets a rank apart
    assert (v.kind, v.culprit_ranks) == ("all_waiting", ()), v
    assert "rendezvous" in v.summary


def test_a_rank_whose_sockets_were_not_read_is_not_judged() -> None:
    # GIVEN rank 3 whose descriptors could not be read (the collector's error), no strace
    snapshot = map_rank(recorded("stale_port_node.default.refused"), 3, lambda r: replace(
        r, connections=(), strace=StraceSummary(status="error"),
        errors=(f"cannot read /proc/{r.pid}/fd",)))
    v = diagnose(snapshot).verdicts[0]
    # THEN only rank 2 is named: rank 3 is neither blamed nor cleared
    assert (v.kind, v.culprit_ranks) == ("straggler", (2,)), v


def test_a_rank_between_two_attempts_with_no_socket_is_judged() -> None:
    # GIVEN rank 3 asleep in the client's backoff: no socket, no connect() in strace's window
    # (store_unreachable, on the netns cluster)
    snapshot = map_rank(recorded("stale_port_node.default.refused"), 3, lambda r: replace(
        r, connections=(), strace=StraceSummary(status="ok", window_s=2.0)))
    v = diagnose(snapshot).verdicts[0]
    # THEN it is named with rank 2
    assert (v.kind, v.culprit_ranks) == ("straggler", (2, 3)), v


def test_no_rank_joined_blames_none() -> None:
    # GIVEN nobody connected to anybody (a wrong address for all): rank 0's and rank 1's
    # connections dropped but their listeners, rank 1 still in the store's making (as rank 2)
    snapshot = recorded("stale_port_node.default.refused")
    for number in (0, 1):
        snapshot = map_rank(snapshot, number, lambda r: replace(
            r, connections=tuple(c for c in r.connections if c.state == "LISTEN")))
    snapshot = map_rank(snapshot, 1, lambda r: replace(r, samples=_store_making()))
    v = diagnose(snapshot).verdicts[0]
    # THEN every rank waits: no culprit
    assert (v.kind, v.culprit_ranks) == ("all_waiting", ()), v


def test_differing_rendezvous_variables_are_said() -> None:
    # GIVEN the stale port exported in node 1's environment (allowlisted, read by the collector)
    snapshot = recorded("stale_port_node.default.refused")
    for number in range(4):
        port = "20019" if number >= 2 else "20002"
        snapshot = map_rank(snapshot, number, lambda r, port=port: replace(
            r, env={**r.env, "MASTER_PORT": port}))
    v = diagnose(snapshot).verdicts[0]
    # THEN the verdict shows who holds which
    assert v.culprit_ranks == (2, 3), v
    assert "MASTER_PORT differs: ranks 0-1 20002; ranks 2-3 20019" in v.evidence


def _store_making():  # type: ignore[no-untyped-def]
    """Rank 2's samples in the recording: in torch's rendezvous, making its store client."""
    return recorded("stale_port_node.default.refused").nodes[1].ranks[0].samples


def test_a_minority_that_met_lowers_the_confidence() -> None:
    # GIVEN only rank 0 (the store's host) met: rank 1 still in the store's making, with no
    # connection either
    snapshot = map_rank(recorded("stale_port_node.default.refused"), 1, lambda r: replace(
        r, connections=tuple(c for c in r.connections if c.state == "LISTEN"),
        samples=_store_making()))
    v = diagnose(snapshot).verdicts[0]
    # THEN ranks 1-3 are named, unsure which side is wrong
    assert (v.culprit_ranks, v.confidence) == ((1, 2, 3), "medium"), v
    assert any(line.startswith("unsure which side is wrong") for line in v.evidence)


def test_a_connection_request_nothing_answers_is_said() -> None:
    # GIVEN ranks 2 and 3 each in a connect() whose socket stays SYN_SENT (a firewall that
    # drops), no failed connect() in strace's window
    def connecting(rank):  # type: ignore[no-untyped-def]
        syn = Connection(local=f"10.0.0.{rank.rank}:40000", remote="10.0.0.1:29500",
                         state="SYN_SENT")
        call = BlockedCall(tid=rank.pid, call="connect", fd=9, local=syn.local, remote=syn.remote)
        return replace(rank, connections=(syn,), blocked_calls=(call,),
                       strace=StraceSummary(status="ok", window_s=2.0))

    snapshot = recorded("stale_port_node.default.refused")
    for number in (2, 3):
        snapshot = map_rank(snapshot, number, connecting)
    v = diagnose(snapshot).verdicts[0]
    # THEN they are the culprits, said to be connecting to the address nothing answers at
    assert v.culprit_ranks == (2, 3), v
    assert "(nothing answers their connection requests)" in v.summary, v.summary
    assert any("connecting to 10.0.0.1:29500 (SYN_SENT" in line for line in v.evidence), v.evidence


def test_a_rank_past_the_store_whose_store_went_away_is_not_blamed() -> None:
    # GIVEN rank 1 in gloo's mesh (past the store's creation: it met the store) whose
    # connection to the store its host closed (stale_port_retry_init: under a wrapper that
    # retries init_process_group, rank 0 made a new store as its attempt timed out): one socket,
    # CLOSE; ranks 2 and 3 still knocking at the stale port
    snapshot = map_rank(recorded("stale_port_node.default.refused"), 1, lambda r: replace(
        r, connections=(Connection(local="127.0.0.1:44544", remote="[::]:0", state="CLOSE"),)))
    v = diagnose(snapshot).verdicts[0]
    # THEN it is not taken for one that never reached the rendezvous (it was named with 2 and 3)
    assert (v.kind, v.culprit_ranks) == ("straggler", (2, 3)), v
    # AND a rank still in the store's making with that socket is judged as before
    moved = map_rank(snapshot, 1, lambda r: replace(r, samples=_store_making()))
    assert diagnose(moved).verdicts[0].culprit_ranks == (1, 2, 3)


def test_a_rendezvous_retried_by_a_wrapper_is_no_progress_and_names_the_stale_ranks() -> None:
    # GIVEN stale_port_retry_init with the defaults (real): rank 0 left the rendezvous for the
    # wrapper's back-off after its first sample (its attempt timed out), rank 1 asleep in the
    # back-off in all three, still connected to rank 0's store, ranks 2 and 3 knocking at the
    # stale port. Before: "progressing" (rank 0 "went out of a collective").
    v = diagnose(recorded("stale_port_retry_init.default")).verdicts[0]
    # THEN ranks 2 and 3 never reached the rendezvous; 0 and 1 wait for them
    assert (v.kind, v.severity, v.culprit_ranks) == ("straggler", "critical", (2, 3)), v
    assert v.sites[0].endswith("stale_port_retry_init.py:39")
    # AND a rank that works between the two (a healthy start computing, then the rendezvous)
    # still moves
    def computing(rank):  # type: ignore[no-untyped-def]
        return replace(rank, samples=tuple(
            replace(s, threads=(replace(s.threads[0], cpu_s=1.0 + 0.9 * k), *s.threads[1:]))
            for k, s in enumerate(rank.samples)))

    busy = map_rank(recorded("stale_port_retry_init.default"), 0, computing)
    assert "progressing" in [v.kind for v in diagnose(busy).verdicts]


def test_a_rank_asleep_before_the_rendezvous_that_met_no_rank_is_not_taken_for_a_retry() -> None:
    # GIVEN stale_port_retry_init with --samples 1 (real): rank 0 asleep in the wrapper's
    # back-off, its store gone (no socket), ranks 1-3 in the store's making, none connected
    v = diagnose(recorded("stale_port_retry_init.samples1")).verdicts[0]
    # THEN nothing says it ever met the rendezvous: it is the one rank apart (a known miss of
    # the scenario with one sample: by stacks and sockets a rank not yet at the rendezvous)
    assert (v.kind, v.culprit_ranks) == ("straggler", (0,)), v
