"""A rank whose main thread waits for another of its threads, and a rank that cannot exit.

Real inputs: whole snapshots of scenario jobs recorded by `make accuracy` on the local cluster
(tests/fixtures/accuracy, see LOCAL_SOURCES.md; tests/scenarios/<name>.json for each job):
`prefetch_blocked_fetch` (the main thread in Future.result(), the prefetch thread in a socket
read), `exit_waits_uploader` (rank 1 past its program's end, joined to its non-daemon uploader
at exit; the other ranks finished and are gone) and `exit_slow_upload` (its healthy twin: every
upload moves). Each rule is also tested on the variation that would make it lie.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from snapfactory import collective, frame, job, stack, thread

from slurmdiag.analysis import diagnose
from slurmdiag.analysis.stacks import program_ended
from slurmdiag.snapshot import LogFinding, RecentConnection, RecentTraffic, Snapshot

ACCURACY = Path(__file__).resolve().parent.parent / "fixtures" / "accuracy"


def load(name: str) -> Snapshot:
    return Snapshot.from_json((ACCURACY / f"{name}.json").read_text())


def top(snapshot: Snapshot):  # type: ignore[no-untyped-def]
    return diagnose(snapshot).verdicts[0]


def map_rank(snapshot: Snapshot, number: int, change) -> Snapshot:  # type: ignore[no-untyped-def]
    return replace(snapshot, nodes=tuple(
        replace(n, ranks=tuple(change(r) if r.rank == number else r for r in n.ranks))
        for n in snapshot.nodes))


def map_threads(snapshot: Snapshot, number: int, change) -> Snapshot:  # type: ignore[no-untyped-def]
    """change(thread) applied to every thread of rank ``number`` in every sample."""
    return map_rank(snapshot, number, lambda r: replace(r, samples=tuple(
        replace(s, threads=tuple(change(t) for t in s.threads)) for s in r.samples)))


# ------------------------------------------------------------- a main thread waiting on another


def test_a_main_thread_waiting_on_a_future_names_the_thread_and_the_call_it_sits_in() -> None:
    # GIVEN rank 2's main thread in Future.result() for its prefetch thread, which sits in a
    # socket read inside fetch_manifest; a server handler thread waits on an Event beside it
    v = top(load("prefetch_blocked_fetch.default.helper_io"))
    # THEN rank 2 is the straggler at its main thread's line, waiting for another thread
    assert (v.kind, v.culprit_ranks) == ("straggler", (2,)), v
    assert v.sites == (v.sites[0],) and v.sites[0].endswith("prefetch_blocked_fetch.py:81")
    assert "is waiting for another thread at" in v.summary
    # AND the thread blocked in I/O is named first, with its function and the call it waits in
    named = "prefetch_0 in fetch_manifest ("
    assert named in v.summary and "prefetch_blocked_fetch.py:62), waiting in SocketIO.readinto" \
        in v.summary
    assert v.summary.index(named) < v.summary.index("Thread-4 (process_request_thread)")
    assert "another thread" in v.next_step and "holds the lock" not in v.next_step


def test_a_helper_that_runs_is_named_without_a_call_it_waits_in() -> None:
    # GIVEN the same, but the prefetch thread seen running (its read returns, it parses)
    running = map_threads(load("prefetch_blocked_fetch.default.helper_io"), 2,
                          lambda t: replace(t, active=True) if t.name == "prefetch_0" else t)
    v = top(running)
    # THEN it is named where it is, not "waiting in" a call
    assert "prefetch_0 in fetch_manifest (" in v.summary, v.summary
    assert "waiting in SocketIO.readinto" not in v.summary


def test_a_lock_taken_in_the_jobs_own_line_is_still_a_lock() -> None:
    # GIVEN rank 1 idle on its own line (a Lock's acquire is C: no threading.py frame on top),
    # wchan futex, with a writer thread in the job's code beside it: the lock may be its own
    writer = thread(stack("flush metrics.py:30", "run metrics.py:12",
                          "_bootstrap_inner threading.py:1045"), name="writer", thread_id=7)
    held = stack("log_metrics metrics.py:44", "main train.py:80", "<module> train.py:90")
    s = job(2, 2, lambda r: [held] * 3 if r == 1 else [collective("all_reduce")] * 3,
            overrides={1: {"wchan": "futex_wait_queue", "extra_threads": (writer,)}})
    v = top(s)
    # THEN it is blocked on a lock, and the advice is about the lock
    assert (v.kind, v.culprit_ranks) == ("straggler", (1,)), v
    assert "blocked on a lock at" in v.summary and "holds the lock" in v.next_step


# ----------------------------------------------------------------- a rank that cannot exit


def test_a_main_thread_past_its_program_is_told_by_its_frames() -> None:
    shutdown = stack("_shutdown threading.py:1590")
    atexit_handler = stack("recv_into socket.py:706", "flush_on_exit metrics.py:40")
    running = stack("step train.py:50", "main train.py:80", "<module> train.py:90")
    as_module = stack("main pkg/train.py:80", "<module> pkg/__main__.py:3",
                      "_run_code runpy.py:88", "_run_module_as_main runpy.py:198")
    a_thread = stack("run loader.py:22", "run threading.py:982",
                     "_bootstrap_inner threading.py:1045", "_bootstrap threading.py:1002")
    spawned = stack("_shutdown threading.py:1590", "_bootstrap multiprocessing/process.py:328",
                    "_main multiprocessing/spawn.py:133", "spawn_main multiprocessing/spawn.py:120",
                    "<module> <string>:1")  # an mp.spawn rank whose target returned
    assert program_ended(shutdown) and program_ended(atexit_handler) and program_ended(spawned)
    assert not program_ended(running) and not program_ended(as_module)
    assert not program_ended(a_thread)  # a thread taken for the main one has no <module>
    assert not program_ended(stack()) and not program_ended((frame("clone libc.so.6"),))


@pytest.mark.parametrize("mode", ["default", "samples1"])
def test_the_rank_that_cannot_exit_is_blamed_not_the_ranks_that_finished(mode: str) -> None:
    # GIVEN rank 1 past its program's end, in threading._shutdown, its non-daemon uploader in
    # a socket read; ranks 0, 2, 3 finished and exited (no process, nothing in the log)
    verdicts = diagnose(load(f"exit_waits_uploader.{mode}.at_exit")).verdicts
    v = verdicts[0]
    # THEN rank 1 is the straggler, at the uploader's line, and says it is at exit
    assert (v.kind, v.culprit_ranks) == ("straggler", (1,)), v
    assert v.sites[0].endswith("exit_waits_uploader.py:62")
    assert "is at interpreter exit: its program has ended and Python waits for its non-daemon " \
        "thread uploader in upload_shard (" in v.summary
    assert "daemon" in v.next_step
    assert any("ranks 0,2-3 have no process: ended" in line for line in v.evidence)
    # AND no verdict that counts blames the ranks that are gone
    assert not any({0, 2, 3} & set(x.culprit_ranks) for x in verdicts if x.severity != "info")


def test_a_rank_that_crashed_meanwhile_is_still_reported() -> None:
    # GIVEN the same sight, but srun's log says rank 2 exited with code 1
    crashed = replace(load("exit_waits_uploader.default.at_exit"), log_findings=(LogFinding(
        source="job.out", line_no=40, kind="task_exit", rank=2,
        text="srun: error: node002: task 2: Exited with exit code 1"),))
    verdicts = diagnose(crashed).verdicts
    # THEN rank 1 still leads, and the missing ranks are a verdict of their own again
    assert (verdicts[0].kind, verdicts[0].culprit_ranks) == ("straggler", (1,))
    assert any(x.kind == "missing_rank" and 2 in x.culprit_ranks for x in verdicts), verdicts


def test_an_unprefixed_traceback_in_the_log_keeps_the_missing_ranks_reported() -> None:
    # GIVEN the same sight, with a traceback no rank prefix names (it may be a gone rank's)
    crashed = replace(load("exit_waits_uploader.default.at_exit"), log_findings=(LogFinding(
        source="job.out", line_no=12, kind="traceback", rank=None,
        text="RuntimeError: CUDA error: an illegal memory access was encountered"),))
    verdicts = diagnose(crashed).verdicts
    assert (verdicts[0].kind, verdicts[0].culprit_ranks) == ("straggler", (1,))
    assert any(x.kind == "missing_rank" for x in verdicts), verdicts


def test_a_rank_at_exit_while_the_others_wait_in_a_collective_left_the_loop_early() -> None:
    # GIVEN rank 3 at exit (its uploader in a socket read), ranks 0-2 in the all_reduce
    uploader = thread(stack("recv_into socket.py:706", "upload ckpt.py:62",
                            "run threading.py:982", "_bootstrap threading.py:1002"),
                      name="uploader", thread_id=7)
    s = job(2, 2, lambda r: [stack("_shutdown threading.py:1590")] * 3 if r == 3
            else [collective("all_reduce")] * 3, overrides={3: {"extra_threads": (uploader,)}})
    v = top(s)
    # THEN rank 3 is the straggler, at exit, at its uploader's line
    assert (v.kind, v.culprit_ranks) == ("straggler", (3,)), v
    assert v.sites == ("ckpt.py:62",) and "at interpreter exit" in v.summary
    assert "wait in all_reduce" in v.summary


def _moving(rank):  # type: ignore[no-untyped-def]
    """The rank's uploader connection carried data 20 ms before strace ended."""
    return replace(rank, recent_traffic=RecentTraffic(within_ms=2500, checked=1, active=(
        RecentConnection("127.0.0.1:40000", "127.0.0.1:8080", 20, 4000),)))


