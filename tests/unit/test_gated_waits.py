"""A rank that works while the others wait for its file lock or its store key is a rank-gated
phase (said as info: a long phase and an endless loop look the same), not a straggler pile or
a spinner; the step's own collective, even asynchronous, keeps a spinner a spinner."""

from __future__ import annotations

from dataclasses import replace

import pytest
from snapfactory import (
    collective,
    in_user,
    map_rank,
    node,
    rank,
    recorded,
    snap,
    spinning_in,
    stack,
)

from slurmdiag.analysis import analyze
from slurmdiag.snapshot import BlockedCall, Connection, LogFinding, Sample, ThreadStack


def test_ranks_waiting_for_a_working_holders_file_lock_are_a_gated_build():
    # GIVEN the real healthy_cache_lock_build look: rank 0 builds the cache holding the lock,
    # ranks 1-3 blocked in flock() for it (/proc/locks names rank 0's pid)
    verdict = analyze(recorded("healthy_cache_lock_build.default.torn")).verdicts[0]
    # THEN no alarm: a build under a file lock or a hang, rank 0 named, the lock's holder said
    assert verdict.kind == "slow_step" and verdict.severity == "info"
    assert verdict.culprit_ranks == (0,)
    assert verdict.summary.startswith("a build under a file lock or a hang, cannot tell")
    assert "held by rank 0" in verdict.summary and "tokens.lock" in verdict.summary
    # and the holder's site survives its torn sample (py-spy's read of a running process),
    # the generator expression it moves in said as its function (function_site)
    assert verdict.sites and verdict.sites[0].endswith("rank0_prepare_barrier.py:"
                                                       "build_vocabulary")


def test_a_holder_that_idles_under_its_lock_is_still_the_culprit():
    # GIVEN the same look, rank 0 now asleep under the lock (blocked, no CPU): a real hang
    snapshot = recorded("healthy_cache_lock_build.default.torn")
    asleep = in_user(48, "main", "/work/main/tests/scenarios/healthy_cache_lock_build.py")
    sleeping = map_rank(snapshot, 0, lambda r: replace(
        r, state="S", cpu_percent=0.0, wchan="hrtimer_nanosleep", samples=tuple(
            replace(x, cpu_s=1.0, threads=tuple(
                replace(t, frames=asleep, active=False, owns_gil=False, cpu_s=5.0)
                if t.os_thread_id == r.pid else t for t in x.threads))
            for x in r.samples)))
    verdict = analyze(sleeping).verdicts[0]
    # THEN it is blamed at a hang's severity, the waiters named as waiting for its lock
    assert verdict.kind == "straggler" and verdict.severity == "critical"
    assert verdict.culprit_ranks == (0,)


def test_ranks_waiting_in_a_store_for_a_working_rank_are_a_gated_phase():
    verdict = analyze(recorded("healthy_store_prepare.default")).verdicts[0]
    assert verdict.kind == "slow_step" and verdict.severity == "info"
    assert verdict.culprit_ranks == (2,)
    assert verdict.summary.startswith("a rank-gated phase or a hang, cannot tell")


def test_an_asynchronous_collectives_wait_keeps_the_spinner():
    # GIVEN the same look with the waiting ranks on a futex (an async all_reduce's Work.wait:
    # gloo's threads do the I/O), the shape of spinning_rank with async_op=True
    snapshot = recorded("healthy_store_prepare.default")
    for number in (0, 1, 3):
        snapshot = map_rank(snapshot, number, lambda r: replace(r, wchan="futex_wait_queue"))
    verdict = analyze(snapshot).verdicts[0]
    # THEN rank 2 spins while the others wait: an alarm
    assert verdict.kind == "spinning" and verdict.severity == "critical"
    assert verdict.culprit_ranks == (2,)


