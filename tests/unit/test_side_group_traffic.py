"""Data moving between ranks on another process group is not the waited collective completing
(`heartbeat_group_hang`, real looks of it and of its liar `healthy_metrics_group`).

`heartbeat_group_hang` is `mismatched_collectives` (rank 1 in all_gather, ranks 0, 2, 3 in the
gradient all_reduce on the default group) while every rank's health thread all_reduces a flag
on a second gloo group ten times a second. Both traffic rules (strace's window; the connections
read again at a look's end) saw every rank move data to other ranks and called the hung job
progressing. The collector now says, for a rank of gloo groups, whether each group's worker
threads ran during strace's window, or a look's (``gloo_ran``), and for a look without strace
how long they had slept before it (``gloo_idle_ms``): a rank waiting on the default group whose
workers slept through 1.5 s at least (GLOO_ASLEEP_MS) moved data that was not its collective's.
`side_channel_hang` is the same with a liveness ring of plain TCP connections (one group).

Its liar `healthy_metrics_group`: a 128-MB all_reduce on the default group every step (every
sample in it, data flowing) and a metrics group idle between its uses. A one-sample look's
~0.1 s saw no worker of any group run while a chunk came in; the default group's had run
milliseconds before the look.
"""

from __future__ import annotations

from dataclasses import replace

from snapfactory import map_every_rank, recorded, with_traffic

from slurmdiag.analysis import diagnose
from slurmdiag.snapshot import Gpu, GpuState, Rank

HANG, HANG_LOOK = "heartbeat_group_hang.default", "heartbeat_group_hang.samples1"
HEALTHY, HEALTHY_LOOK = "healthy_metrics_group.default", "healthy_metrics_group.samples1"
NOTE = "connections moved was not the collective's"


def test_the_hang_behind_a_health_check_is_found_with_strace() -> None:
    verdict = diagnose(recorded(HANG)).verdicts[0]
    assert (verdict.kind, verdict.severity, verdict.culprit_ranks) == (
        "mismatched_collective", "critical", (1,))
    assert any(line.startswith("ranks 0-3 wait on the default group") and NOTE in line
               for line in verdict.evidence)
    # the health checks' data cut the ranks' quiet time: not said as how long they waited
    assert not any("moved no data on any connection" in line for line in verdict.evidence)


def test_without_the_groups_reading_the_traffic_still_counts() -> None:
    # WHEN the collector did not say which group ran (an older one, a rank of one gloo group)
    verdict = diagnose(map_every_rank(recorded(HANG), with_traffic(gloo_ran=()))).verdicts[0]
    # THEN the data between ranks is taken for the collectives, as before: the recording's miss
    assert (verdict.kind, verdict.severity) == ("progressing", "info")


def test_the_default_group_running_is_progress() -> None:
    # WHEN the default group's workers ran during the window
    verdict = diagnose(map_every_rank(recorded(HANG), with_traffic(gloo_ran=(True, True)))).verdicts[0]
    assert verdict.kind == "progressing"


def test_a_collective_on_another_group_is_not_judged() -> None:
    # WHEN the ranks' c10d call was given a group (its place among the groups is not known)
    pg = "{'group': <torch._C._distributed_c10d.ProcessGroup at 0x7f0000000001>}"

    def given_a_group(rank: Rank) -> Rank:
        first = rank.samples[0]
        groups = tuple((i, name, pg if name == "kwargs" else text) for i, name, text in first.groups)
        return replace(rank, samples=(replace(first, groups=groups), *rank.samples[1:]))

    snapshot = map_every_rank(recorded(HANG), given_a_group)
    assert diagnose(snapshot).verdicts[0].kind == "progressing"


def test_on_gpu_nodes_the_gloo_groups_are_not_placed() -> None:
    # WHEN the nodes have GPUs: the default group is most likely NCCL's, gloo's are side groups
    gpus = GpuState(status="ok", gpus=(Gpu(index=0),))
    snapshot = recorded(HANG)
    snapshot = replace(snapshot, nodes=tuple(replace(n, gpus=gpus) for n in snapshot.nodes))
    assert diagnose(snapshot).verdicts[0].kind == "progressing"