def test_a_rank_at_exit_whose_upload_moves_is_finishing_not_hung() -> None:
    # GIVEN the same stacks, but the uploader's connection carries data (a slow upload: one
    # blocking send, so no send call returns in the window and no I/O counter moves)
    v = top(map_rank(load("exit_waits_uploader.default.at_exit"), 1, _moving))
    # THEN it is not a hang: finishing or stuck, said as unsure
    assert (v.kind, v.severity, v.confidence) == ("slow_step", "info", "low"), v
    assert v.summary.startswith("finishing, or stuck at exit, cannot tell: rank 1 has ended")
    assert any("data on 127.0.0.1:40000 -> 127.0.0.1:8080" in line for line in v.evidence)


@pytest.mark.parametrize("mode", ["default", "samples1"])
def test_every_rank_at_exit_with_a_slow_upload_is_not_a_hang(mode: str) -> None:
    # GIVEN exit_slow_upload: every rank past its program's end, joined to its uploader, which
    # sits in one blocking send to a gateway reading 128 KiB/s (another process); no send call
    # returns in the window, so strace counts none and no I/O counter moves
    v = top(load(f"exit_slow_upload.{mode}.finishing"))
    # THEN it is said as finishing (info, unsure), from the data its connections carried
    assert (v.kind, v.severity) == ("slow_step", "info"), v
    assert v.summary.startswith("finishing, or stuck at exit, cannot tell: ranks 0-3 have ended "
                                "their program, and ranks 0-3 still move data or compute at "
                                "exit (uploader in upload_checkpoint ("), v.summary
    # AND without those connections' data the same sight is the hang it would then be
    blind = load(f"exit_slow_upload.{mode}.finishing")
    for number in range(4):
        blind = map_rank(blind, number, lambda r: replace(r, recent_traffic=None))
    assert top(blind).severity in ("critical", "warning")


