"""Ranks that run different programs and wait in one collective through the same code.

Real input: the recorded snapshot of `multi_prog_mismatch` (tests/scenarios/multi_prog_mismatch.json,
`make accuracy`, --samples 1): `srun --multi-prog` gives task 0 tests/scenarios/_multi_prog_leader.py,
which calls mismatched_collectives.train; tasks 1-3 run mismatched_collectives.py; rank 1 waits in
all_gather, ranks 0, 2, 3 in the gradient all_reduce. Rank 0's outer frames are its own program's,
and it was taken for a second side of the disagreement. Its liar: the same stacks with rank 0's
outer frames in the job's own program (one program, another caller): those stay apart.
"""

from __future__ import annotations

import json
from pathlib import Path

from slurmdiag.analysis import diagnose
from slurmdiag.snapshot import Snapshot

ACCURACY = Path(__file__).resolve().parent.parent / "fixtures" / "accuracy"
RECORDED = ACCURACY / "multi_prog_mismatch.samples1.json"
LEADER = "tests/scenarios/_multi_prog_leader.py"
PROGRAM = "tests/scenarios/mismatched_collectives.py"


def top(data: dict):  # type: ignore[no-untyped-def]
    return diagnose(Snapshot.from_json(json.dumps(data))).verdicts[0]


def recorded() -> dict:
    return json.loads(RECORDED.read_text())


def rank_frames(data: dict, number: int):  # type: ignore[no-untyped-def]
    for node in data["nodes"]:
        for rank in node["ranks"]:
            if rank["rank"] == number:
                for sample in rank["samples"]:
                    for thread in sample["threads"] or ():
                        yield from thread["frames"]


def test_the_recording_is_of_two_programs():
    data = recorded()
    leader = {f["file"] for f in rank_frames(data, 0)}
    assert any(f.endswith(LEADER) for f in leader)
    assert not any(f["file"].endswith(LEADER) for r in (1, 2, 3) for f in rank_frames(data, r))


def test_a_rank_of_another_program_at_the_same_call_waits_with_its_peers():
    verdict = top(recorded())
    assert verdict.kind == "mismatched_collective"
    assert verdict.culprit_ranks == (1,)
    assert verdict.summary.startswith("rank 1 waits in all_gather at ")
    assert "while ranks 0,2-3 wait in all_reduce at " in verdict.summary
    assert any(line.startswith("rank 0 runs another program (")
               and LEADER in line and "counted with them" in line for line in verdict.evidence)


def test_one_program_with_another_caller_stays_apart():
    # GIVEN rank 0's outer frames moved into the job's own program (a second caller of the
    # shared training code in the same file): no other program, so nothing is merged
    data = recorded()
    for frame in rank_frames(data, 0):
        if frame["file"].endswith(LEADER):
            frame["file"] = frame["file"][: -len(LEADER)] + PROGRAM
            frame["function"] = "leader_" + frame["function"]
    verdict = top(data)
    # THEN rank 0 is a side of its own again, as before the rule
    assert verdict.kind == "mismatched_collective"
    assert 0 in verdict.culprit_ranks and 1 in verdict.culprit_ranks
    assert not any("another program" in line for line in verdict.evidence)


def test_two_programs_that_part_inside_shared_code_stay_apart():
    # GIVEN rank 0 reaches the all_reduce through another line of the shared training code
    # (its caller in mismatched_collectives.py moved): the shared frames end at the
    # collective's own caller and the tails share that file: not the same call
    data = recorded()
    for frame in rank_frames(data, 0):
        if frame["file"].endswith(PROGRAM) and frame["function"] == "train":
            frame["line"] += 1
    verdict = top(data)
    assert 0 in verdict.culprit_ranks
    assert not any("another program" in line for line in verdict.evidence)