def test_a_torn_sample_does_not_cost_a_moving_rank_its_function():
    # GIVEN a rank moving in sample_crop_box whose second sample lost its outer frames
    whole = spinning_in("sample_crop_box", 41)
    other = spinning_in("sample_crop_box", 43)
    torn = whole[:1]
    samples = [Sample(t=float(i), threads=(ThreadStack(name="MainThread", thread_id=1,
                                                       os_thread_id=1003, active=True,
                                                       owns_gil=True, frames=s),))
               for i, s in enumerate((whole, torn, other))]
    spinner = rank(3, *samples, pid=1003, state="R", cpu=99.0, active=True)
    snapshot = snap(node("n1", spinner))
    (view,) = analyze(snapshot).ranks
    assert view.site is not None and view.site.endswith("train.py:sample_crop_box")



# ---------------------------------------------------------------- ranks that finished


def test_ranks_gone_while_the_rest_works_and_nobody_waits_finished():
    # GIVEN the real healthy_rank0_final_eval look (--samples 1): ranks 1-3 returned and exited
    # 0, rank 0 evaluates alone, no collective on its stack, nothing in the log
    snapshot = recorded("healthy_rank0_final_eval.samples1")
    verdict = analyze(snapshot).verdicts[0]
    # THEN not hung (it was missing_rank 1-3, critical), the missing ranks said finished
    assert verdict.kind == "progressing" and verdict.severity == "info"
    assert any("ranks 1-3 have no process, left no error in the job's log" in line
               for line in verdict.evidence)
    assert analyze(snapshot).missing_ranks == (1, 2, 3)  # still listed as missing


def test_ranks_gone_with_a_traceback_in_the_log_are_missing():
    # GIVEN the same look with rank 2's traceback in the job's log: it crashed
    snapshot = recorded("healthy_rank0_final_eval.samples1")
    crash = LogFinding(source="job.out", line_no=40, kind="traceback", rank=2,
                       text="RuntimeError: CUDA error: an illegal memory access",
                       fields={"site": "/work/train.py:12", "exception": "RuntimeError"})
    verdict = analyze(replace(snapshot, log_findings=(crash,))).verdicts[0]
    # THEN the missing ranks are blamed
    assert verdict.kind == "missing_rank" and set(verdict.culprit_ranks) >= {2}


def test_ranks_gone_while_the_rest_waits_are_missing():
    # GIVEN rank 0 of that look waiting in an all_reduce instead (dead_rank's shape)
    snapshot = map_rank(recorded("healthy_rank0_final_eval.samples1"), 0, lambda r: replace(
        r, state="S", cpu_percent=0.0, samples=tuple(replace(x, threads=tuple(
            replace(t, frames=collective("all_reduce"), active=False, owns_gil=False)
            if t.os_thread_id == r.pid else t for t in x.threads)) for x in r.samples)))
    verdict = analyze(snapshot).verdicts[0]
    assert verdict.kind == "missing_rank" and verdict.culprit_ranks == (1, 2, 3)



# ---------------------------------------------------------------- ranks that poll together


def test_ranks_polling_together_wait_for_the_rank_stuck_elsewhere():
    # GIVEN the real async_poll_wait look: ranks 0, 1, 3 asleep in the poll loop of their
    # asynchronous all_reduce, rank 2 in queue.get() of its dead prefetch thread
    verdict = analyze(recorded("async_poll_wait.default")).verdicts[0]
    # THEN rank 2 alone is blamed (all four were), the pollers said to wait on it
    assert verdict.kind == "straggler" and verdict.culprit_ranks == (2,)
    assert verdict.sites[0].endswith("blocked_outside_collective.py:46")
    assert "ranks 0-1,3 wait in a sleep-poll loop" in verdict.summary
    assert any("taken as polling for what those do" in line for line in verdict.evidence)


@pytest.mark.parametrize("name", ["healthy_poll_prepare.samples1",
                                  "healthy_poll_prepare.default.moving"])
