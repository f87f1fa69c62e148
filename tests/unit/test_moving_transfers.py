"""A rank in a blocking send whose connection carries data is slow, not hung
(`rank0_upload_barrier`, a control), and one whose connection went quiet is stuck
(`rank0_upload_stalled`), both recorded by `make accuracy`; and a main thread stopped on the
GIL that py-spy once caught asking for it (`gil_held_native`)."""

from __future__ import annotations

from dataclasses import replace

from snapfactory import map_rank, recorded

from slurmdiag.analysis import diagnose
from slurmdiag.snapshot import Rank


def test_rank_zero_uploading_while_data_moves_is_a_slow_transfer_not_a_hang() -> None:
    # GIVEN rank 0 in one blocking send (idle, no CPU) of its checkpoint upload, its
    # connection carrying data in strace's window; ranks 1-3 in the barrier
    v = diagnose(recorded("rank0_upload_barrier.default.blocked_calls")).verdicts[0]
    # THEN no alarm: a slow transfer, rank 0's call and connection named
    assert (v.kind, v.severity, v.culprit_ranks) == ("slow_step", "info", (0,)), v
    assert v.summary.startswith("a slow transfer, not hung while data moves: rank 0 is in sendto")
    assert v.sites[0].endswith("rank0_upload_barrier.py:73")
    assert any("data moved on it in strace's window" in e for e in v.evidence), v.evidence


def test_rank_zero_in_a_send_on_a_quiet_connection_is_the_straggler() -> None:
    # GIVEN the same program whose gateway stopped reading: rank 0 in sendto, nothing sent on
    # its connection for the whole window
    v = diagnose(recorded("rank0_upload_stalled.default.blocked_calls")).verdicts[0]
    # THEN it is stuck there
    assert (v.kind, v.severity, v.culprit_ranks) == ("straggler", "critical", (0,)), v
    assert v.sites[0].endswith("rank0_upload_barrier.py:73")
    assert any("no data on it in the last" in e for e in v.evidence), v.evidence


def test_data_moving_on_another_connection_does_not_make_the_send_move() -> None:
    # GIVEN the moving upload with rank 0's send on another connection than the one with data
    def elsewhere(rank: Rank) -> Rank:
        return replace(rank, blocked_calls=tuple(
            replace(c, remote="127.0.0.1:1") for c in rank.blocked_calls))

    snapshot = map_rank(recorded("rank0_upload_barrier.default.blocked_calls"), 0, elsewhere)
    v = diagnose(snapshot).verdicts[0]
    assert (v.kind, v.culprit_ranks) == ("straggler", (0,)), v


def test_a_main_thread_caught_asking_for_the_gil_still_stopped_on_it() -> None:
    # GIVEN gil_held_native's rank 1 with its main thread reported active in the first sample
    # and 10 ms of CPU per second (what a run of make accuracy recorded: a thread waiting for
    # the GIL wakes each switch interval to ask for it)
    def asking(rank: Rank) -> Rank:
        first = rank.samples[0]
        threads = tuple(replace(t, active=True) if t.os_thread_id == rank.pid else t
                        for t in first.threads or ())
        return replace(rank, samples=(replace(first, threads=threads), *rank.samples[1:]))

    snapshot = map_rank(recorded("gil_held_native.default.gil_holder"), 1, asking)
    v = diagnose(snapshot).verdicts[0]
    # THEN the rank is still stopped at the GIL holder's line (it was mismatched_collective at
    # its main thread's chance line)
    assert (v.kind, v.culprit_ranks) == ("straggler", (1,)), v
    assert v.sites[0].endswith("gil_held_native.py:45")


def test_a_main_thread_whose_cpu_is_its_asks_for_the_gil_is_stopped_on_the_holder() -> None:
    # GIVEN rank 1's main thread never running in a sample, but its CPU time +2.5 % of a core
    # between them (it wakes each switch interval to ask for the GIL: a loaded node), while its
    # shipper thread holds the GIL idle in a native write in every sample
    v = diagnose(recorded("gil_held_native.default.gil_waits")).verdicts[0]
    # THEN the rank is stopped at the holder's line (it was spinning at the main thread's line)
    assert (v.kind, v.culprit_ranks) == ("straggler", (1,)), v
    assert v.sites[0].endswith("gil_held_native.py:45")
    assert "held by thread shipper" in " ".join((v.summary, *v.evidence))


