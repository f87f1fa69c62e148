"""How long the waiting ranks have waited, from their connections' tcp_info (``quiet_ms``: ms
since any connection of the rank last carried data), said in the evidence; past torch's default
process-group timeout (gloo's 30 min; NCCL's 10 min on nodes with GPUs) a look's "a slow phase
or a hang, cannot tell" becomes the hang verdict.

On real recordings of `make accuracy` (whose collector did not read ``quiet_ms`` yet), the
waiting ranks' value set as a later collector reads it: rank0_prepare_endless (rank 0 counts
tokens for ever, ranks 1-3 in a barrier: "a rank-gated phase or a hang, cannot tell"),
nan_retry_loop (rank 2 recomputes a batch for ever in native code) and healthy_compile_warmup
(rank 0 in torch.compile's compiler)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from snapfactory import map_rank, recorded

from slurmdiag.analysis import diagnose
from slurmdiag.snapshot import Gpu, GpuState, Rank, Snapshot

MINUTE_MS = 60_000


def _quiet(snapshot: Snapshot, ranks: dict[int, int]) -> Snapshot:
    """``snapshot`` with rank r's quiet_ms set to ranks[r]."""
    def change(ms: int):
        def one(rank: Rank) -> Rank:
            assert rank.recent_traffic is not None
            return replace(rank, recent_traffic=replace(rank.recent_traffic, quiet_ms=ms))
        return one
    for number, ms in ranks.items():
        snapshot = map_rank(snapshot, number, change(ms))
    return snapshot


@pytest.mark.parametrize(("look", "busy", "waiting"), [
    ("rank0_prepare_endless.default.gated", 0, (1, 2, 3)),
    ("nan_retry_loop.default.native_moving", 2, (0, 1, 3)),
    ("healthy_compile_warmup.default", 0, (1, 2, 3)),
])
def test_a_cannot_tell_look_whose_waiters_waited_past_the_timeout_is_a_hang(
        look: str, busy: int, waiting: tuple[int, ...]) -> None:
    snapshot = recorded(look)
    before = diagnose(snapshot).verdicts[0]
    assert (before.kind, before.severity) == ("slow_step", "info")
    # WHEN the waiting ranks (gloo, CPU nodes) have moved no data for 35 minutes
    verdict = diagnose(_quiet(snapshot, dict.fromkeys(waiting, 35 * MINUTE_MS))).verdicts[0]
    # THEN the busy rank is the hang's culprit, and the evidence says why
    assert (verdict.kind, verdict.severity, verdict.culprit_ranks) == ("spinning", "critical", (busy,))
    assert any("moved no data on any connection for 35 min" in line
               and "longer than 30 min, torch's default process-group timeout for gloo" in line
               for line in verdict.evidence), verdict.evidence


def _with_gpus(snapshot: Snapshot) -> Snapshot:
    """Every node with one GPU (the job's collectives on NCCL, whose default timeout is 10 min)."""
    state = GpuState(status="ok", gpus=(Gpu(index=0, name="NVIDIA H100 80GB HBM3"),))
    return replace(snapshot, nodes=tuple(replace(n, gpus=state) for n in snapshot.nodes))


def test_the_timeout_is_the_backends_nccl_on_gpu_nodes_gloo_elsewhere() -> None:
    look = recorded("rank0_prepare_endless.default.gated")
    quiet = dict.fromkeys((1, 2, 3), 15 * MINUTE_MS)
    # 15 minutes: past NCCL's default (GPU nodes), short of gloo's (CPU nodes)
    on_gpus = diagnose(_quiet(_with_gpus(look), quiet)).verdicts[0]
    assert (on_gpus.kind, on_gpus.severity, on_gpus.culprit_ranks) == ("spinning", "critical", (0,))
    assert any("longer than 10 min, torch's default process-group timeout for NCCL" in line
               for line in on_gpus.evidence), on_gpus.evidence
    on_cpus = diagnose(_quiet(look, quiet)).verdicts[0]
    assert (on_cpus.kind, on_cpus.severity) == ("slow_step", "info")
    assert any("moved no data on any connection for 15 min" in line for line in on_cpus.evidence)


def test_a_short_wait_is_said_and_changes_nothing() -> None:
    snapshot = _quiet(recorded("rank0_prepare_endless.default.gated"), {1: 20_000, 2: 21_000, 3: 20_500})
    verdict = diagnose(snapshot).verdicts[0]
    assert (verdict.kind, verdict.severity, verdict.culprit_ranks) == ("slow_step", "info", (0,))
    assert any(line.startswith("ranks 1-3 have moved no data on any connection for 20.0 s")
               for line in verdict.evidence), verdict.evidence
    assert not any("most likely a hang" in line for line in verdict.evidence)


def test_its_liar_one_waiter_still_talking_keeps_the_look_undecided() -> None:
    # a waiting rank that moved data a moment ago (a store it polls, a peer it answers): the
    # waiters' wait is the shortest of theirs
    snapshot = _quiet(recorded("rank0_prepare_endless.default.gated"),
                      {1: 45 * MINUTE_MS, 2: 300, 3: 45 * MINUTE_MS})
    verdict = diagnose(snapshot).verdicts[0]
    assert (verdict.kind, verdict.severity) == ("slow_step", "info")


def test_its_liar_a_wait_not_read_is_not_assumed() -> None:
    # the recording as it is: no quiet_ms (a collector older than it, or no strace)
    verdict = diagnose(recorded("rank0_prepare_endless.default.gated")).verdicts[0]
    assert (verdict.kind, verdict.severity) == ("slow_step", "info")
    assert not any("moved no data on any connection" in line for line in verdict.evidence)