def test_ranks_polling_for_a_working_rank_are_a_gated_phase(name):
    # GIVEN healthy_poll_prepare: rank 0 builds, ranks 1-3 poll for its marker (with the
    # defaults rank 2 was caught once at the loop's test line: its line moves)
    verdict = analyze(recorded(name)).verdicts[0]
    # THEN no alarm (it was straggler 1-3, warning)
    assert verdict.kind == "slow_step" and verdict.severity == "info"
    assert verdict.culprit_ranks == (0,)


def _asleep(line: int):  # type: ignore[no-untyped-def]
    return stack(f"sleep {SCENARIOS}poller.py:{line}", f"main {SCENARIOS}poller.py:80",
                 f"<module> {SCENARIOS}poller.py:90")


SCENARIOS = "/home/alice/proj/"


def test_a_lone_sleeper_or_every_rank_asleep_is_not_a_poll_wait():
    # a rank polling alone while the others wait in a collective stays the culprit
    alone = snap(node("n1", *(rank(r, collective("all_reduce"), collective("all_reduce"))
                              for r in (0, 1, 3)),
                      rank(2, _asleep(31), _asleep(31), wchan="hrtimer_nanosleep")))
    verdict = analyze(alone).verdicts[0]
    assert verdict.kind == "straggler" and verdict.culprit_ranks == (2,)
    # every rank asleep at one line: nobody to wait for, idle (info)
    everyone = snap(node("n1", *(rank(r, _asleep(31), _asleep(31), wchan="hrtimer_nanosleep")
                                 for r in range(4))))
    assert analyze(everyone).verdicts[0].kind == "idle"
    # sleepers as many as the rest: not taken for waiters
    half = snap(node("n1", *(rank(r, _asleep(31), _asleep(31), wchan="hrtimer_nanosleep")
                             for r in (0, 1)),
                     *(rank(r, _asleep(55), _asleep(55), wchan="hrtimer_nanosleep")
                       for r in (2, 3))))
    assert set(analyze(half).verdicts[0].culprit_ranks) == {0, 1, 2, 3}


def _polling_socket(far: str):  # type: ignore[no-untyped-def]
    """Rank 3 idle in a C call from its own line, its main thread polling a socket to ``far``
    (a TCPStore client's wait for its reply)."""
    at = stack(f"shard_map {SCENARIOS}lease.py:28", f"main {SCENARIOS}lease.py:80",
               f"<module> {SCENARIOS}lease.py:90")
    waiter = rank(3, at, at, wchan="poll_schedule_timeout.constprop.0",
                  env={"MASTER_PORT": "29500"})
    call = BlockedCall(tid=waiter.pid, call="poll", fd=7, target="socket:[9]",
                       local="127.0.0.1:40000", remote=far)
    return replace(waiter, blocked_calls=(call,))


def test_ranks_asleep_together_while_the_rest_waits_on_the_store_are_the_culprits():
    # GIVEN ranks 0-2 asleep together in a retry loop of their own (a dead service), rank 3
    # polling its connection to the job's store (store.wait for the keys they would set)
    sleepers = [rank(r, _asleep(40), _asleep(40), wchan="hrtimer_nanosleep",
                     env={"MASTER_PORT": "29500"}) for r in (0, 1, 2)]
    verdict = analyze(snap(node("n1", *sleepers, _polling_socket("127.0.0.1:29500")))).verdicts[0]
    # THEN the sleepers are blamed, rank 3 waits on them (it was blamed as their straggler)
    assert verdict.kind == "straggler" and verdict.culprit_ranks == (0, 1, 2), verdict
    assert any("rank 3 waits on the job over a socket (rank 3 in poll on 127.0.0.1:40000 -> "
               "the job's store at 127.0.0.1:29500)" in line for line in verdict.evidence), verdict
    # AND polling a service outside the job (a tracker's HTTP reply): the poll rule as before,
    # the sleepers wait on rank 3
    verdict = analyze(snap(node("n1", *sleepers, _polling_socket("10.9.9.9:443")))).verdicts[0]
    assert verdict.kind == "straggler" and verdict.culprit_ranks == (3,), verdict


