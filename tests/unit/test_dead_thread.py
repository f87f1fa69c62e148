"""A thread that died, its traceback in the job's log, leaves the rank waiting for what it fed
(real looks: `pipeline_heartbeat_hang`, `zero_optimizer_straggler`, `fsdp_grad_hook_blocked`).

No stack shows a thread that is gone: `pipeline_heartbeat_hang`'s summary named the rank's only
other thread (a health check) as the one its main thread waited on. Python prints a dying
thread's traceback ("Exception in thread NAME:", its outermost frame threading's
`_bootstrap_inner`) to the job's stderr, which the log scan already reads: the straggler verdict
now says it, beside what the stacks show.
"""

from __future__ import annotations

from dataclasses import replace

from snapfactory import map_every_rank, map_rank, recorded

from slurmdiag.analysis import diagnose
from slurmdiag.analysis.verdicts import STRAGGLER_STEPS
from slurmdiag.snapshot import BlockedCall, LogFinding, Rank, Snapshot


def _findings(snapshot: Snapshot, **fields) -> Snapshot:
    return replace(snapshot, log_findings=tuple(replace(f, **fields)
                                                for f in snapshot.log_findings))


def test_the_dead_label_loader_is_said() -> None:
    verdict = diagnose(recorded("pipeline_heartbeat_hang.default")).verdicts[0]
    assert (verdict.kind, verdict.culprit_ranks) == ("straggler", (3,))
    assert ("; a thread of the job died: ValueError in load_labels "
            "(/work/main/tests/scenarios/pipeline_heartbeat_hang.py:55)") in verdict.summary
    assert "(no rank label: it may be another rank's) while ranks 0-2 wait" in verdict.summary
    assert verdict.evidence[0].endswith(
        "ValueError: corrupt label record at step 3, micro-batch 1: what it fed (a queue, an "
        "event) never comes")
    assert verdict.next_step == STRAGGLER_STEPS["thread_died"]


def test_a_copy_thread_dead_on_a_full_disk_is_said() -> None:
    # a rank's main thread waits on a lock its snapshot copy thread would release
    verdict = diagnose(recorded("zero_optimizer_straggler.default")).verdicts[0]
    assert verdict.culprit_ranks == (2,)
    assert "a thread of the job died: OSError in _copy" in verdict.summary
    assert verdict.next_step == STRAGGLER_STEPS["thread_died"]


def test_a_dead_consumer_of_a_full_queue_keeps_its_step() -> None:
    verdict = diagnose(recorded("fsdp_grad_hook_blocked.default")).verdicts[0]
    assert "a thread of the job died: ValueError in _drain" in verdict.summary
    assert "it no longer takes from the queue the rank puts into" in verdict.evidence[0]
    assert verdict.next_step == STRAGGLER_STEPS["queue_full"]


def test_a_traceback_of_the_main_thread_is_not_a_dead_thread() -> None:
    # WHEN the traceback's outermost frame is the program's, not a thread's start
    snapshot = _findings(recorded("pipeline_heartbeat_hang.default"),
                         fields={"exception": "ValueError", "function": "main", "site": "x.py:1",
                                 "frames": "/work/x.py:1:<module>\n/work/x.py:9:main"})
    verdict = diagnose(snapshot).verdicts[0]
    assert "died" not in verdict.summary and verdict.next_step != STRAGGLER_STEPS["thread_died"]


def test_another_ranks_dead_thread_is_not_this_ranks() -> None:
    snapshot = _findings(recorded("pipeline_heartbeat_hang.default"), rank=1)
    verdict = diagnose(snapshot).verdicts[0]
    assert verdict.culprit_ranks == (3,) and "died" not in verdict.summary


def _thread_traceback(frames: str) -> LogFinding:
    return LogFinding(source="/tmp/job-7.out", line_no=12, kind="traceback",
                      text="EOFError: record 3 truncated", rank=None,
                      fields={"exception": "EOFError", "site": "/work/loader.py:28",
                              "function": "read_batch", "frames": frames})


def test_a_thread_that_computes_does_not_hide_a_dead_one() -> None:
    # GIVEN the slow-labels look (rank 3's main thread in queue.get(), its loader computing:
    # "a slow worker thread or a hang, cannot tell")
    snapshot = recorded("healthy_pipeline_slow_labels.samples1")
    assert diagnose(snapshot).verdicts[0].kind == "slow_step"
    # WHEN the job's log holds a thread's traceback (another thread of it died)
    dead = _thread_traceback("/usr/lib/python3.11/threading.py:1045:_bootstrap_inner\n"
                             "/usr/lib/python3.11/threading.py:982:run\n"
                             "/work/loader.py:28:read_batch")
    verdict = diagnose(replace(snapshot, log_findings=(dead,))).verdicts[0]
    # THEN the rank is blocked again, the dead thread said
    assert (verdict.kind, verdict.culprit_ranks) == ("straggler", (3,))
    assert "a thread of the job died: EOFError in read_batch" in verdict.summary
    # AND a traceback of the main thread (a program's) does not do it
    main = _thread_traceback("/work/train.py:90:<module>\n/work/loader.py:28:read_batch")
    assert diagnose(replace(snapshot, log_findings=(main,))).verdicts[0].kind == "slow_step"


def _waiting_on(snapshot: Snapshot, holders: tuple[int, ...]) -> Snapshot:
    """``snapshot`` with rank 3's first sample read as the collector's --locals reads it: its
    main thread in ``queue.get()`` of the label queue, held by the threads ``holders``."""
    def change(rank: Rank) -> Rank:
        first, *rest = rank.samples
        return replace(rank, samples=(replace(first, waited="<Queue at 0x7f1f0d5fdd90>",
                                              waited_holders=holders), *rest))
    return map_rank(snapshot, 3, change)


