"""Data moving between ranks is not a send or receive completing when neither side ran
(`pipeline_heartbeat_hang`, real looks of it and of its healthy twin).

`pipeline_heartbeat_hang` is a four-stage pipeline over point-to-point: the last stage's label
loader thread dies and its main thread waits in `queue.get()` for ever; stage 0 waits in a
receive from stage 1, stages 1 and 2 in sends to the next stage; every rank's health thread
all_reduces on a second gloo group ten times a second. Both traffic rules saw every rank move
data to other ranks and called it progressing: gloo runs a send or a receive on the calling
thread, not on the group's workers, so `_default_group_slept` does not judge them. The
collector now also says whether each rank's main thread ran over the same time (``main_ran``,
and without strace ``main_idle_ms``): a send or receive whose thread slept through 1.5 s at
least, as did its peer's, the peer not in the matching call, completed nothing then.

Its healthy twin `healthy_pipeline_slow_labels`: the loader lives and decodes each record for
2.5 s, so the same ranks sleep as long in the same calls. The last stage's main thread waits
for a thread that computes (`_thread_computes`): a slow worker thread or a hang, cannot tell.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from snapfactory import map_every_rank, map_rank, recorded, with_traffic

from slurmdiag.analysis import diagnose, verdicts
from slurmdiag.snapshot import Gpu, GpuState, Rank

HANG = "pipeline_heartbeat_hang"
HEALTHY = "healthy_pipeline_slow_labels"
NOTE = "connections moved was not the transfer's"


def _noted(verdict) -> str:
    return next((line for line in verdict.evidence if NOTE in line), "")


@pytest.mark.parametrize("mode, severity", [("default", "critical"), ("samples1", "warning"),
                                            ("look", "warning")])
def test_the_stalled_pipeline_behind_a_health_check_is_found(mode, severity) -> None:
    # GIVEN a real look of the hung pipeline (with strace 3 samples and one; without strace)
    verdict = diagnose(recorded(f"{HANG}.{mode}")).verdicts[0]
    # THEN the last stage is the straggler, and the data of ranks 0-2 is set apart
    assert (verdict.kind, verdict.severity, verdict.culprit_ranks) == ("straggler", severity, (3,))
    assert verdict.sites[0].endswith("pipeline_heartbeat_hang.py:78")
    assert _noted(verdict).startswith("ranks 0-2 wait in a send or receive")


def test_without_the_main_threads_reading_the_traffic_still_counts() -> None:
    # WHEN the collector did not say whether the main threads ran (an older one)
    snapshot = map_every_rank(recorded(f"{HANG}.samples1"), with_traffic(main_ran=None))
    # THEN the data between the ranks counts as before: progressing
    assert diagnose(snapshot).verdicts[0].kind == "progressing"


def test_a_peer_whose_main_thread_ran_may_yet_send() -> None:
    # WHEN the last stage's main thread ran during the window (it could have received)
    snapshot = map_rank(recorded(f"{HANG}.samples1"), 3, with_traffic(main_ran=True))
    verdict = diagnose(snapshot).verdicts[0]
    # THEN rank 2, which sends to it, keeps its data; ranks 0-1 are still set apart (no
    # majority talks: the hang stands)
    assert (verdict.kind, verdict.culprit_ranks) == ("straggler", (3,))
    assert _noted(verdict).startswith("ranks 0-1 wait in a send or receive")


def test_a_transfer_in_flight_between_two_sleepers_is_progress(monkeypatch) -> None:
    # WHEN rank 1 sent to rank 0, which receives from it: matching calls, both asleep (a
    # transfer longer than the window, its data flowing)
    real = verdicts._peer_of
    monkeypatch.setattr(verdicts, "_peer_of", lambda s: 0 if s.rank == 1 else real(s))
    verdict = diagnose(recorded(f"{HANG}.samples1")).verdicts[0]
    # THEN neither is set apart, and with rank 3's data most ranks talk: progressing
    assert verdict.kind == "progressing"


def test_a_short_strace_window_decides_nothing() -> None:
    def short(rank: Rank) -> Rank:
        assert rank.strace is not None
        return replace(rank, strace=replace(rank.strace, window_s=1.0))
    snapshot = map_every_rank(recorded(f"{HANG}.samples1"), short)
    assert diagnose(snapshot).verdicts[0].kind == "progressing"


def test_on_gpu_nodes_nothing_is_set_apart() -> None:
    snapshot = recorded(f"{HANG}.samples1")
    gpus = GpuState(status="ok", gpus=(Gpu(index=0),))
    snapshot = replace(snapshot, nodes=tuple(replace(n, gpus=gpus) for n in snapshot.nodes))
    assert diagnose(snapshot).verdicts[0].kind == "progressing"


def test_a_look_after_a_short_sleep_decides_nothing() -> None:
    # WHEN the look's main threads had slept 1 s before it (the pipeline waits that long)
    snapshot = map_every_rank(recorded(f"{HANG}.look"), with_traffic(main_idle_ms=1000))
    assert diagnose(snapshot).verdicts[0].kind == "progressing"


def test_the_healthy_twin_waits_for_a_thread_that_computes() -> None:
    # GIVEN a one-sample look at the slow-labels pipeline: the last stage in queue.get(), its
    # loader thread decoding; stages 0-2 asleep in their sends and receives for it
    verdict = diagnose(recorded(f"{HEALTHY}.samples1")).verdicts[0]
    assert (verdict.kind, verdict.severity) == ("slow_step", "info")
    assert verdict.summary.startswith("a slow worker thread or a hang, cannot tell: rank 3")
    assert any("thread label-loader in decode_record" in line for line in verdict.evidence)
    # AND a look without strace sees the main threads wake: its traffic counts
    assert diagnose(recorded(f"{HEALTHY}.look")).verdicts[0].kind == "progressing"


def test_a_waited_thread_that_does_not_compute_leaves_a_straggler() -> None:
    # WHEN the process used no CPU over the look (its thread idle, as the dead loader's twin)
    snapshot = map_rank(recorded(f"{HEALTHY}.samples1"), 3,
                        lambda rank: replace(rank, cpu_percent=1.0))
    verdict = diagnose(snapshot).verdicts[0]
    assert (verdict.kind, verdict.culprit_ranks) == ("straggler", (3,))
