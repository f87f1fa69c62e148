"""Scenario (control): `pipeline_heartbeat_hang`'s pipeline, healthy: its last stage is slow.

The same four stages over point-to-point and the same health thread on every rank; the last
stage's loss head is heavy (native matrix products for ~2.5 s a micro-batch, on its main
thread). So stages 0-2 sleep in their sends and receives for seconds at a time, their peers
asleep too but for the last stage, which computes: the liar of the rule that sets apart the
data of a send or receive neither side ran for. Every rank logs each step (~10 s). It must
never get a hang verdict.
"""

from __future__ import annotations

import time

import _harness as harness
import torch
import torch.distributed as dist
from heartbeat_group_hang import start_health_check
from pipeline_heartbeat_hang import MICRO_BATCHES, ROWS, STEPS, WIDTH, build_stage, receive

#: Seconds of native maths the last stage's head takes a micro-batch.
HEAD_S = 2.5


def loss_head(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """A heavy loss head: native matrix products for HEAD_S."""
    until = time.monotonic() + HEAD_S
    while time.monotonic() < until:
        x = torch.tanh(x @ weight)
    return x


def pipeline_step(info: harness.RankInfo, weights: list[torch.Tensor], step: int) -> float:
    rank, last = info.rank, info.world_size - 1
    shape = (ROWS, WIDTH)
    outputs, loss = [], 0.0
    for micro in range(MICRO_BATCHES):
        x = (torch.randn(shape, generator=torch.Generator().manual_seed(step * 97 + micro))
             if rank == 0 else receive(shape, rank - 1))
        for weight in weights:
            x = torch.tanh(x @ weight)
        if rank < last:
            dist.send(x, dst=rank + 1)
        else:
            x = loss_head(x, weights[0])
            loss += float(x.pow(2).mean())
        outputs.append(x)
    for micro in reversed(range(MICRO_BATCHES)):
        grad = (outputs[micro] * 2.0 / outputs[micro].numel() if rank == last
                else receive(shape, rank + 1))
        for weight in reversed(weights):
            grad = (grad * 0.5) @ weight.T
        if rank > 0:
            dist.send(grad, dst=rank - 1)
    return loss / MICRO_BATCHES


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    start_health_check()
    weights = build_stage(info.rank)
    for step in range(STEPS):
        if step == 1:
            harness.report_ready(info, "pipeline steps", role="healthy")
        loss = pipeline_step(info, weights, step)
        harness.log(info, f"step {step} loss {loss:.4f}")


if __name__ == "__main__":
    main()
