"""Scenario: DistributedDataParallel; one rank skips backward on a non-finite loss (D8, D20).

The model has BatchNorm, so DDP broadcasts its buffers from rank 0 at the start of every
forward. At step 3 rank 1's loss is inf and the loop skips the step (`continue`) before
backward; rank 1 goes on to step 4's forward and waits in DDP's buffer broadcast, while
the others wait inside loss.backward() for the gradient bucket all_reduce that rank 1 never
joined (the wait is inside autograd, DDP's reducer). Broadcast never matches all_reduce
in gloo: every rank waits until the process-group timeout.
"""

from __future__ import annotations

import _harness as harness
import _training as training
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

POISONED_BATCH = (1, 3)
STEPS = 1000


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(training.FEATURES, 32), nn.BatchNorm1d(32), nn.ReLU(),
                         nn.Linear(32, 1))


def load_batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    inputs, targets = training.synthetic_batch(rank, step)
    if (rank, step) == POISONED_BATCH:
        targets[0, 0] = float("inf")
    return inputs, targets


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = DistributedDataParallel(build_model())
    for step in range(STEPS):
        inputs, targets = load_batch(info.rank, step)
        if info.rank == POISONED_BATCH[0] and step == POISONED_BATCH[1] + 1:
            harness.report_ready(info, f"step {step}: DDP forward (buffer broadcast)",
                                 role="culprit")
        outputs = model(inputs)  # CULPRIT
        loss = nn.functional.mse_loss(outputs, targets)
        if not torch.isfinite(loss):
            harness.log(info, f"step {step}: non-finite loss, skipping the step")
            continue
        if info.rank != POISONED_BATCH[0] and step == POISONED_BATCH[1]:
            harness.report_ready(info, f"step {step}: DDP backward", role="waiting")
        loss.backward()  # WAITING
        training.sgd_update(model)
        harness.log(info, f"step {step} loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
