"""Issue 13: diagnosis that holds on hangs it has never seen.

Real inputs: py-spy dumps and whole snapshots recorded from the four regression scenarios on
the local cluster (tests/fixtures/issue13, see tests/scenarios/<name>.json for what each job
does). Each rule is also tested on the variation of its input that would make it lie.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from snapfactory import collective, dataloader_wait, in_user, job, stack, thread

from slurmdiag.analysis import diagnose
from slurmdiag.analysis.stacks import is_idle_thread, merge_stacks, pick_main_thread
from slurmdiag.analysis.verdicts import _rank_endpoints, _settled_tail, _store_ports
from slurmdiag.assemble import _samples
from slurmdiag.collector.procfs import read_stat
from slurmdiag.collector.stacks import read_usage
from slurmdiag.parsers.pyspy import parse_pyspy_json
from slurmdiag.snapshot import Connection, Sample, Snapshot, ThreadStack

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "issue13"
SCENARIOS = "/work/wt/i13a/tests/scenarios/"  # where the fixtures were recorded


def load(name: str) -> Snapshot:
    return Snapshot.from_json((FIXTURES / f"snapshot_{name}.json").read_text())


def first_samples(snapshot: Snapshot, k: int = 1) -> Snapshot:
    """The snapshot as `attach --samples k` would have taken it."""
    return replace(
        snapshot,
        nodes=tuple(
            replace(n, ranks=tuple(replace(r, samples=r.samples[:k]) for r in n.ranks))
            for n in snapshot.nodes
        ),
    )


def map_ranks(snapshot: Snapshot, change) -> Snapshot:  # type: ignore[no-untyped-def]
    return replace(
        snapshot,
        nodes=tuple(replace(n, ranks=tuple(change(r) for r in n.ranks)) for n in snapshot.nodes),
    )


def top(snapshot: Snapshot):  # type: ignore[no-untyped-def]
    return diagnose(snapshot).verdicts[0]


# ------------------------------------------------------------------------- thread identity


def renamed_dump() -> tuple[ThreadStack, ...]:
    return parse_pyspy_json(json.loads((FIXTURES / "pyspy_renamed_main_thread.json").read_text()))


def test_main_thread_is_the_os_thread_whose_id_is_the_pid_not_the_name() -> None:
    # GIVEN a real dump of a rank whose main thread is named "trainer", py-spy listing
    # multiprocessing's QueueFeederThread first
    threads = renamed_dump()
    assert [t.name for t in threads] == ["QueueFeederThread", "trainer"]
    pid = next(t.os_thread_id for t in threads if t.name == "trainer")
    # WHEN the main thread is chosen with the rank's pid
    main, rule = pick_main_thread(Sample(t=0, threads=threads), pid)
    # THEN it is the thread whose OS id is the pid
    assert (main.name, rule) == ("trainer", "os_thread_id")
    assert main.frames[0].function == "all_reduce"


def test_without_os_ids_the_idle_feeder_thread_is_never_the_main_thread() -> None:
    # GIVEN the same dump without OS thread ids (py-spy's text output has none)
    threads = tuple(replace(t, os_thread_id=None) for t in renamed_dump())
    # THEN the feeder is recognised as idle by its frames (threading wait, no user frame)
    feeder, trainer = threads
    assert is_idle_thread(feeder) and not is_idle_thread(trainer)
    # AND the fallback picks the thread that is not idle, and says which rule it used
    main, rule = pick_main_thread(Sample(t=0, threads=threads), pid=12345)
    assert (main.name, rule) == ("trainer", "not_idle")


def test_renamed_main_thread_job_blames_rank_5_in_its_final_barrier() -> None:
    # GIVEN the real snapshot: 8 ranks renamed "trainer", a DataLoader worker and a feeder
    # thread each; rank 5 in the final barrier, the others in all_reduce
    for snapshot in (load("renamed_main_dataloader"), first_samples(load("renamed_main_dataloader"))):
        v = top(snapshot)
        # THEN rank 5 is the culprit at the barrier, with confidence
        assert (v.kind, v.culprit_ranks) == ("mismatched_collective", (5,))
        assert v.sites == (SCENARIOS + "renamed_main_dataloader.py:51",)
        assert v.confidence == "high"
        assert "threading.py" not in v.summary


def test_renamed_job_without_os_ids_names_the_fallback_rule_in_the_evidence() -> None:
    snapshot = map_ranks(
        load("renamed_main_dataloader"),
        lambda r: replace(
            r,
            samples=tuple(
                replace(s, threads=tuple(replace(t, os_thread_id=None) for t in s.threads))
                for s in r.samples
            ),
        ),
    )
    v = top(snapshot)
    assert v.culprit_ranks == (5,)
    assert any("rule 'not_idle'" in line for line in v.evidence), v.evidence


# ------------------------------------------------------------------- measured progress


def test_silent_compute_phase_is_not_a_hang_with_any_number_of_samples() -> None:
    # GIVEN the real snapshot of 4 ranks computing in a long loop of tensor maths (5-7 % of a
    # core each on the crowded test machine), no collective on any stack
    for snapshot in (load("silent_compute"), first_samples(load("silent_compute"))):
        verdicts = diagnose(snapshot).verdicts
        # THEN no hang verdict at all, and the first says why
        assert [v.severity for v in verdicts if v.severity != "info"] == []
        assert verdicts[0].kind == "progressing"
        assert "no collective" in verdicts[0].summary


def test_same_stacks_with_no_cpu_between_samples_are_not_computing() -> None:
    # GIVEN the silent-compute snapshot with the main threads' CPU frozen and py-spy calling
    # them idle (what a rank parked in a C call looks like)
    def frozen(r):  # type: ignore[no-untyped-def]
        return replace(
            r,
            samples=tuple(
                replace(
                    s,
                    threads=tuple(replace(t, cpu_s=1.0, active=False) for t in s.threads),
                    io=(0, 0, 0, 0),
                )
                for s in r.samples
            ),
        )

    verdicts = diagnose(map_ranks(load("silent_compute"), frozen)).verdicts
    # THEN it is no longer taken for work
    assert verdicts[0].kind != "progressing"


def caught_awake(rank):  # type: ignore[no-untyped-def]
    """Rank 2 as one sample takes it on a crowded node: just woken from its sleep, runnable
    (state R, waiting for a core) and active in py-spy, its CPU over the window still ~0."""
    if rank.rank != 2:
        return rank
    sample = rank.samples[0]
    threads = tuple(replace(t, active=True) if t.os_thread_id == rank.pid else t
                    for t in sample.threads)
    return replace(rank, state="R", samples=(replace(sample, threads=threads),))


def test_one_sample_of_a_poll_loop_caught_awake_is_not_called_spinning() -> None:
    # GIVEN store_wait with --samples 1, rank 2 caught awake between two sleeps (found in a CI
    # run under load: `spinning`, confidence high), its CPU over the 2 s strace window 0.5 %
    snapshot = map_ranks(first_samples(load("store_wait")), caught_awake)
    v = top(snapshot)
    # THEN the CPU measured over the window decides: it polls, it does not compute
    assert (v.kind, v.culprit_ranks) == ("straggler", (2,)), v
    # AND a rank that does use CPU over that window, caught the same way, is still spinning
    # (what the rule must not hide: spinning_rank with one sample stays caught, below)
    def computing(rank):  # type: ignore[no-untyped-def]
        if rank.rank != 2:
            return rank
        sample = rank.samples[0]
        threads = tuple(replace(t, owns_gil=True) if t.os_thread_id == rank.pid else t
                        for t in sample.threads)  # a Python loop holds the GIL
        return replace(rank, cpu_percent=35.0, samples=(replace(sample, threads=threads),))

    # (working while the others wait on its store key: a rank-gated phase, healthy_store_prepare)
    assert works(top(map_ranks(snapshot, computing)))


def test_store_wait_blames_only_the_rank_that_polls_for_the_file() -> None:
    # GIVEN the real snapshot: ranks 0,1,3 in store.wait (socket wait), rank 2 in a
    # `while not exists: sleep` loop
    for snapshot in (load("store_wait"), first_samples(load("store_wait"))):
        v = top(snapshot)
        # THEN rank 2 alone is the culprit, the others wait on a peer, not stragglers
        assert (v.kind, v.culprit_ranks) == ("straggler", (2,))
        assert v.sites == (SCENARIOS + "store_wait.py:31", SCENARIOS + "store_wait.py:wait_for_upstream")
        assert "wait on a peer" in v.summary
        assert any("TCPStore" in line for line in v.evidence)


def poll_between_lines(r, cpu_per_sample: float):  # type: ignore[no-untyped-def]
    """Rank 2 caught on the `while` line in its second sample (the loop's other line)."""
    if r.rank != 2:
        return r
    samples = []
    for i, s in enumerate(r.samples):
        main = s.threads[0]
        frames = main.frames
        if i == 1:
            frames = (replace(frames[0], line=30), *frames[1:])
        samples.append(replace(s, threads=(replace(main, frames=frames,
                                                   cpu_s=1.0 + cpu_per_sample * i),)))
    return replace(r, samples=tuple(samples))


def test_sleep_poll_loop_moving_between_two_lines_is_stuck() -> None:
    # GIVEN rank 2 seen on both lines of its poll loop, its CPU not advancing
    snapshot = map_ranks(load("store_wait"), lambda r: poll_between_lines(r, 0.0))
    v = top(snapshot)
    # THEN it is a straggler polling in wait_for_upstream, not a spinning or progressing rank
    assert (v.kind, v.culprit_ranks) == ("straggler", (2,))
    assert SCENARIOS + "store_wait.py:wait_for_upstream" in v.sites
    assert "polling" in v.summary


def test_one_clock_tick_in_a_short_window_is_not_work() -> None:
    # GIVEN two samples 0.5 s apart (attach --samples 2 --interval 0.5, as the rendezvous test
    # takes them), rank 2's poll loop charged one 10 ms clock tick between them: 2 % of a core,
    # on the bar (a CI run under load called a rendezvous retry loop busy this way)
    def half_second_apart(r):  # type: ignore[no-untyped-def]
        first, second = r.samples[:2]
        return replace(r, samples=(first, replace(second, t=first.t + 0.5)))

    snapshot = map_ranks(map_ranks(first_samples(load("store_wait"), 2), half_second_apart),
                         lambda r: poll_between_lines(r, 0.01))
    v = top(snapshot)
    # THEN a tick's resolution is not taken as work: it polls, stuck
    assert (v.kind, v.culprit_ranks) == ("straggler", (2,)), v
    # AND three ticks in the same half second (6 %) are work
    busy = map_ranks(map_ranks(first_samples(load("store_wait"), 2), half_second_apart),
                     lambda r: poll_between_lines(r, 0.03))
    assert works(top(busy))


def works(v) -> bool:  # type: ignore[no-untyped-def]
    """Rank 2 judged working, not polling: busy in its own code while the others wait on its
    store key, which is a rank-gated phase or a hang (info; healthy_store_prepare is one)."""
    return (v.kind, v.severity, v.culprit_ranks) == ("slow_step", "info", (2,)) and (
        v.summary.startswith("a rank-gated phase or a hang") and "rank 2 is busy" in v.summary)


def test_the_same_loop_using_cpu_is_work() -> None:
    # GIVEN the same moving stacks, the thread using half a core between samples
    snapshot = map_ranks(load("store_wait"), lambda r: poll_between_lines(r, 0.5))
    assert works(top(snapshot)), top(snapshot)


def test_ranks_blocked_alone_at_a_socket_are_not_a_peer_wait() -> None:
    # GIVEN one rank idle in a C call on a socket while three others wait in an all_reduce
    s = job(2, 2, lambda r: [in_user(40)] * 3 if r == 1 else [collective("all_reduce")] * 3,
            overrides={1: {"wchan": "poll_schedule_timeout.constprop.0"}})
    v = top(s)
    # THEN that rank is the straggler (a peer wait needs ranks waiting together)
    assert (v.kind, v.culprit_ranks) == ("straggler", (1,))


# ------------------------------------------------------------------------- who waits for whom


def test_wrong_group_blames_the_rank_nobody_waits_with() -> None:
    # GIVEN the real snapshot: evens 0,2,6 in their subgroup's all_reduce, odds in the world
    # barrier, rank 4 in an all_reduce without group=
    for snapshot in (load("wrong_group"), first_samples(load("wrong_group"))):
        v = top(snapshot)
        # THEN rank 4 only, and the evidence says the groups' membership was not known
        assert (v.kind, v.culprit_ranks) == ("mismatched_collective", (4,))
        assert v.sites == (SCENARIOS + "wrong_group.py:25",)
        assert any("membership is not visible" in line for line in v.evidence)


def test_two_sided_mismatch_still_blames_the_minority() -> None:
    # GIVEN two groups only (ranks 0,1 in a barrier, 2-7 in all_reduce): no rank waits alone
    s = job(4, 2, lambda r: [collective("barrier", 70)] * 3 if r < 2 else [collective("all_reduce")] * 3)
    v = top(s)
    assert (v.kind, v.culprit_ranks) == ("mismatched_collective", (0, 1))


# ------------------------------------------------------------------------------ confidence


def test_verdict_on_library_frames_only_says_it_is_unsure() -> None:
    # GIVEN rank 1 parked in a stdlib wait with no user frame, the others in all_reduce
    parked = stack("wait threading.py:327", "get queue.py:171", "run threading.py:982")
    s = job(2, 2, lambda r: [parked] * 3 if r == 1 else [collective("all_reduce")] * 3)
    v = top(s)
    assert v.culprit_ranks == (1,)
    assert v.confidence == "low"
    assert any(line.startswith("unsure: no frame of the job's own code") for line in v.evidence)


# -------------------------------------------------------------------------------- collector


def test_read_usage_measures_this_process_threads_and_io() -> None:
    # GIVEN this process, with a second thread
    stop = threading.Event()
    helper = threading.Thread(target=stop.wait)
    helper.start()
    try:
        pid = os.getpid()
        usage = read_usage(pid, read_stat(pid))
    finally:
        stop.set()
        helper.join()
    # THEN every thread's CPU seconds are read, the main thread's under the pid
    assert str(pid) in usage["threads"] and str(helper.native_id) in usage["threads"]
    assert usage["cpu_s"] >= usage["threads"][str(pid)] > 0
    assert len(usage["io"]) == 4 and usage["io"][0] > 0  # rchar: this test read files
    # AND the main thread's own counters (it read the files)
    assert len(usage["main_io"]) == 4 and usage["main_io"][0] > 0


def test_assembled_sample_carries_thread_cpu_by_os_thread_id() -> None:
    raw = json.loads((FIXTURES / "pyspy_renamed_main_thread.json").read_text())
    (sample,) = _samples([{"t": 1.0, "threads": raw, "error": None,
                           "usage": {"cpu_s": 3.5, "threads": {"884": 2.25, "2335": 0.0},
                                     "io": [1, 2, 3, 4], "main_io": [1, 1, 0, 0]},
                           "same_as": 0}])
    assert [(t.name, t.cpu_s) for t in sample.threads] == [("QueueFeederThread", 0.0),
                                                           ("trainer", 2.25)]
    assert (sample.cpu_s, sample.io, sample.main_io) == (3.5, (1, 2, 3, 4), (1, 1, 0, 0))
    assert sample.same_as == 0
    # a kept sample's index that is not one (a bool, negative, text) is dropped
    for odd in (True, -1, "0"):
        (bad,) = _samples([{"t": 1.0, "threads": raw, "error": None, "same_as": odd}])
        assert bad.same_as is None
    # an old node document without usage still assembles
    (old,) = _samples([{"t": 1.0, "threads": raw, "error": None}])
    assert old.cpu_s is None and old.io is None and old.main_io is None and old.same_as is None
    assert old.threads[1].cpu_s is None


def test_merge_reports_measured_cpu_of_the_main_thread() -> None:
    digests = merge_stacks(load("silent_compute")).digests
    assert all(d.main_rule == "os_thread_id" for d in digests)
    assert all(d.cpu_fraction is not None and d.cpu_fraction > 0.02 for d in digests)


# ------------------------------------------------ i13b's corpus (real snapshots of its runs)

ACCURACY = FIXTURES.parent / "accuracy"


def test_rank_waiting_for_its_child_names_the_childs_command() -> None:
    # GIVEN rank 3 in subprocess.run of `flock <log> cp ...` (wchan do_wait), ranks 0-2 in
    # all_reduce
    snapshot = Snapshot.from_json((ACCURACY / "child_process_wait.default.json").read_text())
    v = top(snapshot)
    # THEN the straggler is said to wait for its child, whose command is named
    assert (v.kind, v.culprit_ranks) == ("straggler", (3,))
    assert "waiting for a child process" in v.summary and "flock" in v.summary
    assert "child process" in (v.next_step or "")


def test_point_to_point_pair_is_the_culprit_of_a_two_to_two_tie() -> None:
    # GIVEN ranks 2 and 3 both in recv from each other, ranks 0-1 in the gradient all_reduce
    snapshot = Snapshot.from_json((ACCURACY / "p2p_deadlock.default.json").read_text())
    v = top(snapshot)
    assert (v.kind, v.culprit_ranks) == ("mismatched_collective", (2, 3))
    # decided by the first tie rule, point-to-point, and the verdict says so
    assert any("(1 of 6)" in e and "point-to-point" in e for e in v.evidence), v.evidence


def test_ranks_in_a_store_get_wait_for_the_rank_that_never_sets_the_key() -> None:
    # GIVEN ranks 0-6 in store.get of a key rank 7 set under another name; rank 7 in barrier
    for snapshot in (load("store_key_never_set"), first_samples(load("store_key_never_set"))):
        v = top(snapshot)
        # THEN rank 7 only (not the seven store readers as stragglers)
        assert (v.kind, v.culprit_ranks) == ("mismatched_collective", (7,))
        assert v.sites == (SCENARIOS + "store_key_never_set.py:38",)


def test_ranks_in_an_async_work_wait_wait_for_the_rank_in_the_barrier() -> None:
    # GIVEN ranks 0-2 in work.wait() of an async all_reduce (a C++ call, wchan futex), rank 3
    # in a barrier in its except-branch
    for snapshot in (load("async_work_wait"), first_samples(load("async_work_wait"))):
        v = top(snapshot)
        assert (v.kind, v.culprit_ranks) == ("mismatched_collective", (3,))
        assert v.sites == (SCENARIOS + "async_work_wait.py:34",)


# --------------------------------------------------------------- threads the main waits on


def test_main_thread_waiting_on_a_queue_names_the_thread_stuck_in_user_code() -> None:
    # GIVEN rank 2's main thread in queue.get, its prefetch thread stuck in the job's own code
    # (a blocking read), an idle feeder thread beside; ranks 0,1,3 in all_reduce
    prefetch = thread(stack("read_shard loader.py:40", "run loader.py:22",
                            "_bootstrap_inner threading.py:1045"), name="prefetch", thread_id=7)
    feeder = thread(stack("wait threading.py:327", "_feed multiprocessing/queues.py:231",
                          "run threading.py:982"), name="QueueFeederThread", thread_id=8)
    s = job(2, 2, lambda r: [dataloader_wait() if r == 2 else collective("all_reduce")] * 3,
            overrides={2: {"extra_threads": (prefetch, feeder)}})
    v = top(s)
    # THEN the straggler's summary says its main thread waits on that thread, at its site
    assert (v.kind, v.culprit_ranks) == ("straggler", (2,))
    assert "waits on thread prefetch in read_shard (loader.py:40))" in v.summary
    assert "QueueFeederThread" not in v.summary


def test_terminal_banner_says_when_a_verdict_is_unsure() -> None:
    from slurmdiag.report.terminal import format_summary

    parked = stack("wait threading.py:327", "get queue.py:171", "run threading.py:982")
    s = job(2, 2, lambda r: [parked] * 3 if r == 1 else [collective("all_reduce")] * 3)
    lines = format_summary(s, diagnose(s), color=False, report_path=None)
    assert any(line.startswith("CRITICAL straggler (low confidence: no frame of the job's own code)")
               for line in lines), lines
    sure = job(2, 2, lambda r: [in_user(40)] * 3 if r == 1 else [collective("all_reduce")] * 3,
               overrides={1: {"wchan": "hrtimer_nanosleep"}})
    assert not any("low confidence" in line for line in format_summary(
        sure, diagnose(sure), color=False, report_path=None))


def test_two_ranks_stuck_in_one_socket_call_while_most_wait_in_all_reduce_are_stragglers() -> None:
    # GIVEN ranks 3 and 5 idle at the same C call on a socket (a remote service without a
    # timeout), ranks 0-2,4,6,7 in all_reduce
    def stacks(r: int):  # type: ignore[no-untyped-def]
        return [in_user(40)] * 3 if r in (3, 5) else [collective("all_reduce")] * 3

    wchan = {"wchan": "sk_wait_data"}
    v = top(job(4, 2, stacks, overrides={3: wchan, 5: wchan}))
    # THEN they are the stragglers, not ranks the others wait with
    assert (v.kind, v.culprit_ranks) == ("straggler", (3, 5))


# ------------------------------------------------------------------ process groups (locals)


def without_group_locals(snapshot: Snapshot) -> Snapshot:
    return map_ranks(snapshot, lambda r: replace(
        r, samples=tuple(replace(s, groups=()) for s in r.samples)))


def test_groups_read_from_locals_blame_the_rank_whose_call_fell_back_to_the_world() -> None:
    # GIVEN the real snapshot of group_lookup_world: shard a = 0,3,5,6 and shard b = 1,2,4,7
    # (dict of new_group results); ranks 0,3,6 in shard a's all_reduce at line 37, rank 5 at the
    # SAME line on the world (groups.get missed), shard b in the world barrier
    for snapshot in (load("group_lookup_world"), first_samples(load("group_lookup_world"))):
        v = top(snapshot)
        # THEN rank 5 alone, and the evidence names the group read and who waits for whom
        assert (v.kind, v.culprit_ranks, v.confidence) == ("mismatched_collective", (5,), "high")
        assert v.sites == ("/work/wt/i13/tests/scenarios/group_lookup_world.py:37",)
        assert any("read from the ranks' locals" in e and "groups['a'] = 0,3,5-6" in e
                   for e in v.evidence), v.evidence
        assert "ranks 0,3,6 wait on train's groups['a'] (ranks 0,3,5-6) for rank 5" in v.evidence


def test_without_the_locals_the_same_stacks_blame_the_wrong_shard() -> None:
    # GIVEN the same snapshot with the group locals dropped (an old collector, a rank py-spy
    # could not read with --locals): by stacks alone it is 4 ranks at line 37 vs 4 in a barrier
    v = top(without_group_locals(load("group_lookup_world")))
    # THEN the inference blames shard b, and the verdict says the groups were inferred
    assert v.culprit_ranks == (1, 2, 4, 7)
    assert any(e.startswith("group membership inferred") for e in v.evidence), v.evidence


def test_the_collector_keeps_a_collectives_handle_with_the_group_locals() -> None:
    from slurmdiag.collector.stacks import group_locals

    # GIVEN py-spy --locals of a main thread polling its async all_reduce (as py-spy 0.4
    # printed it on a real gloo rank), with locals of no interest beside it
    threads = [{"os_thread_id": 7, "frames": [
        {"filename": "/job/train.py", "locals": [
            {"name": "work", "repr": "<torch._C._distributed_c10d.Work at 0x7f48b6071370>"},
            {"name": "delay", "repr": "0.05"}]},
        {"filename": "/job/train.py", "locals": [{"name": "secret", "repr": "'hunter2'"}]}]}]
    # THEN only the handle is kept, with its frame
    assert group_locals(threads, 7) == [
        [0, "work", "<torch._C._distributed_c10d.Work at 0x7f48b6071370>"]]


def test_a_name_holding_a_group_on_every_rank_is_not_a_membership_record() -> None:
    from slurmdiag.analysis.groups import read_groups
    from slurmdiag.snapshot import Frame

    # GIVEN `half = evens if even else odds` (a group on every rank) and `evens` (-100 on odds)
    frames = (Frame("train", "/job/train.py", 40),)

    def sample(rank: int) -> Sample:
        evens = "<torch._C._distributed_c10d.ProcessGroup at 0x1>" if rank % 2 == 0 else "-100"
        return Sample(t=0.0, groups=(
            (0, "evens", evens), (0, "half", "<torch._C._distributed_c10d.ProcessGroup at 0x2>")))

    view = read_groups(((r, sample(r), frames) for r in range(4)), 4)
    # THEN only evens is a record, with its members
    assert dict(view.members) == {"train's evens": (0, 2)}
    # AND a record missing on one rank (its locals not read) is not complete: not used
    assert read_groups(((r, sample(r), frames) for r in range(3)), 4).members == {}


# ------------------------------------------------------- a slow native step is not a spin


def slow_native_step() -> Snapshot:
    """slow_but_moving with --samples 1, real: rank 3 in its 2.5 s tensor loop (active, GIL
    released), ranks 0-2 in the gradient all_reduce; a warning `spinning` before this rule."""
    return Snapshot.from_json((ACCURACY / "slow_but_moving.samples1.false_alarm.json").read_text())


def test_one_rank_computing_in_native_code_for_a_short_look_never_alarms() -> None:
    v = top(slow_native_step())
    # THEN no hang severity: said as a slow step or a hang, with low confidence and why
    assert (v.kind, v.severity, v.confidence, v.culprit_ranks) == ("slow_step", "info", "low", (3,))
    assert any("without the GIL" in e for e in v.evidence), v.evidence


def test_a_python_spin_holds_the_gil_and_is_still_spinning_with_one_sample() -> None:
    # GIVEN the real spinning_rank snapshot with --samples 1 (rank 3 in random.randrange)
    v = top(load("spinning_rank_samples1"))
    assert (v.kind, v.severity, v.culprit_ranks) == ("spinning", "warning", (3,))


def test_a_native_hang_looked_at_long_enough_is_spinning() -> None:
    # GIVEN the same native busy rank, seen on one line in samples 60 s apart (what the rule
    # misses with the default 2 s look: a rank hung in native code on CPU)
    def longer(rank):  # type: ignore[no-untyped-def]
        first = rank.samples[0]
        return replace(rank, samples=(first, replace(first, t=first.t + 60.0)))

    v = top(map_ranks(slow_native_step(), longer))
    # THEN it is called spinning again
    assert (v.kind, v.culprit_ranks) == ("spinning", (3,))
    assert v.severity in ("warning", "critical")


# ----------------------------------------- one rank of a compute phase measured idle is no hang


def compute_phase_one_rank_starved() -> Snapshot:
    """silent_compute with --samples 1 from `make accuracy` (real): ranks 0-3 at one native line,
    state R, py-spy active; ranks 0, 2, 3 used 12-36 % CPU over the 2 s window, rank 1 0.0 %
    (starved on the crowded node). Before this rule: all_waiting, a false alarm."""
    return Snapshot.from_json((ACCURACY / "silent_compute.samples1.false_alarm.json").read_text())


def test_a_rank_measured_idle_at_the_stack_its_peers_compute_at_is_no_hang() -> None:
    v = top(compute_phase_one_rank_starved())
    # THEN the job is computing, and the idle-looking rank is named in the evidence
    assert (v.kind, v.severity) == ("progressing", "info"), v
    assert any(e.startswith("rank 1 at the same stack used no CPU") for e in v.evidence)


def test_ranks_idle_at_one_stack_where_fewer_compute_are_still_all_waiting() -> None:
    # GIVEN the same phase with ranks 0-2 measured idle and only rank 3 computing (what the rule
    # must not hide: most of a class blocked at one line is not a compute phase)
    def idle(rank):  # type: ignore[no-untyped-def]
        return rank if rank.rank == 3 else replace(rank, cpu_percent=0.0)

    v = top(map_ranks(compute_phase_one_rank_starved(), idle))
    # THEN it stays a hang verdict
    assert v.kind == "all_waiting" and v.severity == "warning", v


# ------------------------------------------- a rank reaching the hang during the look is no progress


def hang_forming() -> Snapshot:
    """pipe_write_full with the defaults from `make accuracy` (real): rank 0 blocked writing to a
    full pipe; ranks 1 and 3 in the gradient all_reduce in all three samples; rank 2 in its step
    (sgd_update) in the first, then in the all_reduce. Before this rule: progressing."""
    return Snapshot.from_json((ACCURACY / "pipe_write_full.default.late_arrival.json").read_text())


def test_a_rank_arriving_in_the_collective_during_the_look_is_judged_after_it_arrived() -> None:
    analysis = diagnose(hang_forming())
    v = analysis.verdicts[0]
    # THEN the hang is seen: rank 0, at its pipe write, judged on the samples after the arrival
    assert (v.kind, v.culprit_ranks, v.severity) == ("straggler", (0,), "critical"), v
    assert v.sites[0].endswith("pipe_write_full.py:38")
    assert any(e.startswith("rank 2 reached where it stays during the look (by sample 2 of 3)")
               for e in v.evidence)
    assert analysis.samples == 2


def culprit_arrival() -> Snapshot:
    """pipe_write_full with the defaults from `make accuracy` (real, 2026-11-26): rank 0 in
    json.dumps in the first sample, then blocked in its pipe write in the other two (the last
    kept: nothing of it ran); ranks 1-3 in the gradient all_reduce in all three."""
    return Snapshot.from_json(
        (ACCURACY / "pipe_write_full.default.culprit_arrival.json").read_text())


def test_a_culprit_arriving_at_its_block_during_the_look_is_judged_where_it_stays() -> None:
    v = top(culprit_arrival())
    # THEN rank 0 is the straggler at the line it stays on, not "moving" in a function
    assert (v.kind, v.culprit_ranks, v.severity) == ("straggler", (0,), "critical"), v
    assert v.sites[0].endswith("pipe_write_full.py:40"), v.sites
    assert any(e.startswith("rank 0 reached where it stays during the look (by sample 2 of 3)")
               for e in v.evidence)
    # AND a culprit that works between the last two samples has not settled: its function
    working = map_ranks(culprit_arrival(),
                        lambda r: _main_threads_working(r) if r.rank == 0 else r)
    assert not top(working).sites[0].endswith("pipe_write_full.py:40")
    # AND an arrival outside a collective is taken only for a culprit that moved: a look
    # called progressing is cut at arrivals in a collective alone (the rule before it)
    snapshot = culprit_arrival()
    merge = merge_stacks(snapshot)
    assert _settled_tail(snapshot, merge, anywhere=False) is None
    cut = _settled_tail(snapshot, merge, anywhere=True)
    assert cut is not None and all(len(r.samples) == 2 for _, r in cut[0].all_ranks())


def _main_threads_working(rank):  # type: ignore[no-untyped-def]
    """Every thread of the rank's samples gains 0.4 s of CPU a sample: it computes between them."""
    return replace(rank, samples=tuple(
        replace(s, threads=tuple(replace(t, cpu_s=(t.cpu_s or 0.0) + 0.4 * k) for t in s.threads))
        for k, s in enumerate(rank.samples)))


def test_an_arrival_among_ranks_that_compute_between_samples_is_still_progress() -> None:
    # GIVEN the same stacks, but ranks 1 and 3 use CPU between samples (a healthy loop whose fast
    # ranks are found at one all_reduce line in every sample, a slower rank 2 caught arriving)
    snapshot = map_ranks(hang_forming(),
                         lambda r: _main_threads_working(r) if r.rank in (1, 3) else r)
    # THEN it stays progress
    assert top(snapshot).kind == "progressing"


def test_a_rank_leaving_the_collective_during_the_look_is_still_progress() -> None:
    # GIVEN rank 2 seen in the all_reduce twice, then in its step (it left the collective)
    def leaving(rank):  # type: ignore[no-untyped-def]
        return rank if rank.rank != 2 else replace(rank, samples=tuple(
            replace(late, t=early.t) for late, early in zip(rank.samples[::-1], rank.samples)))

    # THEN a collective completed: progress
    assert top(map_ranks(hang_forming(), leaving)).kind == "progressing"


def test_a_rank_seen_in_the_collective_before_it_moved_is_still_progress() -> None:
    # GIVEN rank 2 in the all_reduce first, then twice at one line of its step (idle there): the
    # collective it was in completed
    def left_then_stayed(rank):  # type: ignore[no-untyped-def]
        if rank.rank != 2:
            return rank
        inside, step = rank.samples[1], rank.samples[0]
        order = (inside, step, step)
        return replace(rank, samples=tuple(replace(s, t=o.t, cpu_s=o.cpu_s, threads=tuple(
            replace(t, cpu_s=1.0) for t in s.threads)) for s, o in zip(order, rank.samples)))

    # THEN progress, not a hang judged after it
    assert top(map_ranks(hang_forming(), left_then_stayed)).kind == "progressing"


# ------------------------------------- a waiter read just as its poll timeout woke it still waits


def store_wait_one_awake() -> Snapshot:
    """store_wait with --samples 1 from `make accuracy` (real): ranks 0 and 3 in store.wait
    (state S, wchan poll_schedule_timeout), rank 1 in the same call read in state R with no wait
    channel and 0 % CPU, rank 2 polling for the marker. Before this rule: ranks 1-2 blamed."""
    return Snapshot.from_json((ACCURACY / "store_wait.samples1.caught_awake.json").read_text())


def test_a_waiter_caught_awake_at_its_peers_store_wait_waits_with_them() -> None:
    v = top(store_wait_one_awake())
    assert (v.kind, v.culprit_ranks) == ("straggler", (2,)), v
    assert "ranks 0-1,3 wait" in v.summary


def test_a_waiter_read_asleep_with_its_wait_unread_waits_with_its_peers() -> None:
    # GIVEN store_poll with --samples 1 (real, this session): ranks 0 and 3 in their store poll
    # (S, poll_schedule_timeout), rank 1 at the same call read in state S with no wait channel
    # (its state and its wait read either side of a wake), rank 2 asleep polling for the marker.
    # Before: "ranks 1-2 are blocked in I/O" (critical).
    snapshot = Snapshot.from_json(
        (ACCURACY / "store_poll.samples1.wait_unread.json").read_text())
    v = top(snapshot)
    # THEN rank 1 waits with its peers and rank 2 alone is blamed
    assert (v.kind, v.culprit_ranks) == ("straggler", (2,)), v
    assert "ranks 0-1,3 wait" in v.summary
    # AND read with a wait of its own (a pipe), it is not taken for one of them
    v = top(map_ranks(snapshot, lambda r: replace(r, wchan="pipe_read") if r.rank == 1 else r))
    assert "ranks 0-1,3 wait" not in v.summary, v.summary


def test_a_rank_using_cpu_at_its_peers_store_wait_does_not_join_them() -> None:
    # GIVEN rank 1 at that call using 35 % of a core over the window (it computes there)
    v = top(map_ranks(store_wait_one_awake(),
                      lambda r: replace(r, cpu_percent=35.0) if r.rank == 1 else r))
    # THEN it is not counted with the waiters
    assert "ranks 0-1,3 wait" not in v.summary and "ranks 0,3 wait" in v.summary, v.summary


# ------------------------------- traffic on the sockets is no progress while a rank is stuck off them


def traffic_while_stuck() -> Snapshot:
    """pipe_write_full with the defaults from `make accuracy` (real): every rank stationary over
    3 samples (rank 0 in anon_pipe_write, ranks 1-3 in all_reduce), no CPU, yet strace counted
    16-36 writev and 25-53 recvfrom a rank in its 2 s (a burst as the hang formed). Before this
    rule: progressing, "moved data over the network while strace watched"."""
    return Snapshot.from_json((ACCURACY / "pipe_write_full.default.traffic.json").read_text())


def test_socket_traffic_does_not_hide_a_rank_stuck_in_a_pipe_write() -> None:
    v = top(traffic_while_stuck())
    assert (v.kind, v.culprit_ranks, v.severity) == ("straggler", (0,), "critical"), v


def test_a_rank_whose_written_bytes_advance_is_not_stuck_and_traffic_is_progress() -> None:
    # GIVEN rank 0 writing 4 MiB a second meanwhile (a slow consumer it keeps feeding, caught in
    # the write in every sample)
    def feeding(rank):  # type: ignore[no-untyped-def]
        if rank.rank != 0:
            return rank
        return replace(rank, samples=tuple(
            replace(s, io=(s.io[0], s.io[1] + (4 << 20) * k, *s.io[2:])) if s.io else s
            for k, s in enumerate(rank.samples)))

    # THEN the traffic rule holds: the job moves data
    assert top(map_ranks(traffic_while_stuck(), feeding)).kind == "progressing"


def test_a_rank_blocked_in_a_socket_receive_does_not_stop_the_traffic_rule() -> None:
    # GIVEN rank 0 blocked in a socket receive instead (wchan sk_wait_data) while the ranks'
    # sockets carry traffic: the receive may be the transfer in progress
    snapshot = map_ranks(traffic_while_stuck(),
                         lambda r: replace(r, wchan="sk_wait_data") if r.rank == 0 else r)
    # THEN the traffic says progress, as before
    assert top(snapshot).kind == "progressing"


def test_a_rendezvous_retried_with_traffic_never_formed_and_is_no_progress() -> None:
    # GIVEN test_nic's job (real, recorded from CI's shape): both ranks in _create_c10d_store in
    # every sample, a wrong server answering the store's handshake, 10 send/receive calls a rank
    # in strace's 1 s (the handshake retried, the names looked up). CI: "progressing", the job
    # that never formed called healthy.
    snapshot = Snapshot.from_json((ACCURACY / "unreachable_master.store_retry.json").read_text())
    v = top(snapshot)
    # THEN no rank formed a group: the rendezvous never formed, whatever their sockets carried
    assert (v.kind, v.severity) == ("all_waiting", "critical"), v
    assert "never formed" in v.summary
    # AND ranks past their rendezvous, in a collective with the same calls, still progress
    def formed(rank):  # type: ignore[no-untyped-def]
        return replace(rank, samples=tuple(
            replace(s, threads=(replace(s.threads[0], frames=collective("all_reduce")),))
            for s in rank.samples))

    assert "progressing" in [v.kind for v in diagnose(map_ranks(snapshot, formed)).verdicts]


def pipe_drains() -> Snapshot:
    """slow_metrics_consumer with the defaults from `make accuracy` (real, a healthy job): rank
    0 in anon_pipe_write at one line in all 3 samples, 2 % CPU, its process' bytes ~80 KB/s
    (under the 1 MiB/s of measured I/O work), ranks 1-3 at the all_reduce line; the main
    thread's wchar (`main_io`) advances ~75 KB a second. Before the main thread's counters were
    read: a false alarm, "rank 0 is blocked in I/O"."""
    return Snapshot.from_json(
        (ACCURACY / "slow_metrics_consumer.default.pipe_drains.json").read_text())


def test_a_pipe_write_that_drains_is_not_stuck_and_traffic_is_progress() -> None:
    v = top(pipe_drains())
    assert (v.kind, v.culprit_ranks) == ("progressing", ()), v


def test_a_pipe_write_whose_main_thread_counters_stand_still_is_stuck() -> None:
    # GIVEN the real hang read with the main thread's counters (they stay at 65,203 bytes)
    v = top(Snapshot.from_json((ACCURACY / "pipe_write_full.default.main_io.json").read_text()))
    # THEN rank 0 is the straggler, in its write
    assert (v.kind, v.culprit_ranks) == ("straggler", (0,)), v
    assert v.sites[0].endswith("pipe_write_full.py:40")
    # AND so is the draining one once its main thread's counters stop between the last two
    # samples (the consumer stopped reading)
    def stopped(rank):  # type: ignore[no-untyped-def]
        if rank.rank != 0:
            return rank
        last = rank.samples[-1]
        return replace(rank, samples=(*rank.samples[:-1],
                                      replace(last, main_io=rank.samples[-2].main_io)))

    assert top(map_ranks(pipe_drains(), stopped)).culprit_ranks == (0,)


def test_a_culprit_whose_last_sample_was_kept_says_none_of_its_threads_ran() -> None:
    hang = Snapshot.from_json((ACCURACY / "pipe_write_full.default.main_io.json").read_text())

    # GIVEN the real hang, rank 0's third sample kept by the collector as its second
    def kept(rank):  # type: ignore[no-untyped-def]
        if rank.rank != 0:
            return rank
        last = replace(rank.samples[-1], same_as=1)
        return replace(rank, samples=(*rank.samples[:-1], last))

    v = top(map_ranks(hang, kept))
    # THEN its evidence says for how long nothing of it ran, from the two samples' times
    (line,) = [e for e in v.evidence if e.startswith("rank 0 on ")]
    assert line.endswith("none of its Python threads ran in the last 1.0 s"), line
    # AND without a kept sample the line says nothing of the kind
    assert not any("threads ran" in e for e in top(hang).evidence)


@pytest.mark.parametrize("mode", ["default", "samples1"])
def test_polling_a_store_is_the_wait_not_traffic_of_progress(mode: str) -> None:
    # GIVEN store_poll (real): ranks 0, 1, 3 wait for a key 200 ms at a time, retrying, so
    # strace counts ~70 send/receive calls each in its 2 s; rank 2 sleeps in its own poll loop
    snapshot = Snapshot.from_json(
        (ACCURACY / f"store_poll.{mode}.store_traffic.json").read_text())
    # THEN the store's requests and replies are not collectives completing: rank 2 is the culprit
    v = top(snapshot)
    assert (v.kind, v.culprit_ranks) == ("straggler", (2,)), v
    assert v.sites[0].endswith("store_poll.py:32")


def store_serving(mode: str) -> Snapshot:
    """store_poll_host (real, torch's first store server): rank 0, the store's host, sleeps in
    its marker poll; its server answers ranks 1-3's polls, ~160 recvfrom/sendto in strace's
    2 s. Each rank's connections were looked up when strace stopped: only those to or from the
    store's port (20006, which rank 0 listens on; MASTER_PORT was set in Python, not in the
    ranks' environment) carried data."""
    return Snapshot.from_json(
        (ACCURACY / f"store_poll_host.{mode}.store_serving.json").read_text())


@pytest.mark.parametrize("mode", ["default", "samples1"])
def test_a_store_host_answering_pollers_is_not_collectives_completing(mode: str) -> None:
    # GIVEN the hang whose only traffic is the store's host serving the pollers
    snapshot = store_serving(mode)
    # THEN the host is the culprit, in its own poll loop, not "progressing"
    v = top(snapshot)
    assert (v.kind, v.culprit_ranks) == ("straggler", (0,)), v
    assert v.sites[0].endswith("store_wait.py:31")
    # AND it is the connections that tell: without them (an older collector) strace's count
    # alone made the job look like it progressed
    blind = map_ranks(snapshot, lambda rank: replace(rank, recent_traffic=None))
    assert top(blind).kind == "progressing"


def test_the_store_port_comes_from_the_environment_else_from_who_connects_where() -> None:
    ranks = [r for _, r in store_serving("default").all_ranks()]
    # GIVEN no MASTER_PORT in the ranks' environment: the port rank 0 listens on that every
    # rank, rank 0 included, is connected to (gloo's listeners: only by the other ranks)
    assert _store_ports(ranks) == {"20006"}
    # AND MASTER_PORT when the environment has it (a second store still found by who
    # connects where), alone when the connections were not listed
    named = [replace(r, env={**r.env, "MASTER_PORT": "29500"}) for r in ranks]
    assert _store_ports(named) == {"29500", "20006"}
    assert _store_ports([replace(r, connections=()) for r in named]) == {"29500"}
    # AND nothing when neither says
    assert _store_ports([replace(r, connections=()) for r in ranks]) == frozenset()
    # AND a rank the others connect to but that does not connect to itself is not the store
    without_own = [replace(r, connections=tuple(c for c in r.connections if not (
        c.state == "ESTABLISHED" and c.remote.endswith(":20006")))) if r.rank == 0 else r
        for r in ranks]
    assert _store_ports(without_own) == frozenset()


def test_an_upload_thread_sending_through_a_hang_is_not_collectives() -> None:
    # GIVEN rank_gated_collective's hang (real) while every rank's upload thread streams to a
    # gateway, a child of rank 0: ~40 sends a rank in strace's 2 s
    snapshot = Snapshot.from_json(
        (ACCURACY / "uploader_during_hang.default.upload.json").read_text())
    # THEN the hang is found as without the uploads: rank 0 in save_checkpoint's barrier
    v = top(snapshot)
    assert (v.kind, v.culprit_ranks) == ("mismatched_collective", (0,)), v
    assert v.sites[0].endswith("rank_gated_collective.py:38")
    # AND it is the far end of the connections that tells: without them, strace's counts
    # made the job look like it progressed
    assert top(map_ranks(snapshot, lambda r: replace(r, recent_traffic=None))).kind == "progressing"
    # AND were the gateway's end a rank's own socket, its data would count
    (gateway,) = {c.remote for _, r in snapshot.all_ranks() for c in r.recent_traffic.active}

    def holds(rank):  # type: ignore[no-untyped-def]
        if rank.rank != 0:
            return rank
        return replace(rank, connections=(*rank.connections,
                                          Connection(gateway, "127.0.0.1:1", "ESTABLISHED")))

    assert top(map_ranks(snapshot, holds)).kind == "progressing"


def test_rank_endpoints_match_a_wildcard_listener_by_its_port() -> None:
    ranks = [r for _, r in store_serving("default").all_ranks()]
    _, anywhere = _rank_endpoints(ranks)
    # rank 0's store listens on every address ([::]:20006): matched by its port; the gloo
    # listeners on 127.0.0.1 only by their whole endpoint
    gloo = {c.local.rpartition(":")[2] for r in ranks for c in r.connections
            if c.state == "LISTEN" and c.local.startswith("127.0.0.1:")}
    assert anywhere == {"20006"} and gloo and not gloo & anywhere
    # AND in the healthy paced job every rank's data went to another rank's endpoint: its
    # collectives are found as such
    paced = [r for _, r in Snapshot.from_json(
        (ACCURACY / "store_paced_steps.default.paced.json").read_text()).all_ranks()]
    ends, anywhere = _rank_endpoints(paced)
    for rank in paced:
        assert any(c.remote in ends or c.remote.rpartition(":")[2] in anywhere
                   for c in rank.recent_traffic.active), rank.rank


def test_a_healthy_job_paced_by_the_store_still_progresses() -> None:
    # GIVEN store_paced_steps (real, healthy): ranks 1-3 wait in store.wait for the key rank 0
    # sets each step after a 0.9 s sleep; then everyone's all_reduce
    snapshot = Snapshot.from_json((ACCURACY / "store_paced_steps.default.paced.json").read_text())
    # THEN rank 0's gloo connections carried data in the window: the job progresses
    v = top(snapshot)
    assert v.kind == "progressing", v
    (line,) = [e for e in v.evidence if e.startswith("rank 0: ")]
    assert "send/receive calls" in line and " connections meanwhile" in line, line
    # AND had only the store's connections carried data, it would not
    def store_only(rank):  # type: ignore[no-untyped-def]
        if rank.recent_traffic is None:
            return rank
        kept = tuple(c for c in rank.recent_traffic.active
                     if ":20008" in (c.local[-6:], c.remote[-6:]))
        return replace(rank, recent_traffic=replace(rank.recent_traffic, active=kept))

    assert _store_ports([r for _, r in snapshot.all_ranks()]) == {"20008"}
    assert top(map_ranks(snapshot, store_only)).kind != "progressing"


def writer_thread(mode: str) -> Snapshot:
    """async_checkpoint_skip (real): ranks 0, 1, 3's main threads wait in join() for their
    'ckpt-writer' thread, which waits in a barrier on a checkpoint process group; rank 2
    skipped the checkpoint and waits in the next step's all_reduce."""
    return Snapshot.from_json(
        (ACCURACY / f"async_checkpoint_skip.{mode}.writer_thread.json").read_text())


def _writers(snapshot: Snapshot, change) -> Snapshot:  # type: ignore[no-untyped-def]
    """The snapshot with change(sample index, writer thread) applied to every writer thread."""
    def rank(r):  # type: ignore[no-untyped-def]
        samples = tuple(
            replace(s, threads=tuple(change(i, t) if t.name == "ckpt-writer" else t
                                     for t in s.threads))
            for i, s in enumerate(r.samples))
        return replace(r, samples=samples)
    return map_ranks(snapshot, rank)


@pytest.mark.parametrize("mode", ["default", "samples1"])
def test_a_rank_waits_in_the_collective_its_main_thread_waits_for(mode: str) -> None:
    # GIVEN the three ranks whose main thread is blocked in join() on a thread that waits in
    # a barrier, and the one rank that skipped that barrier, in the next all_reduce
    v = top(writer_thread(mode))
    # THEN the three wait in the barrier through their writer thread: the one elsewhere is
    # the culprit, at its all_reduce (not the three, "blocked on a lock")
    assert (v.kind, v.culprit_ranks) == ("mismatched_collective", (2,)), v
    assert v.sites[0].endswith("async_checkpoint_skip.py:59")
    assert "barrier at" in v.summary and "(thread ckpt-writer; its main thread waiting for another thread at" in v.summary


def test_a_thread_that_runs_between_the_samples_only_passes_through_its_collective() -> None:
    # GIVEN the same stacks, but the writer threads use CPU between the samples (a metrics
    # loop that all_reduces again and again is caught in the same call every time)
    busy = _writers(writer_thread("default"),
                    lambda i, t: replace(t, cpu_s=(t.cpu_s or 0.0) + 0.3 * i))
    # THEN they are not where the ranks wait: the main threads' own wait is taken
    v = top(busy)
    assert (v.kind, v.culprit_ranks) == ("straggler", (0, 1, 3)), v
    # AND neither is a thread seen in the collective in the last sample only
    passing = _writers(writer_thread("default"),
                       lambda i, t: t if i == 2 else replace(t, frames=t.frames[1:]))
    assert top(passing).kind == "straggler"


def gil_holder(mode: str) -> Snapshot:
    """gil_held_native (real): rank 1's 'shipper' thread holds the GIL in a write that blocks
    (libc's, through ctypes.PyDLL); its main thread stopped on the GIL in synthetic_batch;
    ranks 0, 2, 3 wait in the gradient all_reduce."""
    return Snapshot.from_json(
        (ACCURACY / f"gil_held_native.{mode}.gil_holder.json").read_text())


def _rank1_threads(snapshot: Snapshot, change) -> Snapshot:  # type: ignore[no-untyped-def]
    """change(sample index, thread) applied to every thread of rank 1."""
    def rank(r):  # type: ignore[no-untyped-def]
        if r.rank != 1:
            return r
        return replace(r, samples=tuple(
            replace(s, threads=tuple(change(i, t) for t in s.threads))
            for i, s in enumerate(r.samples)))
    return map_ranks(snapshot, rank)


@pytest.mark.parametrize("mode", ["default", "samples1"])
def test_a_thread_holding_the_gil_in_a_blocked_call_is_where_the_rank_stopped(mode: str) -> None:
    # GIVEN rank 1, whose main thread stopped on the GIL that its shipper thread holds in a
    # blocked write
    v = top(gil_holder(mode))
    # THEN it is the straggler, at the shipper's call, not at the main thread's chance line
    assert (v.kind, v.culprit_ranks) == ("straggler", (1,)), v
    assert v.sites == (v.sites[0],) and v.sites[0].endswith("gil_held_native.py:45")
    assert "stopped on the GIL at" in v.summary and "held by thread shipper" in v.summary
    assert "_training.py:26" in v.summary  # where the main thread stopped, said


def test_the_gil_holder_is_found_when_the_main_thread_stopped_inside_a_collective() -> None:
    # GIVEN the same rank whose main thread stopped on its way back from an all_reduce: its
    # stack is the others' wait (rank 0's main thread, copied)
    snapshot = gil_holder("default")
    waiting = next(t for _, r in snapshot.all_ranks() if r.rank == 0
                   for t in r.samples[-1].threads if t.name == "MainThread")
    looks_waiting = _rank1_threads(snapshot, lambda i, t: replace(t, frames=waiting.frames)
                                   if t.name == "MainThread" else t)
    # THEN the thread that holds the GIL still says where rank 1 stopped
    v = top(looks_waiting)
    assert (v.kind, v.culprit_ranks) == ("straggler", (1,)), v
    assert v.sites[0].endswith("gil_held_native.py:45")


@pytest.mark.parametrize("change", ["holder runs", "holder active", "main holds the gil",
                                    "holder seen once"])
def test_a_gil_holder_that_is_not_stuck_does_not_decide(change: str) -> None:
    # GIVEN variations that make the shipper a thread merely caught with the GIL: it used CPU
    # between the samples, py-spy saw it running, the main thread held the GIL itself, or the
    # shipper held it in the last sample only
    def vary(i: int, t: ThreadStack) -> ThreadStack:
        if change == "main holds the gil" and t.name == "MainThread" and i == 0:
            return replace(t, owns_gil=True)
        if t.name != "shipper":
            return t
        if change == "holder runs":
            return replace(t, cpu_s=(t.cpu_s or 0.0) + 0.2 * i)
        if change == "holder active" and i == 1:
            return replace(t, active=True)
        if change == "holder seen once" and i < 2:
            return replace(t, owns_gil=False)
        return t

    v = top(_rank1_threads(gil_holder("default"), vary))
    # THEN the main thread's own line decides again (the culprit is still rank 1)
    assert v.culprit_ranks == (1,), v
    assert not v.sites[0].endswith("gil_held_native.py:45"), v


def busy_workers() -> Snapshot:
    """input_bound (real, --samples 1): rank 0's main thread waits for its next batch in the
    DataLoader while its two workers decode (state R, 13-17 % CPU on the crowded node); ranks
    1-3 wait for it in the gradient all_reduce. A healthy job bound by its input pipeline."""
    return Snapshot.from_json((ACCURACY / "input_bound.samples1.busy_workers.json").read_text())


def test_a_rank_waiting_for_workers_that_compute_is_a_slow_input_not_a_straggler() -> None:
    # GIVEN the input-bound job caught with rank 0 waiting for its workers
    v = top(busy_workers())
    # THEN no alarm: a slow input pipeline or a hang, the look cannot tell, and says so
    assert (v.kind, v.severity, v.culprit_ranks) == ("slow_step", "info", (0,)), v
    assert v.summary.startswith("a slow input pipeline or a hang, cannot tell: rank 0 waits")
    workers = [e for e in v.evidence if "DataLoader worker pid" in e]
    assert len(workers) == 2 and all("state R" in e and "in decode_record (" in e
                                     and "input_bound.py:" in e for e in workers), workers


def test_a_rank_waiting_for_idle_workers_is_the_straggler() -> None:
    # GIVEN the same sight, but rank 0's workers idle (a deadlocked or starved worker: state
    # S, no CPU)
    def idle(rank):  # type: ignore[no-untyped-def]
        return replace(rank, workers=tuple(replace(w, state="S (sleeping)", cpu_percent=0.0)
                                           for w in rank.workers))
    v = top(map_ranks(busy_workers(), idle))
    # THEN rank 0 is blocked in data loading: the straggler
    assert (v.kind, v.culprit_ranks) == ("straggler", (0,)), v
    assert v.severity == "warning"  # one sample


def test_a_rank_waiting_for_busy_workers_is_not_blamed_beside_a_straggler() -> None:
    # GIVEN the input-bound sight (rank 0 waits for its computing workers), and rank 1 idle
    # outside any collective (the main thread of gil_held_native's rank 1, copied)
    stopped = next(t for _, r in gil_holder("samples1").all_ranks() if r.rank == 1
                   for t in r.samples[0].threads if t.name == "MainThread")

    def idle(rank):  # type: ignore[no-untyped-def]
        if rank.rank != 1:
            return rank
        return replace(rank, samples=tuple(
            replace(s, threads=tuple(replace(t, frames=stopped.frames, active=False)
                                     if t.os_thread_id == rank.pid else t for t in s.threads))
            for s in rank.samples))
    verdicts = diagnose(map_ranks(busy_workers(), idle)).verdicts
    # THEN rank 1 is the straggler, and rank 0 is not called spinning beside it
    assert (verdicts[0].kind, verdicts[0].culprit_ranks) == ("straggler", (1,)), verdicts[0]
    assert not any(0 in v.culprit_ranks for v in verdicts if v.severity != "info"), verdicts