# ------------------------------------------------------------- a multiprocessing pool's wait


def test_a_rank_waiting_in_pool_map_for_a_lost_task_waits_for_its_pool() -> None:
    # GIVEN rank 2's main thread in Pool.map (threading waits under multiprocessing/pool.py),
    # one of its pool workers killed while holding a task, the two live workers idle
    v = top(load("pool_worker_killed.default.lost_task"))
    # THEN it is the straggler, waiting for its pool's workers (not "a lock"), told about
    # lost tasks, and its worker processes are listed
    assert (v.kind, v.culprit_ranks) == ("straggler", (2,)), v
    assert v.sites == (v.sites[0],) and v.sites[0].endswith("pool_worker_killed.py:39")
    assert "is waiting for its multiprocessing pool's workers at" in v.summary
    assert "BrokenProcessPool" in v.next_step and "holds the lock" not in v.next_step
    assert any("2 worker processes of its own: pid " in line for line in v.evidence)


def _without_traffic(rank):  # type: ignore[no-untyped-def]
    return replace(rank, strace=None, recent_traffic=None)


def test_a_rank_whose_pool_workers_compute_is_a_slow_task_or_a_hang() -> None:
    # GIVEN pool_slow_tokenize (a healthy job): rank 1 in Pool.map while its two workers
    # compute (state R, ~80 % CPU), the others in the all_reduce; without strace's evidence of
    # collectives completing (a look inside one long step)
    snapshot = load("pool_slow_tokenize.samples1.pool_busy")
    for number in range(4):
        snapshot = map_rank(snapshot, number, _without_traffic)
    v = top(snapshot)
    # THEN no alarm: a slow pool task or a hang, said as unsure, the workers named
    assert (v.kind, v.severity) == ("slow_step", "info"), v
    assert v.summary.startswith("a slow pool task or a hang, cannot tell: rank 1 waits for its "
                                "pool workers, which compute, at "), v.summary
    assert sum("rank 1: pool worker pid " in line for line in v.evidence) == 2
    # AND with those workers idle the same sight is the lost task's straggler
    def idle(rank):  # type: ignore[no-untyped-def]
        return replace(rank, workers=tuple(replace(w, state="S", cpu_percent=0.0)
                                           for w in rank.workers))
    v = top(map_rank(snapshot, 1, idle))
    assert (v.kind, v.culprit_ranks) == ("straggler", (1,)), v
    assert "multiprocessing pool's workers" in v.summary


def test_a_rank_stuck_in_its_exit_handler_is_blamed_not_the_ranks_that_finished() -> None:
    # GIVEN exit_handler_flush: rank 3's atexit handler in a socket recv (no non-daemon
    # thread, no <module> frame); ranks 0-2 finished and are gone (before: missing_rank 0-2)
    verdicts = diagnose(load("exit_handler_flush.default.at_exit")).verdicts
    v = verdicts[0]
    # THEN rank 3, at its handler's line, said to be at exit in an exit handler
    assert (v.kind, v.culprit_ranks) == ("straggler", (3,)), v
    assert v.sites == (v.sites[0],) and v.sites[0].endswith("exit_handler_flush.py:51")
    assert "at interpreter exit: its program has ended, blocked in I/O at " in v.summary
    assert "(an exit handler)" in v.summary
    assert not any({0, 1, 2} & set(x.culprit_ranks) for x in verdicts if x.severity != "info")
