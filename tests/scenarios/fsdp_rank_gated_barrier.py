"""Scenario: FSDP2 training; a barrier inside a rank-0-only checkpoint save.

The model is sharded with ``fully_shard`` (each Linear a unit, then the root). Rank 0 saves
its shard of the weights every CHECKPOINT_EVERY steps (an FSDP2 state_dict holds DTensor
shards: no collective) and the save ends with a barrier "so nobody reads a half-written
file". Only rank 0 gets there: it waits in the barrier while ranks 1-3 start the next step's
forward and wait inside ``model(inputs)``, in the all-gather FSDP runs before the first
layer (its pre-forward unshard). gloo never matches a barrier with an all-gather: the job
hangs for the process-group timeout. The waiting ranks' collective is deep in FSDP's frames,
below the forward line of the training loop.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

CHECKPOINT_EVERY = 3
STEPS = 1000


def checkpoint_directory() -> Path:
    base = os.environ.get("SLURMDIAG_SCENARIO_DIR") or tempfile.gettempdir()
    directory = Path(base) / "checkpoints"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def save_checkpoint(model: torch.nn.Module, step: int, directory: Path) -> None:
    """Write this rank's shard of the weights, then make sure every rank sees the file."""
    path = directory / f"step{step:06d}-shard0.pt"
    torch.save({k: v.to_local() for k, v in model.state_dict().items()}, path)
    dist.barrier()  # CULPRIT



def train(info: harness.RankInfo) -> None:
    model = training.fully_sharded(training.build_model())
    directory = checkpoint_directory()
    for step in range(STEPS):
        inputs, targets = training.synthetic_batch(info.rank, step)
        if step == CHECKPOINT_EVERY + 1:
            harness.report_ready(info, f"step {step}: FSDP all-gather in forward", role="waiting")
        logits = model(inputs)  # WAITING
        loss = torch.nn.functional.mse_loss(logits, targets)
        loss.backward()
        training.sgd_update(model)
        harness.log(info, f"step {step} loss {loss.item():.4f}")
        if info.rank == 0 and step > 0 and step % CHECKPOINT_EVERY == 0:
            harness.report_ready(info, f"step {step}: barrier in save_checkpoint", role="culprit")
            save_checkpoint(model, step, directory)


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    train(info)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
