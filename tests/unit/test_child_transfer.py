"""A rank waiting for a child or a thread that moves data (a checkpoint's upload) works
through it; the child it waits for is the one its wait4 names, not another child's traffic."""

from __future__ import annotations

from dataclasses import replace

from snapfactory import map_rank, recorded

from slurmdiag.analysis import analyze
from slurmdiag.snapshot import BlockedCall, RecentConnection, RecentTraffic


def test_a_rank_waiting_for_a_child_that_uploads_is_a_slow_transfer():
    # GIVEN the real look: rank 0 in waitpid for its copy tool, which sends to the gateway
    verdict = analyze(recorded("rank0_upload_tool_barrier.default")).verdicts[0]
    # THEN no alarm (it was a critical straggler): a slow transfer through the child
    assert verdict.kind == "slow_step" and verdict.severity == "info"
    assert verdict.culprit_ranks == (0,)
    assert "for its child pid" in verdict.summary and "--copy" in verdict.summary
    assert "which moves data on" in verdict.summary


def test_a_rank_waiting_for_a_stalled_child_is_blamed_and_the_child_named():
    verdict = analyze(recorded("rank0_upload_tool_stalled.default")).verdicts[0]
    assert verdict.kind == "straggler" and verdict.severity == "critical"
    assert verdict.culprit_ranks == (0,)
    # the child named is the one its wait4 waits on (the tool), not the first child (gateway)
    assert "--copy" in verdict.summary and "--gateway" not in verdict.summary


def test_another_childs_traffic_does_not_make_the_wait_a_transfer():
    # GIVEN the healthy look with the copy tool's connection quiet: only the gateway, a child
    # rank 0 does not wait for, still receives data
    def quiet_tool(r):  # type: ignore[no-untyped-def]
        return replace(r, workers=tuple(
            replace(w, recent_traffic=RecentTraffic(within_ms=2500, checked=1, active=()))
            if "--copy" in w.cmdline else w for w in r.workers))

    snapshot = map_rank(recorded("rank0_upload_tool_barrier.default"), 0, quiet_tool)
    rank0 = next(r for n in snapshot.nodes for r in n.ranks if r.rank == 0)
    assert any(w.recent_traffic and w.recent_traffic.active for w in rank0.workers)
    verdict = analyze(snapshot).verdicts[0]
    # THEN rank 0 waits for a stalled child: blamed
    assert verdict.kind == "straggler" and verdict.culprit_ranks == (0,)


def test_a_tool_run_through_a_shell_is_the_child_waited_for():
    # GIVEN the real looks of rank 0 running the copy tool through sh (shell=True): its wait4
    # names sh, which the collector does not keep (a shell), the tool is sh's child
    healthy = analyze(recorded("rank0_upload_shell_barrier.default.through_sh")).verdicts[0]
    stalled = analyze(recorded("rank0_upload_shell_stalled.default.through_sh")).verdicts[0]
    # THEN the uploading tool makes a slow transfer, named as what rank 0 waits for; its
    # stalled twin a straggler, the tool named, not the gateway
    assert healthy.kind == "slow_step" and healthy.severity == "info"
    assert "--copy" in healthy.summary and "--gateway" not in healthy.summary
    assert stalled.kind == "straggler" and stalled.culprit_ranks == (0,)
    assert "--copy" in stalled.summary and "--gateway" not in stalled.summary
    # (the shell it runs through said)
    assert "(run through pid " in healthy.summary and "(run through pid " in stalled.summary


def test_a_real_sidecar_does_not_speak_for_a_stalled_tool_run_through_a_shell():
    # GIVEN the real look of rank0_upload_shell_sidecar: the tool stalled behind sh, and a
    # metrics sidecar child of rank 0 sending every 100 ms
    snapshot = recorded("rank0_upload_shell_sidecar.default.sidecar")
    rank0 = next(r for n in snapshot.nodes for r in n.ranks if r.rank == 0)
    assert any(w.recent_traffic and w.recent_traffic.active and "_sidecar.py" in w.cmdline[1]
               for w in rank0.workers)
    # THEN rank 0 is blamed, the tool named
    verdict = analyze(snapshot).verdicts[0]
    assert verdict.kind == "straggler" and verdict.culprit_ranks == (0,)
    assert "_copy_tool.py" in verdict.summary and "_sidecar.py" not in verdict.summary


