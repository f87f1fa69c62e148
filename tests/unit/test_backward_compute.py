"""A pipeline stage computing its backward pass is not waiting in a collective
(`healthy_pipeline_schedule`, a real one-sample look from `make accuracy`).

Autograd's backward counts as a collective wait because DDP's and FSDP's gradient reductions run
inside it (ddp_skipped_backward: the rank idles there). Stage 3 ran its backward on the CPU
(state R, py-spy active) while stages 0-2 waited in the schedule's p2p: "ranks 0,3 wait in
collectives (pipeline_p2p ...; backward ...)", mismatched_collective, a warning on a healthy
job.

The look's connections carried data between ranks in strace's window: since session 25 that
alone makes it progressing (test_slow_pipeline_traffic.py). The stacks' reading is tested here
with the connections not read again (an older collector), as the look was judged then."""

from __future__ import annotations

from dataclasses import replace

from snapfactory import map_rank, recorded

from slurmdiag.analysis import diagnose
from slurmdiag.snapshot import Rank, Snapshot

LOOK = "healthy_pipeline_schedule.samples1.backward"


def _stacks_only() -> Snapshot:
    """The look without its connections read again at strace's end."""
    snapshot = recorded(LOOK)
    for _, rank in list(snapshot.all_ranks()):
        snapshot = map_rank(snapshot, rank.rank, lambda r: replace(r, recent_traffic=None))
    return snapshot


def test_the_look_is_progressing_by_its_traffic() -> None:
    assert diagnose(recorded(LOOK)).verdicts[0].kind == "progressing"


def test_a_stage_computing_its_backward_is_busy_not_waiting() -> None:
    snapshot = _stacks_only()
    stage = next(r for _, r in snapshot.all_ranks() if r.rank == 3)
    assert (stage.state or "").startswith("R")
    verdict = diagnose(snapshot).verdicts[0]
    # THEN no alarm: a step that computes, which one sample cannot tell from a hang
    assert (verdict.kind, verdict.severity, verdict.culprit_ranks) == ("slow_step", "info", (3,))


def _idle(rank: Rank) -> Rank:
    """The rank as DDP's hung backward shows it: asleep there, py-spy calling it idle."""
    return replace(rank, state="S", cpu_percent=0.0, samples=tuple(
        replace(s, threads=tuple(replace(t, active=False) for t in s.threads))
        for s in rank.samples))


def test_its_liar_a_rank_idle_in_backward_waits_in_a_collective() -> None:
    verdict = diagnose(map_rank(_stacks_only(), 3, _idle)).verdicts[0]
    assert (verdict.kind, verdict.severity) == ("mismatched_collective", "warning"), verdict.summary
    assert "backward at" in verdict.summary
