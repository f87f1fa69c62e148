"""Ranks computing outside the groups the waiting ranks wait on are not what they wait for
(`healthy_eval_rank`, a real one-sample look with `--samples 1 --strace 0`).

Ranks 0-2 train on ``new_group([0, 1, 2])``; rank 3 evaluates and waits in a broadcast on
``new_group([0, 3])`` for the weights rank 0 sends every 4 steps. The look caught ranks 0-2 in
their step's matrix products (native code, the GIL released) and rank 3 in the broadcast: "ranks
0-2 are busy in their own code while rank 3 waits in broadcast", spinning, a warning on a healthy
job. The ranks' locals say who is in which group (rank 3's ``trainers`` is -100, so are ranks
1-2's ``evaluation``): only rank 0 can be what rank 3 waits for, and one rank preparing what it
broadcasts to one other is a rank-gated phase, said and not alarmed on."""

from __future__ import annotations

from dataclasses import replace

from snapfactory import map_rank, recorded

from slurmdiag.analysis import diagnose
from slurmdiag.snapshot import Rank, Sample

LOOK = "healthy_eval_rank.samples1"


def test_trainers_outside_the_evaluators_group_are_not_blamed() -> None:
    verdict = diagnose(recorded(LOOK)).verdicts[0]
    assert (verdict.kind, verdict.severity, verdict.culprit_ranks) == ("slow_step", "info", (0,))
    assert verdict.summary.startswith("a rank-gated phase or a hang, cannot tell: rank 0 ")
    assert "rank 3 waits in broadcast" in verdict.summary


def _groups(sample: Sample, change) -> Sample:
    return replace(sample, groups=tuple((i, name, change(name, text)) for i, name, text in sample.groups))


def _member_of_everything(rank: Rank) -> Rank:
    """The rank as one holding a group in every variable: its -100s replaced by a group."""
    pg = "<torch._C._distributed_c10d.ProcessGroup at 0x7f0000000001>"
    return replace(rank, samples=tuple(
        _groups(s, lambda name, text: pg if text == "-100" else text) for s in rank.samples))


def test_its_liar_groups_not_read_every_busy_rank_stays_a_suspect() -> None:
    # WHEN ranks 1-2 hold a group in `evaluation` too, no variable records who is a member
    snapshot = recorded(LOOK)
    for number in (1, 2):
        snapshot = map_rank(snapshot, number, _member_of_everything)
    verdict = diagnose(snapshot).verdicts[0]
    # THEN nothing proves ranks 1-2 are not awaited: the three busy ranks, one waiter, as before
    assert (verdict.kind, verdict.severity, verdict.culprit_ranks) == ("spinning", "warning", (0, 1, 2))


def _in_all_reduce(rank: Rank) -> Rank:
    """The evaluator as waiting in an all_reduce over its group instead (no root)."""
    def frames(thread):
        return tuple(replace(f, function="all_reduce") if f.function == "broadcast" else f
                     for f in thread.frames)
    return replace(rank, samples=tuple(
        replace(s, threads=tuple(replace(t, frames=frames(t)) for t in s.threads))
        for s in rank.samples))


def test_its_liar_a_rank_late_for_an_unrooted_collective_with_one_other_is_no_gated_phase() -> None:
    # WHEN rank 3 waits in an all_reduce with rank 0 (a step's own collective, no root)
    verdict = diagnose(map_rank(recorded(LOOK), 3, _in_all_reduce)).verdicts[0]
    # THEN the one rank it waits for is still named, not as a rank-gated phase: one rank
    # computing in native code (the GIL released) for one waiting is a step longer than the
    # look, as one for three is (slow_but_moving)
    assert (verdict.kind, verdict.severity, verdict.culprit_ranks) == ("slow_step", "info", (0,))
    assert not verdict.summary.startswith("a rank-gated phase"), verdict.summary
    assert "rank 3 waits in all_reduce" in verdict.summary


def _holding_the_gil(rank: Rank) -> Rank:
    """The rank as one computing in Python: its main thread holds the GIL."""
    return replace(rank, samples=tuple(
        replace(s, threads=tuple(replace(t, owns_gil=True) for t in s.threads))
        for s in rank.samples))