def test_a_sidecar_moving_data_does_not_speak_for_a_stalled_tool_run_through_a_shell():
    # GIVEN the stalled look with rank 0's other child (the gateway here; a metrics service,
    # wandb's, in real jobs) moving data: it is not what sh runs
    def chatty_gateway(r):  # type: ignore[no-untyped-def]
        return replace(r, workers=tuple(
            replace(w, recent_traffic=replace(w.recent_traffic, active=(
                RecentConnection("127.0.0.1:1", "127.0.0.1:2", 10, 10),)))
            if "--gateway" in w.cmdline and w.recent_traffic else w for w in r.workers))

    snapshot = map_rank(recorded("rank0_upload_shell_stalled.default.through_sh"), 0,
                        chatty_gateway)
    rank0 = next(r for n in snapshot.nodes for r in n.ranks if r.rank == 0)
    assert any(w.recent_traffic and w.recent_traffic.active for w in rank0.workers)
    # THEN rank 0 still waits for a stalled tool: blamed
    verdict = analyze(snapshot).verdicts[0]
    assert verdict.kind == "straggler" and verdict.culprit_ranks == (0,)
    # AND read by a collector older than ``via`` (every child taken, as before) it is excused
    old = map_rank(snapshot, 0, lambda r: replace(
        r, workers=tuple(replace(w, via=None) for w in r.workers)))
    assert analyze(old).verdicts[0].kind == "slow_step"


def test_a_main_thread_waiting_on_a_thread_that_uploads_is_a_slow_transfer():
    # GIVEN the real look: rank 0's main thread on a future, its upload thread in sendto on a
    # connection that carried data in strace's window
    verdict = analyze(recorded("rank0_upload_thread_barrier.default")).verdicts[0]
    # THEN no alarm (it was a critical straggler)
    assert verdict.kind == "slow_step" and verdict.severity == "info"
    assert "for its thread ckpt-upload_0, in sendto on" in verdict.summary


def test_a_thread_on_a_quiet_connection_beside_one_that_sends_keeps_the_rank_blocked():
    # GIVEN the same look with a second thread of rank 0 in a receive on a quiet connection
    # (exit_heartbeat_stuck's shape: the thread waited for is stuck, another one sends)
    def quiet_receiver(r):  # type: ignore[no-untyped-def]
        stuck = BlockedCall(tid=r.pid + 99, call="recvfrom", fd=40, target="socket:[1]",
                            local="127.0.0.1:5000", remote="127.0.0.1:6000")
        return replace(r, blocked_calls=(*r.blocked_calls, stuck))

    snapshot = map_rank(recorded("rank0_upload_thread_barrier.default"), 0, quiet_receiver)
    verdict = analyze(snapshot).verdicts[0]
    assert verdict.kind == "straggler" and verdict.culprit_ranks == (0,)


def test_a_rank_waiting_for_a_child_that_writes_files_is_a_slow_transfer():
    # GIVEN the real look: rank 0 waits for a throttled copy tool writing ~1 MB/s
    snapshot = recorded("rank0_copy_tool_barrier.samples1")
    verdict = analyze(snapshot).verdicts[0]
    assert verdict.kind == "slow_step" and verdict.severity == "info"
    assert "reads and writes 1.0 MB/s" in verdict.summary
    # AND a child writing a log line a second (a tool retrying for ever) is no transfer
    def logging_only(r):  # type: ignore[no-untyped-def]
        return replace(r, workers=tuple(replace(w, io_rate=120) for w in r.workers))

    verdict = analyze(map_rank(snapshot, 0, logging_only)).verdicts[0]
    assert verdict.kind == "straggler" and verdict.culprit_ranks == (0,)
