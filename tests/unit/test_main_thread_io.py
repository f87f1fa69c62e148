"""A rank's I/O counts as its work when its main thread does it (`lock_hang_busy_writer`,
recorded by `make accuracy`): rank 2's main thread deadlocks on its own lock while its trace
writer thread keeps the process's counters growing by ~4 MB/s. Another thread's I/O counts
when the main thread waits for another thread's signal (a future, a join, a queue), and when
the collector did not read the main thread's own counters."""

from __future__ import annotations

from dataclasses import replace

from snapfactory import map_rank, recorded

from slurmdiag.analysis import diagnose
from slurmdiag.snapshot import Frame, Rank

RECORDED = "lock_hang_busy_writer.default.main_io"


def test_a_main_thread_stuck_on_its_lock_is_a_straggler_whatever_its_other_threads_write() -> None:
    v = diagnose(recorded(RECORDED)).verdicts[0]
    # it was slow_step (info): the process's +4 MB/s taken for the main thread's work
    assert (v.kind, v.severity, v.culprit_ranks) == ("straggler", "critical", (2,)), v
    assert v.sites[0].endswith("lock_hang_busy_writer.py:58")


def test_without_the_main_threads_counters_the_processes_count() -> None:
    # GIVEN the same samples from a collector that did not read the main thread's counters
    def unread(rank: Rank) -> Rank:
        return replace(rank, samples=tuple(replace(s, main_io=None) for s in rank.samples))

    v = diagnose(map_rank(recorded(RECORDED), 2, unread)).verdicts[0]
    # THEN the process's I/O is all there is, and it says the rank moves data: not a hang
    assert v.kind == "slow_step" and v.severity == "info" and v.culprit_ranks == (2,), v


def test_a_main_thread_waiting_for_another_threads_signal_works_through_it() -> None:
    # GIVEN rank 2's main thread in a future's wait (concurrent.futures) instead of its lock:
    # the thread writing could be the one it waits for (a checkpoint saved by a helper)
    wait = Frame(function="Future.result", file="/usr/lib/python3.11/concurrent/futures/_base.py",
                 line=451)

    def waits_on_future(rank: Rank) -> Rank:
        samples = tuple(
            replace(s, threads=tuple(
                replace(t, frames=(wait, *t.frames)) if t.os_thread_id == rank.pid else t
                for t in s.threads))
            for s in rank.samples)
        return replace(rank, samples=samples)

    v = diagnose(map_rank(recorded(RECORDED), 2, waits_on_future)).verdicts[0]
    # THEN the process's I/O counts as the rank's work: not hung while data moves
    assert (v.kind, v.severity, v.culprit_ranks) == ("slow_step", "info", (2,)), v
    assert "4.1 MB/s (its I/O counters between samples)" in v.summary