def test_a_loopback_peer_counts_only_on_the_waiters_own_node():
    # GIVEN ranks 0-2 asleep together; rank 3 (node n2) polling a socket to 127.0.0.1:8125,
    # an endpoint that rank 0 also holds as the local end of a connection
    def sleepers(node_of_zero: str, host: str | None = None):  # type: ignore[no-untyped-def]
        server = Connection("127.0.0.1:8125", "127.0.0.1:51000", "ESTABLISHED")
        ranks = [replace(rank(r, _asleep(40), _asleep(40), wchan="hrtimer_nanosleep"),
                         connections=(server,) if r == 0 else ()) for r in (0, 1, 2)]
        waiter = replace(_polling_socket("127.0.0.1:8125"), env={})
        if node_of_zero == "n2":
            return snap(node("n1", ranks[1], ranks[2]), node("n2", ranks[0], waiter))
        return snap(node("n1", *ranks, hostname=host), node("n2", waiter, hostname=host))
    # WHEN rank 0 is on another node: its loopback is another host's, rank 3 waits on
    # something outside the job, the sleepers wait on it
    assert analyze(sleepers("n1")).verdicts[0].culprit_ranks == (3,)
    # AND on rank 3's own node rank 0 is its peer: rank 3 waits on the sleepers
    assert analyze(sleepers("n2")).verdicts[0].culprit_ranks == (0, 1, 2)
    # AND so on nodes that share one host (an emulated cluster: one hostname)
    assert analyze(sleepers("n1", host="vm")).verdicts[0].culprit_ranks == (0, 1, 2)


@pytest.mark.parametrize("name, culprits", [
    ("retry_loop_store_waiter.default.store_poll", (0, 1, 2)),
    ("async_poll_http_stall.default", (3,)),
    ("store_typo_async_poll.default", (2,)),
    ("retry_loop_stale_handle.default", (0, 1, 2)),
])
def test_who_waits_on_whom_when_the_rest_sit_on_a_socket(name, culprits):
    # GIVEN real looks: three ranks asleep together; the fourth polling its connection to the
    # job's store (store.wait for the keys they would publish in their retry loop), or reading
    # a tracker's reply that never comes (outside the job), or polling the store for a key
    # nobody sets while the three poll an async all_reduce (its Work in their locals), or
    # waiting for the retrying three whose main() still holds a finished all_reduce's Work
    verdict = analyze(recorded(name)).verdicts[0]
    # THEN the store waiter waits on the retrying sleepers; the tracker's reader and the
    # rank waiting for a key nobody sets are the pollers' straggler
    assert verdict.kind == "straggler" and verdict.culprit_ranks == culprits, verdict
    if culprits != (0, 1, 2):
        assert "sleep-poll loop" in verdict.summary
    else:
        assert "rank 3 waits in a store/socket/Work wait on a peer" in verdict.summary
        assert any("the job's store at 127.0.0.1:" in line for line in verdict.evidence)


def test_a_rank_of_the_same_loop_caught_awake_is_not_the_rest():
    # GIVEN healthy_slow's look (test_nic, in CI): every rank asleep in its read loop, rank 0
    # caught just woken (state R, active, a little CPU) at the same line
    asleep = [rank(r, _asleep(22), _asleep(22), wchan="hrtimer_nanosleep") for r in (1, 2, 3)]
    awake = rank(0, _asleep(22), _asleep(22), state="R", cpu=0.5)  # no wait channel
    verdict = analyze(snap(node("n1", awake, *asleep))).verdicts[0]
    # THEN the three are not taken for waiters on rank 0 (it was a critical straggler)
    assert "sleep-poll loop" not in verdict.summary
    assert not (verdict.severity in ("critical", "warning") and verdict.culprit_ranks == (0,))
