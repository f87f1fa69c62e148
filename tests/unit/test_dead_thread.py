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

from snapfactory import recorded

from slurmdiag.analysis import diagnose
from slurmdiag.analysis.verdicts import STRAGGLER_STEPS
from slurmdiag.snapshot import LogFinding, Snapshot


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