def test_a_main_thread_caught_awake_asking_for_the_gil_is_stopped_on_the_holder() -> None:
    # GIVEN the shipper holding the GIL idle in every sample; rank 1's main thread caught awake
    # in one sample, +2.0 % of a core between samples, asleep on a futex when /proc was read
    snapshot = recorded("gil_held_native.default.gil_awake")
    v = diagnose(snapshot).verdicts[0]
    # THEN the rank is stopped at the holder's line (it was spinning at the main's chance line)
    assert (v.kind, v.culprit_ranks) == ("straggler", (1,)), v
    assert v.sites[0].endswith("gil_held_native.py:45")
    # AND without the kernel's word that it sleeps on a futex, 2 % of a core is work
    awake = map_rank(snapshot, 1, lambda rank: replace(rank, state="R", wchan="0"))
    v = diagnose(awake).verdicts[0]
    assert not (v.kind == "straggler" and v.sites and v.sites[0].endswith("gil_held_native.py:45")), v


def test_a_main_thread_that_works_without_the_gil_is_not_stopped_on_it() -> None:
    # GIVEN the same, its main thread active and using half a core between the samples
    def working(rank: Rank) -> Rank:
        samples = tuple(
            replace(s, threads=tuple(
                replace(t, active=True, cpu_s=(t.cpu_s or 0.0) + 0.5 * i)
                if t.os_thread_id == rank.pid else t for t in s.threads or ()))
            for i, s in enumerate(rank.samples))
        return replace(rank, samples=samples)

    snapshot = map_rank(recorded("gil_held_native.default.gil_holder"), 1, working)
    v = diagnose(snapshot).verdicts[0]
    assert not (v.kind == "straggler" and v.sites and v.sites[0].endswith("gil_held_native.py:45")), v


def test_rank_zero_writing_its_checkpoint_while_the_others_wait_is_no_alarm() -> None:
    # GIVEN rank 0 writing checkpoint shards (torch.save, fsync each; state D, 29 % CPU, its I/O
    # counters +250 MB/s between samples), ranks 1-3 in the barrier: it was spinning, critical
    v = diagnose(recorded("rank0_checkpoint_barrier.default.storage")).verdicts[0]
    assert (v.kind, v.severity, v.culprit_ranks) == ("slow_step", "info", (0,)), v
    assert "rank 0 is reading and writing " in v.summary and "MB/s (its I/O counters" in v.summary


def test_one_sample_of_a_checkpoint_writer_counts_its_completed_syncs() -> None:
    # GIVEN the same with --samples 1: no I/O rate, but strace counted 30 fsyncs completed in
    # its window (it was a straggler, warning)
    v = diagnose(recorded("rank0_checkpoint_barrier.samples1.storage")).verdicts[0]
    assert (v.kind, v.severity, v.culprit_ranks) == ("slow_step", "info", (0,)), v
    assert "completing 30 file syncs or positional reads and writes" in v.summary


def test_reads_and_writes_alone_in_strace_do_not_count_as_storage() -> None:
    # GIVEN that one sample with its fsyncs gone (read and write are a socket's too: a TCPStore
    # poller makes dozens)
    def no_syncs(rank: Rank) -> Rank:
        assert rank.strace is not None
        calls = tuple(c for c in rank.strace.syscalls if c.syscall not in ("fsync",))
        return replace(rank, strace=replace(rank.strace, syscalls=calls))

    snapshot = map_rank(recorded("rank0_checkpoint_barrier.samples1.storage"), 0, no_syncs)
    v = diagnose(snapshot).verdicts[0]
    # THEN one sample cannot tell it from a stuck write: a straggler, a warning
    assert (v.kind, v.severity, v.culprit_ranks) == ("straggler", "warning", (0,)), v


def test_rank_zero_waiting_for_a_child_that_computes_is_no_alarm() -> None:
    # GIVEN rank 0 in subprocess.run(capture_output=True) (communicate polls the child's pipes:
    # wchan poll, frames in subprocess.py) for an evaluation script at 95 % CPU, ranks 1-3 in
    # the barrier: it was a critical straggler, "blocked in I/O"
    v = diagnose(recorded("rank0_archive_barrier.default.child_busy")).verdicts[0]
    assert (v.kind, v.severity, v.culprit_ranks) == ("slow_step", "info", (0,)), v
    assert v.summary.startswith("a slow child process or a hang, cannot tell: rank 0 waits")
    assert any(e.startswith("rank 0: child process pid ") and "python -c " in e
               for e in v.evidence), v.evidence
    assert "subprocess.run(..., timeout=...)" in v.next_step


