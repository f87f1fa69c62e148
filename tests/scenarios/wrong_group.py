"""Scenario: two new_group subgroups (evens, odds); one rank all_reduces on the wide group.

Gradients are averaged within each half (``dist.new_group`` of the even and of the odd
ranks), then every rank meets in a world barrier. At step 3 rank 4 takes a code path that
forgets ``group=``: its all_reduce runs on the world group. Ranks 0, 2, 6 wait in the evens'
all_reduce for rank 4; the odds finish theirs and wait in the world barrier, which rank 4's
world all_reduce never matches. Culprit: rank 4 only (issue 13 blamed ranks 0, 2, 4, 6).
"""

from __future__ import annotations

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

BUGGY = (4, 3)  # (rank, step) that takes the path without group=
STEPS = 1000


def average_in_half(flat: torch.Tensor, group: dist.ProcessGroup, info: harness.RankInfo,
                    step: int) -> None:
    if (info.rank, step) == BUGGY:
        harness.report_ready(info, f"step {step}: all_reduce without group=", role="culprit")
        dist.all_reduce(flat)  # CULPRIT
        return
    if step == BUGGY[1] and info.rank % 2 == 0:
        harness.report_ready(info, f"step {step}: evens' all_reduce", role="waiting")
    dist.all_reduce(flat, group=group)  # WAITING


def train(info: harness.RankInfo) -> None:
    evens = dist.new_group(list(range(0, info.world_size, 2)))
    odds = dist.new_group(list(range(1, info.world_size, 2)))
    half = evens if info.rank % 2 == 0 else odds
    model = training.build_model()
    for step in range(STEPS):
        loss = training.compute_loss(model, training.synthetic_batch(info.rank, step))
        loss.backward()
        flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        average_in_half(flat, half, info, step)
        training.sgd_update(model)
        if step == BUGGY[1] and info.rank % 2 == 1:
            harness.report_ready(info, f"step {step}: world barrier", role="waiting")
        dist.barrier()  # WAITING
        harness.log(info, f"step {step} loss {loss.item():.4f}")


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    train(info)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
