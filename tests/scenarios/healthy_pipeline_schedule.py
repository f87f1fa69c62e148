"""Scenario (control): a healthy pipeline-parallel job run by torch.distributed.pipelining.

Four ``PipelineStage``s, one a rank, each six 2048-wide layers, run by ``ScheduleGPipe`` over
four micro-batches (shapes given up front): every forward, then every backward, activations
and gradients handed on through the schedule's batched sends and receives. A stage's forward
or backward of one micro-batch is a few hundred ms of a shared core, so at any instant one or
two stages compute and the others wait in the schedule's ``_wait_batch_p2p`` (the pipeline's
bubble), the shape of pipeline_stage_spinning, while data flows and every rank logs every
step. It must never get a hang verdict.
"""

from __future__ import annotations

import _harness as harness
import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

#: Rows of a micro-batch and the width of the stages' layers: ~1 MB activations.
ROWS, WIDTH = 128, 2048
LAYERS_PER_STAGE = 6
MICRO_BATCHES = 4
#: About 30 minutes, the job's time limit.
STEPS = 600


def build_stage(info: harness.RankInfo) -> PipelineStage:
    torch.manual_seed(info.rank)
    layers: list[torch.nn.Module] = []
    for _ in range(LAYERS_PER_STAGE):
        layers += [torch.nn.Linear(WIDTH, WIDTH, bias=False), torch.nn.Tanh()]
    example = torch.empty(ROWS, WIDTH)
    # every shape given (static mode): inferring them sends pickled metadata (numpy's)
    return PipelineStage(torch.nn.Sequential(*layers), info.rank, info.world_size,
                         torch.device("cpu"), input_args=(example,), output_args=(example,),
                         input_grads=(example,), output_grads=(example,))


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    stage = build_stage(info)
    schedule = ScheduleGPipe(stage, n_microbatches=MICRO_BATCHES,
                             loss_fn=lambda output, target: output.pow(2).mean())
    last = info.rank == info.world_size - 1
    for step in range(STEPS):
        if step == 1:
            harness.report_ready(info, "training", role="healthy")
        inputs = torch.randn(ROWS * MICRO_BATCHES, WIDTH,
                             generator=torch.Generator().manual_seed(step))
        losses: list[torch.Tensor] = []
        if info.rank == 0:
            schedule.step(inputs)
        elif last:
            schedule.step(target=inputs, losses=losses)
        else:
            schedule.step()
        loss = float(sum(losses)) / MICRO_BATCHES if losses else 0.0
        harness.log(info, f"step {step} loss {loss:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
