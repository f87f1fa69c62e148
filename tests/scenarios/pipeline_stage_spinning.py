"""Scenario: pipeline parallel with torch.distributed.pipelining; the last stage spins in its loss.

Four ranks, one pipeline stage each (``PipelineStage`` around a block of the model, shapes given
up front), run by ``ScheduleGPipe`` over four microbatches: every step is a fill of forwards
then a drain of backwards, each stage handing activations forward and gradients back through
batched p2p sends and receives (``_batch_p2p``/``_wait_batch_p2p`` in the schedule). The last
stage computes the loss. At step 3 its loss guard, which redraws label noise until the targets
are finite, meets a microbatch whose targets are all NaN and redraws for ever (100% CPU, the
line moving). Stages 0-2 wait for it inside ``schedule.step()``: stage 2 for the gradient it
should send back, stages 0-1 for theirs in turn, each in the schedule's wait of its batched
receives: no collective of the c10d API in their stacks.
"""

from __future__ import annotations

import math
import random

import _harness as harness
import _training as training
import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

MICROBATCHES = 4
NAN_TARGETS = 3  # the step whose targets are all NaN on the last stage
STEPS = 1000


def finite_targets(targets: torch.Tensor, rng: random.Random) -> torch.Tensor:  # CULPRIT
    """Label noise for the regression targets, redrawn until every target is finite."""
    values = targets.reshape(-1).tolist()
    while True:
        noisy = [v + rng.gauss(0.0, 0.01) for v in values]
        if all(math.isfinite(v) for v in noisy):
            return torch.tensor(noisy).reshape(targets.shape)


def build_stage(info: harness.RankInfo) -> PipelineStage:
    torch.manual_seed(info.rank)
    block = torch.nn.Sequential(torch.nn.Linear(training.FEATURES, training.FEATURES),
                                torch.nn.ReLU())
    micro = training.BATCH_SIZE // MICROBATCHES
    example = torch.empty(micro, training.FEATURES)
    # every shape given (static mode): inferring them sends pickled metadata (numpy's)
    return PipelineStage(block, info.rank, info.world_size, torch.device("cpu"),
                         input_args=(example,), output_args=(example,),
                         input_grads=(example,), output_grads=(example,))


def train(info: harness.RankInfo) -> None:
    stage = build_stage(info)
    rng = random.Random(info.rank)

    def loss_fn(output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.mse_loss(output, finite_targets(targets, rng))

    schedule = ScheduleGPipe(stage, n_microbatches=MICROBATCHES, loss_fn=loss_fn)
    last = info.rank == info.world_size - 1
    for step in range(STEPS):
        inputs, _ = training.synthetic_batch(0, step)
        targets = inputs.clone()
        if step == NAN_TARGETS:
            targets.fill_(float("nan"))
            role = "culprit" if last else "waiting"
            harness.report_ready(info, f"step {step}: " + (
                "loss guard" if last else "pipeline p2p wait"), role=role)
        if info.rank == 0:
            schedule.step(inputs)  # WAITING
        elif last:
            schedule.step(target=targets, losses=[])
        else:
            schedule.step()  # WAITING
        harness.log(info, f"step {step}")


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    train(info)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
