"""A main thread idle on a lock while another of its threads writes a checkpoint that the lock
guards (`rank0_async_save_lock`, recorded by `make accuracy`) works through that thread: not a
hang. Its hung twin (`lock_hang_busy_writer`: a main thread deadlocked on its own lock while a
trace writer, on every rank, keeps writing) stays a straggler: the writing there is every
rank's background, the waiting ranks' too, and its writer thread is seen idle."""

from __future__ import annotations

from dataclasses import replace

import pytest
from snapfactory import map_rank, recorded

from slurmdiag.analysis import diagnose
from slurmdiag.snapshot import Rank, Snapshot


def first(snapshot: Snapshot):  # type: ignore[no-untyped-def]
    return diagnose(snapshot).verdicts[0]


@pytest.mark.parametrize("mode, evidence", [
    ("default", "MB/s (the process's I/O counters between samples)"),
    ("samples1", "file syncs or positional reads and writes in strace's window"),
])
def test_a_lock_held_by_a_thread_writing_a_checkpoint_is_a_slow_phase(mode: str, evidence: str) -> None:
    v = first(recorded(f"rank0_async_save_lock.{mode}.through_thread"))
    # it was straggler: rank 0's main thread idle in a raw lock's acquire for the whole look
    assert (v.kind, v.severity, v.culprit_ranks) == ("slow_step", "info", (0,)), v
    assert "waits on a lock while thread checkpoint-saver" in v.summary and evidence in v.summary
    assert v.sites[0].endswith("rank0_async_save_lock.py:76")


@pytest.mark.parametrize("mode, severity", [("default", "critical"), ("samples1", "warning")])
def test_a_lock_deadlock_beside_every_ranks_writer_stays_a_straggler(mode: str, severity: str) -> None:
    v = first(recorded(f"lock_hang_busy_writer.{mode}.main_io"))
    assert (v.kind, v.severity, v.culprit_ranks) == ("straggler", severity, (2,)), v


def test_io_the_waiting_ranks_show_as_much_of_is_background() -> None:
    # GIVEN the checkpoint recording with ranks 1-3 (in the all_reduce) moving as many bytes
    recording = recorded("rank0_async_save_lock.default.through_thread")
    rank0 = next(r for _, r in recording.all_ranks() if r.rank == 0)

    def same_io(rank: Rank) -> Rank:
        return replace(rank, samples=tuple(replace(s, io=theirs.io)
                                           for s, theirs in zip(rank.samples, rank0.samples)))

    for number in (1, 2, 3):
        recording = map_rank(recording, number, same_io)
    # THEN rank 0's writing is no evidence that its main thread will get the lock
    v = first(recording)
    assert (v.kind, v.severity, v.culprit_ranks) == ("straggler", "critical", (0,)), v


def test_a_writing_process_whose_other_threads_are_never_seen_working_stays_blocked() -> None:
    # GIVEN the checkpoint recording with the saver thread never caught running
    def idle_saver(rank: Rank) -> Rank:
        return replace(rank, samples=tuple(
            replace(s, threads=tuple(replace(t, active=False) for t in s.threads))
            for s in rank.samples))

    v = first(map_rank(recorded("rank0_async_save_lock.default.through_thread"), 0, idle_saver))
    assert (v.kind, v.culprit_ranks) == ("straggler", (0,)), v


def test_a_deadlock_beside_a_working_thread_of_its_own_is_said_to_be_undecided() -> None:
    # GIVEN lock_hang_own_writer: rank 2's main thread deadlocked on its own lock while a
    # writer thread of its own, and of no other rank, runs and writes ~130 MB/s: the sight of
    # rank0_async_save_lock, hung (a known miss: the lock's holder is on no stack)
    v = first(recorded("lock_hang_own_writer.default.through_thread"))
    # THEN not a hang verdict, but it names the rank, the lock's line and both readings
    assert (v.kind, v.severity, v.culprit_ranks) == ("slow_step", "info", (2,)), v
    assert v.summary.startswith("a slow phase or a hang, cannot tell: rank 2 is at ")
    assert v.sites[0].endswith("lock_hang_busy_writer.py:65")
    assert "non-reentrant lock taken twice" in v.next_step


def test_one_sample_that_caught_the_writer_inside_its_write_is_a_slow_phase() -> None:
    # GIVEN the full accuracy run's --samples 1 look: the saver thread caught inside its write
    # (idle to py-spy: no busy thread), strace counting 34 completed fsyncs
    recording = recorded("rank0_async_save_lock.samples1.caught_in_write")
    assert not any(t.active for _, r in recording.all_ranks() if r.rank == 0
                   for s in r.samples for t in s.threads if t.name == "checkpoint-saver")
    v = first(recording)
    # THEN the thread in the job's code is taken as the one working (it was a straggler)
    assert (v.kind, v.severity, v.culprit_ranks) == ("slow_step", "info", (0,)), v
    assert "waits on a lock while thread checkpoint-saver" in v.summary