def test_a_look_without_strace_reads_how_long_the_default_group_slept() -> None:
    # no worker ran in the look's ~0.1 s; the default group's had slept 2.7 s before it
    verdict = diagnose(recorded(HANG_LOOK)).verdicts[0]
    assert (verdict.kind, verdict.severity, verdict.culprit_ranks) == (
        "mismatched_collective", "warning", (1,))
    assert any(NOTE in line for line in verdict.evidence)


def test_a_look_soon_after_another_decides_nothing() -> None:
    # WHEN the default group's workers had slept 1 s only before the look (an earlier look's
    # dump woke them)
    verdict = diagnose(map_every_rank(recorded(HANG_LOOK), with_traffic(gloo_idle_ms=(1000, 40)))).verdicts[0]
    assert verdict.kind == "progressing"


def test_a_look_without_the_idle_times_decides_nothing() -> None:
    # WHEN they were not read (a kernel without the sched files): the look's ~0.1 s says nothing
    verdict = diagnose(map_every_rank(recorded(HANG_LOOK), with_traffic(gloo_idle_ms=()))).verdicts[0]
    assert verdict.kind == "progressing"


def test_its_liar_a_large_allreduce_beside_an_idle_metrics_group_is_progress() -> None:
    for name in (HEALTHY, HEALTHY_LOOK):
        verdict = diagnose(recorded(name)).verdicts[0]
        assert (verdict.kind, verdict.severity) == ("progressing", "info"), name
    # in the look no rank's default-group workers ran, but they had milliseconds before it
    look = recorded(HEALTHY_LOOK)
    traffic = [r.recent_traffic for n in look.nodes for r in n.ranks]
    assert all(t is not None and not any(t.gloo_ran) and t.gloo_idle_ms[0] < 100 for t in traffic)


def test_a_short_strace_window_decides_nothing() -> None:
    # WHEN strace watched 0.5 s (--strace 0.5): too short for the workers' sleep to mean anything
    def shortened(rank: Rank) -> Rank:
        assert rank.strace is not None
        return replace(rank, strace=replace(rank.strace, window_s=0.5))

    assert diagnose(map_every_rank(recorded(HANG), shortened)).verdicts[0].kind == "progressing"


SIDE = "side_channel_hang.default"


def test_a_liveness_ring_beside_one_group_is_not_its_collectives() -> None:
    # every rank sends a status line to the next over a TCP connection of its own; one gloo
    # group, whose workers slept through strace's window (and through a look and 2.9 s before)
    for name, severity in ((SIDE, "critical"), ("side_channel_hang.samples1", "warning")):
        verdict = diagnose(recorded(name)).verdicts[0]
        assert (verdict.kind, verdict.severity, verdict.culprit_ranks) == (
            "mismatched_collective", severity, (1,)), name
        assert any(NOTE in line and "a liveness ring" in line for line in verdict.evidence)


def _in(op: str):
    """A rank change: its main thread's collective frames renamed ``op``."""
    def change(rank: Rank) -> Rank:
        def frames(thread):
            return tuple(replace(f, function=op) if f.function in ("all_reduce", "all_gather")
                         else f for f in thread.frames)
        return replace(rank, samples=tuple(
            replace(s, threads=tuple(replace(t, frames=frames(t)) for t in s.threads))
            for s in rank.samples))
    return change


def test_a_receive_runs_on_the_calling_thread_and_is_not_judged() -> None:
    # WHEN the ranks wait in recv (gloo runs sends and receives on the calling thread, not on
    # the group's workers: a pipeline's healthy stages waiting for activations leave them asleep)
    verdict = diagnose(map_every_rank(recorded(SIDE), _in("recv"))).verdicts[0]
    # THEN the data between ranks counts as before
    assert verdict.kind == "progressing"


def test_no_data_between_ranks_is_nothing_to_set_apart() -> None:
    # WHEN the ranks' connections carried nothing (a plain hang: the default group asleep too)
    def silent(rank: Rank) -> Rank:
        assert rank.recent_traffic is not None
        return replace(rank, recent_traffic=replace(rank.recent_traffic, active=(), quiet_ms=5000))

    verdict = diagnose(map_every_rank(recorded(SIDE), silent)).verdicts[0]
    # THEN the verdict says nothing of data that is not the collective's, and how long they waited
    assert verdict.kind == "mismatched_collective"
    assert not any(NOTE in line for line in verdict.evidence), verdict.evidence
    assert any(line.startswith("ranks 0-3 have moved no data on any connection for 5.0 s")
               for line in verdict.evidence), verdict.evidence
