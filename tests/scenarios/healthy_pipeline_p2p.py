"""Scenario (control): a healthy pipeline-parallel job, each rank a stage, point-to-point only.

The model is cut into four stages, one a rank. Each step pushes four micro-batches through the
pipeline (GPipe's schedule: every forward, then every backward): a stage receives the
activation from the stage before it (`dist.recv`), computes its layers, and sends the result on
(`dist.send`); the backward pass runs the other way. So at any instant one or two stages
compute and the others wait in a receive or a send, each on a different line and a different
peer: no two ranks in the same call, the shape of a mismatched collective or a point-to-point
deadlock, while activations and gradients flow and every rank logs every step. It must never
get a hang verdict.
"""

from __future__ import annotations

import _harness as harness
import torch
import torch.distributed as dist

#: Rows of a micro-batch and the width of the stages' layers: ~1 MB activations, and a stage's
#: forward or backward of one micro-batch a few hundred ms of a shared core.
ROWS, WIDTH = 128, 2048
LAYERS_PER_STAGE = 6
MICRO_BATCHES = 4
#: About 30 minutes, the job's time limit.
STEPS = 600


def build_stage(rank: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(rank)
    return [torch.randn(WIDTH, WIDTH, generator=generator) / WIDTH**0.5
            for _ in range(LAYERS_PER_STAGE)]


def stage_forward(weights: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    for weight in weights:
        x = torch.tanh(x @ weight)
    return x


def stage_backward(weights: list[torch.Tensor], grad: torch.Tensor) -> torch.Tensor:
    for weight in reversed(weights):
        grad = (grad * 0.5) @ weight.T
    return grad


def receive(shape: tuple[int, int], src: int) -> torch.Tensor:
    buffer = torch.empty(shape)
    dist.recv(buffer, src=src)
    return buffer


def pipeline_step(info: harness.RankInfo, weights: list[torch.Tensor], step: int) -> float:
    """One GPipe step: every micro-batch forward through the stages, then every one backward."""
    rank, last = info.rank, info.world_size - 1
    shape = (ROWS, WIDTH)
    outputs, loss = [], 0.0
    for micro in range(MICRO_BATCHES):
        if rank == 0:
            x = torch.randn(shape, generator=torch.Generator().manual_seed(step * 97 + micro))
        else:
            x = receive(shape, rank - 1)
        y = stage_forward(weights, x)
        if rank < last:
            dist.send(y, dst=rank + 1)
        else:
            loss += float(y.pow(2).mean())
        outputs.append(y)
    for micro in reversed(range(MICRO_BATCHES)):
        grad = outputs[micro] * 2.0 / outputs[micro].numel() if rank == last else receive(shape, rank + 1)
        grad_in = stage_backward(weights, grad)
        if rank > 0:
            dist.send(grad_in, dst=rank - 1)
    return loss / MICRO_BATCHES


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    weights = build_stage(info.rank)
    for step in range(STEPS):
        loss = pipeline_step(info, weights, step)
        harness.log(info, f"step {step} loss {loss:.4f}")
        if step == 0:
            harness.report_ready(info, "pipeline steps", role="healthy")


if __name__ == "__main__":
    main()