def test_and_its_liar_the_same_rank_computing_in_python_is_spinning() -> None:
    # WHEN rank 0 holds the GIL instead (a loop in Python, as a spin does)
    snapshot = map_rank(map_rank(recorded(LOOK), 3, _in_all_reduce), 0, _holding_the_gil)
    verdict = diagnose(snapshot).verdicts[0]
    # THEN it is the spin rule's again
    assert (verdict.kind, verdict.severity, verdict.culprit_ranks) == ("spinning", "warning", (0,))


def test_the_terminal_says_why_it_is_unsure_only_when_the_analysis_said_it() -> None:
    from slurmdiag.report.terminal import format_summary

    # a short look that cannot tell a rank-gated phase from a hang, on the job's own frames:
    # unsure, and not for want of the job's frames (it said so for every low confidence)
    snapshot = recorded(LOOK)
    lines = format_summary(snapshot, diagnose(snapshot), color=False, report_path=None)
    assert any(line.startswith("INFO slow_step (low confidence)") for line in lines), lines
    assert not any("no frame of the job's own code" in line for line in lines)


TRAINERS_PG = "<torch._C._distributed_c10d.ProcessGroup at 0x7f00000000a0>"
EVALUATION_PG = "<torch._C._distributed_c10d.ProcessGroup at 0x7f00000000b0>"


def _with_group_locals(rank: Rank) -> Rank:
    """The rank's first sample with the locals py-spy --locals shows: `trainers` (ranks 0-2)
    and `evaluation` (ranks 0, 3) in train_step's frame, a group or -100; a collective's
    `group` in its c10d frame."""
    first = rank.samples[0]
    frames = first.threads[0].frames
    mine = next(i for i, f in enumerate(frames) if f.function == "train_step")
    groups = [
        (mine, "trainers", TRAINERS_PG if rank.rank in (0, 1, 2) else "-100"),
        (mine, "evaluation", EVALUATION_PG if rank.rank in (0, 3) else "-100"),
    ]
    if frames[0].function == "all_reduce":
        groups.insert(0, (0, "group", TRAINERS_PG))
    return replace(rank, samples=(replace(first, groups=tuple(groups)), *rank.samples[1:]))


def _evaluator_reading(groups_read: bool):
    from snapfactory import collective, in_user, job

    s = job(2, 2, lambda r: [in_user(40) if r == 3 else collective("all_reduce")] * 3,
            overrides={3: {"wchan": "pipe_read"}})
    if groups_read:
        for number in range(4):
            s = map_rank(s, number, _with_group_locals)
    return s


def test_a_rank_blocked_outside_the_trainers_group_is_not_their_straggler() -> None:
    # GIVEN the trainers (0-2) stuck in their group's all_reduce, the evaluator (3) reading
    verdict = diagnose(_evaluator_reading(groups_read=True)).verdicts[0]
    # THEN the trainers wait for each other, not for the evaluator, which is not blamed
    assert verdict.kind == "all_waiting", verdict.summary
    assert verdict.summary.startswith("every rank of the groups waited on (0-2) waits in all_reduce")
    assert 3 not in verdict.culprit_ranks
    assert any(line.startswith("rank 3 works outside the groups the waiting ranks wait on (ranks 0-2")
               for line in verdict.evidence), verdict.evidence
    # its liar: the same stacks without the groups read: the reader is the straggler
    verdict = diagnose(_evaluator_reading(groups_read=False)).verdicts[0]
    assert (verdict.kind, verdict.culprit_ranks) == ("straggler", (3,)), verdict.summary


def test_its_liar_the_evaluator_the_trainers_wait_for_through_rank_0_stays_the_straggler() -> None:
    # eval_rank_stuck (a real look): rank 3 hangs posting its metrics; rank 0 waits for it in
    # the evaluation group's broadcast, ranks 1-2 for rank 0 in the trainers' all_reduce. Rank 3
    # is in no group ranks 1-2 wait on, but in rank 0's: it is awaited, and the culprit.
    verdict = diagnose(recorded("eval_rank_stuck.samples1")).verdicts[0]
    assert (verdict.kind, verdict.severity, verdict.culprit_ranks) == ("straggler", "warning", (3,))
    assert not any("outside the groups" in line for line in verdict.evidence)
