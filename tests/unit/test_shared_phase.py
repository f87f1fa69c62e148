"""Most ranks computing at one line while fewer wait for them: a slow step, not a spin.

Real input: a recorded look (`make accuracy`, defaults, session 31's full run) at the control
`healthy_object_broadcast` (tests/scenarios/healthy_object_broadcast.json): ranks 1-3 unpickle
the dict rank 0 broadcast (one `pickle.loads`, a C call holding the GIL, at one line for the
whole look) while rank 0, the sender, waits in the step's gradient all_reduce. It was a critical
`spinning` on ranks 1-3: a false alarm on a healthy job. Each variation is one that would make
the rule lie.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from slurmdiag.analysis import diagnose
from slurmdiag.snapshot import Gpu, GpuState, Snapshot

ACCURACY = Path(__file__).resolve().parent.parent / "fixtures" / "accuracy"


def recorded() -> Snapshot:
    return Snapshot.from_json((ACCURACY / "healthy_object_broadcast.default.spinning.json").read_text())


def top(snapshot: Snapshot):  # type: ignore[no-untyped-def]
    return diagnose(snapshot).verdicts[0]


def test_most_ranks_at_one_line_the_sender_waiting_is_a_slow_step():
    verdict = top(recorded())
    assert (verdict.kind, verdict.severity) == ("slow_step", "info")
    assert verdict.summary.startswith("a slow step or a hang, cannot tell: ranks 1-3 are busy")
    assert verdict.culprit_ranks == (1, 2, 3)
    assert any("while fewer, rank 0, waits for them in all_reduce" in e for e in verdict.evidence)


def test_on_gpu_nodes_the_same_sight_stays_spinning():
    # GIVEN the same look on nodes with GPUs: ranks busy at the next sync while the rest wait
    # is how a hung NCCL collective shows there
    gpus = GpuState(status="ok", gpus=(Gpu(index=0, uuid="GPU-0", utilization_gpu=100.0),))
    snapshot = recorded()
    snapshot = replace(snapshot, nodes=tuple(replace(n, gpus=gpus) for n in snapshot.nodes))
    verdict = top(snapshot)
    assert verdict.kind == "spinning" and verdict.culprit_ranks == (1, 2, 3)


def test_ranks_busy_at_different_lines_stay_spinning():
    # GIVEN rank 3 busy one line further on than ranks 1-2: no one phase they share
    snapshot = recorded()

    def moved(rank):  # type: ignore[no-untyped-def]
        if rank.rank != 3:
            return rank
        samples = []
        for sample in rank.samples:
            threads = tuple(
                replace(t, frames=tuple(replace(f, line=f.line + 1) if f.line == 46 else f
                                        for f in t.frames)) for t in sample.threads)
            samples.append(replace(sample, threads=threads))
        return replace(rank, samples=tuple(samples))

    snapshot = replace(snapshot, nodes=tuple(
        replace(n, ranks=tuple(moved(r) for r in n.ranks)) for n in snapshot.nodes))
    verdict = top(snapshot)
    assert verdict.kind == "spinning" and 3 in verdict.culprit_ranks


def test_one_rank_computing_while_the_rest_wait_stays_spinning():
    # GIVEN the recorded spinning_rank look: rank 3 in its endless loop, ranks 0-2 waiting
    verdict = top(Snapshot.from_json((ACCURACY / "spinning_rank.look.json").read_text()))
    assert verdict.kind == "spinning" and verdict.culprit_ranks == (3,)
