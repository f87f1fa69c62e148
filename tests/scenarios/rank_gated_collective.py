"""Scenario: a collective hidden inside a rank-0-only checkpoint save (taxonomy D21, D23).

Rank 0 saves a checkpoint every CHECKPOINT_EVERY steps, and save_checkpoint ends with a
barrier "so nobody reads a half-written file". Only rank 0 ever gets there: it waits in that
barrier while every other rank waits in the next step's gradient all_reduce. gloo never
matches a barrier with an all_reduce, so the job hangs for the process-group timeout.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import _harness as harness
import _training as training
import torch
import torch.distributed as dist
from torch import nn

CHECKPOINT_EVERY = 3
STEPS = 1000


def checkpoint_directory() -> Path:
    base = os.environ.get("SLURMDIAG_SCENARIO_DIR") or tempfile.gettempdir()
    directory = Path(base) / "checkpoints"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def save_checkpoint(model: nn.Module, step: int, directory: Path) -> None:
    """Write the weights atomically, then make sure every rank sees the file."""
    path = directory / f"step{step:06d}.pt"
    tmp = path.with_suffix(".tmp")
    torch.save(model.state_dict(), tmp)
    os.replace(tmp, path)
    dist.barrier()  # CULPRIT


def train(info: harness.RankInfo) -> None:
    model = training.build_model()
    directory = checkpoint_directory()
    for step in range(STEPS):
        if step == CHECKPOINT_EVERY + 1:
            harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
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
