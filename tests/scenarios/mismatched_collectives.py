"""Scenario: ranks call different collectives: all_gather on one, all_reduce on the rest.

When the loss goes non-finite, the training loop collects every rank's loss with
all_gather to log whether the blow-up is local, then skips the step. Rank 1's batch at
step 3 holds an inf, so rank 1 calls all_gather while the other ranks go on to the gradient
all_reduce. gloo keys each message by collective kind and sequence number, so the two
never match: every rank waits until the process-group timeout.
"""

from __future__ import annotations

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

#: (rank, step) whose batch contains an inf feature.
POISONED_BATCH = (1, 3)
STEPS = 1000


def load_batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    inputs, targets = training.synthetic_batch(rank, step)
    if (rank, step) == POISONED_BATCH:
        inputs[2, 7] = float("inf")
    return inputs, targets


def report_nonfinite_loss(loss: torch.Tensor, info: harness.RankInfo, step: int) -> None:
    """Log every rank's loss so one can tell a local blow-up from a global one."""
    losses = [torch.zeros(1) for _ in range(info.world_size)]
    dist.all_gather(losses, loss.detach().reshape(1))  # CULPRIT
    harness.log(info, f"step {step}: non-finite loss; all ranks: {[t.item() for t in losses]}")


def train(info: harness.RankInfo) -> None:
    model = training.build_model()
    for step in range(STEPS):
        batch = load_batch(info.rank, step)
        loss = training.compute_loss(model, batch)
        if not torch.isfinite(loss):
            harness.report_ready(info, f"step {step}: all_gather of losses", role="culprit")
            report_nonfinite_loss(loss, info, step)
            continue
        if step == POISONED_BATCH[1]:
            harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
        loss.backward()
        training.all_reduce_gradients(model)
        training.sgd_update(model)
        harness.log(info, f"step {step} loss {loss.item():.4f}")


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    train(info)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
