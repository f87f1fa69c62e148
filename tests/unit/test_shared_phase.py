"""Most ranks computing in one function while fewer wait for them: a slow step, not a spin.

Real input: a recorded look (`make accuracy`, defaults, session 31's full run) at the control
`healthy_object_broadcast` (tests/scenarios/healthy_object_broadcast.json): ranks 1-3 unpickle
the dict rank 0 broadcast (one `pickle.loads`, a C call holding the GIL, at one line for the
whole look) while rank 0, the sender, waits in the step's gradient all_reduce. It was a critical
`spinning` on ranks 1-3: a false alarm on a healthy job. Two more recorded looks: the control
`healthy_shared_python_phase` with `--samples 1` (three ranks at two lines of one function) and
`majority_spinning` with the defaults (three ranks whose lines move inside one function, which
was read as progress). Each variation is one that would make the rule lie.
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


def test_ranks_busy_in_different_functions_stay_spinning():
    # GIVEN rank 3 busy at the same line but in another function than ranks 1-2: no one phase
    # they share
    snapshot = recorded()

    def moved(rank):  # type: ignore[no-untyped-def]
        if rank.rank != 3:
            return rank
        samples = []
        for sample in rank.samples:
            threads = tuple(
                replace(t, frames=tuple(replace(f, function="merge_plans") if f.line == 46 else f
                                        for f in t.frames)) for t in sample.threads)
            samples.append(replace(sample, threads=threads))
        return replace(rank, samples=tuple(samples))

    snapshot = replace(snapshot, nodes=tuple(
        replace(n, ranks=tuple(moved(r) for r in n.ranks)) for n in snapshot.nodes))
    verdict = top(snapshot)
    assert verdict.kind == "spinning" and 3 in verdict.culprit_ranks


def test_ranks_at_different_lines_of_one_function_share_its_phase():
    # GIVEN a recorded `--samples 1` look at the control healthy_shared_python_phase: ranks 1
    # and 3 at line 29 of `normalised` (rank 1 inside its list comprehension), rank 2 at
    # line 30, rank 0 in the gradient all_reduce; it was a `spinning` warning on ranks 1-3
    snapshot = Snapshot.from_json(
        (ACCURACY / "healthy_shared_python_phase.samples1.two_lines.json").read_text())
    verdict = top(snapshot)
    assert (verdict.kind, verdict.severity) == ("slow_step", "info")
    assert verdict.culprit_ranks == (1, 2, 3)
    assert any(site.endswith("healthy_shared_python_phase.py:normalised") for site in verdict.sites)
    assert any("ranks 1-3 compute in one function (" in e and "normalised) while fewer" in e
               for e in verdict.evidence)


def test_a_script_top_level_is_no_one_phase():
    # GIVEN the same look with the ranks' work at a script's top level (no function): its
    # lines, 29 and 30, are two places
    snapshot = Snapshot.from_json(
        (ACCURACY / "healthy_shared_python_phase.samples1.two_lines.json").read_text())
    snapshot = replace(snapshot, nodes=tuple(replace(n, ranks=tuple(
        replace(r, samples=tuple(replace(sample, threads=tuple(replace(t, frames=tuple(
            replace(f, function="<module>") if f.function.startswith("normalised") else f
            for f in t.frames)) for t in sample.threads)) for sample in r.samples))
        for r in n.ranks)) for n in snapshot.nodes))
    verdict = top(snapshot)
    assert verdict.kind == "spinning" and verdict.culprit_ranks == (1, 2, 3)


def test_lines_moving_inside_one_function_are_no_progress():
    # GIVEN a recorded look with the defaults at majority_spinning: ranks 1-3 redraw in
    # `while not kept:` of deduplicated_ids (their lines and comprehension frames change
    # between samples, no collective entered or left), rank 0 waits in the all_reduce; it
    # was "progressing, not hung: 3 of 4 ranks changed stack between samples"
    verdict = top(Snapshot.from_json((ACCURACY / "majority_spinning.default.json").read_text()))
    assert (verdict.kind, verdict.severity) == ("slow_step", "info")
    assert verdict.culprit_ranks == (1, 2, 3)
    assert verdict.sites == (f"{verdict.sites[0].rpartition(':')[0]}:deduplicated_ids",)
    assert verdict.sites[0].endswith("majority_spinning.py:deduplicated_ids")


def test_lines_moving_in_several_functions_stay_progress():
    # GIVEN the same look with rank 3's samples in another function of the job: the ranks
    # do not share one loop, and their moving is read as work going on
    snapshot = Snapshot.from_json((ACCURACY / "majority_spinning.default.json").read_text())

    def elsewhere(rank):  # type: ignore[no-untyped-def]
        if rank.rank != 3:
            return rank
        return replace(rank, samples=tuple(replace(sample, threads=tuple(replace(t, frames=tuple(
            replace(f, function=f.function.replace("deduplicated_ids", "pack_sequences"))
            for f in t.frames)) for t in sample.threads)) for sample in rank.samples))

    snapshot = replace(snapshot, nodes=tuple(
        replace(n, ranks=tuple(elsewhere(r) for r in n.ranks)) for n in snapshot.nodes))
    verdict = top(snapshot)
    assert verdict.kind == "progressing"
    assert verdict.summary.endswith("3 of 4 ranks changed stack between samples")


def test_lines_moving_with_no_rank_waiting_stay_progress():
    # GIVEN the same look without rank 0, in a world of 3: every rank in the one function,
    # none waiting for them (a job's shared Python phase, all of it at work)
    snapshot = Snapshot.from_json((ACCURACY / "majority_spinning.default.json").read_text())
    snapshot = replace(snapshot, nodes=tuple(
        replace(n, ranks=tuple(r for r in n.ranks if r.rank != 0)) for n in snapshot.nodes))
    verdict = top(snapshot)
    assert verdict.kind == "progressing"
    assert verdict.summary.endswith("3 of 3 ranks changed stack between samples")


def test_one_rank_computing_while_the_rest_wait_stays_spinning():
    # GIVEN the recorded spinning_rank look: rank 3 in its endless loop, ranks 0-2 waiting
    verdict = top(Snapshot.from_json((ACCURACY / "spinning_rank.look.json").read_text()))
    assert verdict.kind == "spinning" and verdict.culprit_ranks == (3,)


def test_lines_moving_inside_one_function_on_gpu_nodes_are_a_spin():
    # GIVEN majority_spinning's look on nodes with GPUs: no shared phase is read there (a hung
    # NCCL collective shows as ranks busy at the next sync), and the moving lines are no
    # progress either: the three ranks are named, critical
    gpus = GpuState(status="ok", gpus=(Gpu(index=0, uuid="GPU-0", utilization_gpu=100.0),))
    snapshot = Snapshot.from_json((ACCURACY / "majority_spinning.default.json").read_text())
    snapshot = replace(snapshot, nodes=tuple(replace(n, gpus=gpus) for n in snapshot.nodes))
    verdict = top(snapshot)
    assert (verdict.kind, verdict.severity) == ("spinning", "critical")
    assert verdict.culprit_ranks == (1, 2, 3)