def test_rank_zero_waiting_for_an_idle_child_is_the_straggler() -> None:
    # GIVEN the same with the child asleep and using no CPU (child_process_wait's sight)
    def idle_child(rank: Rank) -> Rank:
        return replace(rank, workers=tuple(replace(w, state="S", cpu_percent=0.0)
                                           for w in rank.workers))

    snapshot = map_rank(recorded("rank0_archive_barrier.default.child_busy"), 0, idle_child)
    v = diagnose(snapshot).verdicts[0]
    assert (v.kind, v.severity, v.culprit_ranks) == ("straggler", "critical", (0,)), v
    assert "waiting for a child process" in v.summary  # not "blocked in I/O": subprocess's frames


def test_rank_zero_preparing_data_in_python_while_the_others_wait_in_a_barrier_is_no_alarm() -> None:
    # GIVEN rank 0 counting tokens in pure Python (GIL held, line moving), ranks 1-3 in
    # dist.barrier(): Hugging Face's main_process_first shape; it was spinning, critical
    v = diagnose(recorded("rank0_prepare_barrier.default.gated")).verdicts[0]
    assert (v.kind, v.severity, v.culprit_ranks) == ("slow_step", "info", (0,)), v
    assert v.summary.startswith("a rank-gated phase or a hang, cannot tell: rank 0 is busy")
    assert v.sites[0].endswith("rank0_prepare_barrier.py:build_vocabulary")


def test_an_endless_preparation_is_the_gated_rules_known_miss_with_its_culprit_named() -> None:
    # GIVEN the same program whose preparation never ends (rank0_prepare_endless)
    v = diagnose(recorded("rank0_prepare_endless.default.gated")).verdicts[0]
    # THEN a look of a few seconds cannot tell: no alarm, rank 0 and its function named
    assert (v.kind, v.severity, v.culprit_ranks) == ("slow_step", "info", (0,)), v
    assert v.sites[0].endswith("rank0_prepare_barrier.py:build_vocabulary")


def test_a_rank_busy_in_python_while_the_others_wait_in_an_all_reduce_is_spinning() -> None:
    # GIVEN the preparation snapshot with the waiting ranks in an all_reduce instead (a rank
    # late for the step's own collective: spinning_rank's shape)
    def in_all_reduce(rank: Rank) -> Rank:
        samples = tuple(replace(s, threads=tuple(
            replace(t, frames=tuple(replace(f, function="all_reduce") if f.function == "barrier"
                                    else f for f in t.frames))
            for t in s.threads or ())) for s in rank.samples)
        return replace(rank, samples=samples)

    snapshot = recorded("rank0_prepare_barrier.default.gated")
    for number in (1, 2, 3):
        snapshot = map_rank(snapshot, number, in_all_reduce)
    v = diagnose(snapshot).verdicts[0]
    assert (v.kind, v.severity, v.culprit_ranks) == ("spinning", "critical", (0,)), v


def test_rank_zero_downloading_while_data_arrives_is_a_slow_transfer_too() -> None:
    # GIVEN rank 0 in recvfrom of a shard download on a connection on which data arrived 88 ms
    # before strace ended; ranks 1-3 in the barrier
    v = diagnose(recorded("rank0_download_barrier.default.blocked_calls")).verdicts[0]
    assert (v.kind, v.severity, v.culprit_ranks) == ("slow_step", "info", (0,)), v
    assert v.summary.startswith("a slow transfer, not hung while data moves: rank 0 is in recvfrom")


def test_ranks_in_a_barrier_on_a_subgroup_without_the_busy_rank_are_not_a_gated_phase() -> None:
    # GIVEN the preparation snapshot with the waiting ranks' barrier read as one on a subgroup
    # of ranks 1-3 (rank 0 not a member): that barrier does not wait for rank 0
    from slurmdiag.analysis import verdicts

    statuses: list = []
    original = verdicts._gated_phase

    def spy(busy, waiting):  # type: ignore[no-untyped-def]
        statuses.extend(waiting)
        return original(busy, [replace(s, members=(1, 2, 3)) for s in waiting])

    import pytest
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(verdicts, "_gated_phase", spy)
        v = diagnose(recorded("rank0_prepare_barrier.default.gated")).verdicts[0]
    # THEN it is not said as a rank-gated phase: rank 0 spins while they wait
    assert statuses, "the rule was not consulted"
    assert (v.kind, v.culprit_ranks) == ("spinning", (0,)), v
