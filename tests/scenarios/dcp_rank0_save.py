"""Scenario: torch.distributed.checkpoint called by rank 0 alone (a collective inside a library).

The training saves with torch.distributed.checkpoint (DCP) every CHECKPOINT_EVERY steps,
guarded by ``if rank == 0`` as a torch.save was before it. DCP's save is a collective: it
plans the checkpoint across ranks (the ranks' plans gathered on the coordinator) before
any file is written. Rank 0 waits inside DCP's planning collective, in torch's own frames,
while the others wait in the next step's gradient all_reduce. The culprit's own line is the
``dcp.save`` call; every frame below it is the library's.
"""

from __future__ import annotations

import _harness as harness
import _training as training
import rank_gated_collective
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn

CHECKPOINT_EVERY = 3
STEPS = 1000


def save_checkpoint(model: nn.Module, step: int) -> None:
    directory = rank_gated_collective.checkpoint_directory() / f"dcp-step{step:06d}"
    dcp.save({"model": model.state_dict()}, checkpoint_id=str(directory))  # CULPRIT


def train(info: harness.RankInfo) -> None:
    model = training.build_model()
    for step in range(STEPS):
        if step == CHECKPOINT_EVERY + 1:
            harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
        if info.rank == 0 and step > 0 and step % CHECKPOINT_EVERY == 0:
            harness.report_ready(info, f"step {step}: dcp.save", role="culprit")
            save_checkpoint(model, step)


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    train(info)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
