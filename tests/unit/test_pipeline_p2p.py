"""Pipeline-parallel ranks waiting in their schedule's point-to-point sends and receives
(`pipeline_stage_spinning`, recorded by `make accuracy`): torch.distributed.pipelining's
ScheduleGPipe waits for the works of batch_isend_irecv in ``_wait_batch_p2p``, with no c10d
frame above it. Those ranks were "blocked on a lock, outside any collective" and blamed as
stragglers in place of the last stage, which spins in its loss guard."""

from __future__ import annotations

from snapfactory import recorded

from slurmdiag.analysis import diagnose
from slurmdiag.analysis.stacks import PIPELINE_P2P, classify_frame, function_site
from slurmdiag.snapshot import Frame

SCHEDULES = "/venv/lib/python3.11/site-packages/torch/distributed/pipelining/schedules.py"


def test_a_pipeline_schedules_p2p_wait_is_a_collective_wait() -> None:
    # GIVEN the recorded look: stages 0-2 in _wait_batch_p2p, stage 3 spinning
    verdict = diagnose(recorded("pipeline_stage_spinning.default")).verdicts[0]
    # THEN the spinning stage is the culprit, the others wait for it in the pipeline's p2p
    assert verdict.kind == "spinning" and verdict.culprit_ranks == (3,)
    assert "ranks 0-2 wait in collectives" in verdict.summary and PIPELINE_P2P in verdict.summary
    # AND its site is the function it spins in, not the list comprehension's own frame
    assert verdict.sites[0].endswith("pipeline_stage_spinning.py:finite_targets")


def test_p2p_frames_of_the_pipeline_libraries_are_collective_and_nothing_else_is() -> None:
    def kind(file: str, function: str) -> str:
        return classify_frame(Frame(file=file, function=function, line=1)).kind

    assert kind(SCHEDULES, "_wait_batch_p2p") == "collective"
    megatron = "/src/Megatron-LM/megatron/core/pipeline_parallel/p2p_communication.py"
    assert kind(megatron, "recv_forward") == "collective"
    # the schedule's own step, and a user's function named like a p2p call, are not
    assert kind(SCHEDULES, "ScheduleGPipe._step_microbatches") != "collective"
    assert kind("/home/u/train.py", "wait_batch_p2p") == "user"


def test_a_comprehension_frame_is_sited_as_its_function() -> None:
    def site(function: str) -> str:
        return function_site(Frame(file="t.py", function=function, line=3))

    assert site("finite_targets.<locals>.<listcomp>") == "t.py:finite_targets"
    assert site("Loader.build.<locals>.<genexpr>") == "t.py:Loader.build"
    assert site("f.<locals>.<listcomp>.<listcomp>") == "t.py:f"  # nested (Python 3.11's name)
    # a lambda is a function of its own; an unqualified comprehension keeps its name
    assert site("f.<locals>.<lambda>") == "t.py:f.<locals>.<lambda>"
    assert site("<listcomp>") == "t.py:<listcomp>"