LOADER, HEALTH = 598, 591  # rank 3's label-loader (active, computing) and health-check threads


def test_a_dead_thread_beside_the_live_producer_that_computes_is_not_the_one_waited_for() -> None:
    # GIVEN the slow-labels look with a thread's traceback in the job's log (a telemetry
    # thread dead at the start: healthy_slow_labels_dead_telemetry, a false alarm when written)
    dead = _thread_traceback("/usr/lib/python3.11/threading.py:1045:_bootstrap_inner\n"
                             "/usr/lib/python3.11/threading.py:982:run\n"
                             "/work/telemetry.py:31:push_metrics")
    snapshot = replace(recorded("healthy_pipeline_slow_labels.samples1"), log_findings=(dead,))
    # WHEN the collector found that the loader thread, which computes, holds the waited queue
    verdict = diagnose(_waiting_on(snapshot, (LOADER,))).verdicts[0]
    # THEN the producer lives and works: "cannot tell", not a straggler, and the hold is said
    assert (verdict.kind, verdict.severity, verdict.culprit_ranks) == ("slow_step", "info", (3,))
    assert any("a thread that computes holds the <Queue at 0x7f1f0d5fdd90> its main thread "
               "waits on" in e for e in verdict.evidence)
    # AND held by a thread that does not compute, the dead thread is taken for the producer
    held = diagnose(_waiting_on(snapshot, (HEALTH,))).verdicts[0]
    assert (held.kind, held.culprit_ranks) == ("straggler", (3,))


def test_a_holder_asleep_does_not_decide_for_a_producer_that_computes() -> None:
    # a real look with --strace 0 (the watchdog's light attach) of
    # healthy_slow_loader_queue_monitor: rank 2's loader computes (2.5 s a batch) and reaches
    # the queue as a global; the only holder is a queue-depth monitor, asleep
    snapshot = recorded("healthy_slow_loader_queue_monitor.strace0")
    rank = next(r for _, r in snapshot.all_ranks() if r.rank == 2)
    monitor = next(t.os_thread_id for x in rank.samples for t in x.threads
                   if t.name == "queue-monitor")
    assert rank.samples[0].waited_holders == (monitor,)
    # THEN "cannot tell", as without the holders (holders deciding alone: a critical straggler)
    verdict = diagnose(snapshot).verdicts[0]
    assert (verdict.kind, verdict.severity, verdict.culprit_ranks) == ("slow_step", "info", (2,))
    # AND WHEN that holder sits in a receive (a producer stuck on its service), it decides
    assert monitor is not None
    stuck = map_rank(snapshot, 2, lambda r: replace(r, blocked_calls=(
        *r.blocked_calls, BlockedCall(tid=monitor, call="recvfrom", fd=9,
                                      target="socket:[1]")),))
    verdict = diagnose(stuck).verdicts[0]
    assert (verdict.kind, verdict.culprit_ranks) == ("straggler", (2,))


def test_the_recorded_look_holds_the_loaders_hold_of_the_label_queue() -> None:
    # a real look of healthy_slow_labels_dead_telemetry (attach with the defaults): the
    # collector's --locals reading reached the snapshot, the loader thread its queue's holder
    snapshot = recorded("healthy_slow_labels_dead_telemetry.default")
    rank = next(r for _, r in snapshot.all_ranks() if r.rank == 3)
    first = rank.samples[0]
    loader = next(t.os_thread_id for t in first.threads if t.name == "label-loader")
    assert first.waited is not None and first.waited.startswith("<Queue at 0x")
    assert first.waited_holders == (loader,)
    assert all(x.waited is None for _, r in snapshot.all_ranks() if r.rank != 3
               for x in r.samples)  # ranks 0-2 wait in sends and receives, on no queue
    assert len(snapshot.log_findings) == 4  # the four telemetry threads' tracebacks
    assert all(v.severity == "info" for v in diagnose(snapshot).verdicts)


def _without_holders(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` as an older collector read it: no holders of what main threads wait on."""
    return map_every_rank(snapshot, lambda r: replace(r, samples=tuple(
        replace(x, waited_holders=()) for x in r.samples)))


def test_a_stalled_fill_thread_beside_a_busy_tokenizer_is_a_straggler() -> None:
    # a real look (--samples 1) of stalled_loader_busy_tokenizer: rank 2's fill thread in a
    # socket read nothing answers, its main thread in queue.get(), its val-tokenize thread
    # computing (28 % CPU), no traceback anywhere
    snapshot = recorded("stalled_loader_busy_tokenizer.samples1")
    verdict = diagnose(snapshot).verdicts[0]
    assert (verdict.kind, verdict.culprit_ranks) == ("straggler", (2,))
    # (the queue.get() line when recorded: the scenario's CULPRIT line moved up since)
    assert verdict.sites[0].endswith("tests/scenarios/stalled_loader_busy_tokenizer.py:60")
    assert any(e.startswith("rank 2: its main thread waits on <Queue at 0x")
               and e.endswith("held by thread shard-fill (py-spy --locals)")
               for e in verdict.evidence)
    # AND without the collector's holders it was the missed hang it was when written
    old = diagnose(_without_holders(snapshot)).verdicts[0]
    assert (old.kind, old.severity) == ("slow_step", "info")
