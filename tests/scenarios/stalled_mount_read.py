"""Scenario: one node's mount of the dataset stops answering (a hung NFS or Lustre client).

Every step each rank reads its next shard of the dataset from a network file system. From step
3 on, the reads of the second node's ranks (2 and 3) are never answered: their main threads wait
in the kernel inside read(), interruptible at first and uninterruptible (state D) once anything
interrupts them (a signal, a debugger or py-spy attaching), while ranks 0-1 wait in the gradient
all_reduce. No Python bug: the fix is on the node (its kernel log, the mount), not in the code.

The harness mounts the file system (tests/scenarios/_stalled_mount.py, a FUSE server outside the
job) at $SLURMDIAG_SCENARIO_DIR/dataset before the job starts; on one host it cannot stall one
node's client alone, so it stalls the requests for ranks 2 and 3's shards.
"""

from __future__ import annotations

import os
from pathlib import Path

import _harness as harness
import _training as training
import torch.distributed as dist

#: the step from which the second node's reads hang (the truth's "stalled_mount")
STALL_STEP = 3
STEPS = 1000


def dataset_directory() -> Path:
    return Path(os.environ["SLURMDIAG_SCENARIO_DIR"]) / "dataset"


def read_shard(directory: Path, rank: int, step: int) -> bytes:
    """This step's shard of this rank's part of the dataset."""
    with open(directory / f"shard-{rank}-{step:04d}.bin", "rb") as handle:
        return handle.read()  # CULPRIT


def train(info: harness.RankInfo) -> None:
    model = training.build_model()
    directory = dataset_directory()
    for step in range(STEPS):
        if step == STALL_STEP:
            if info.rank >= 2:
                harness.report_ready(info, f"step {step}: read of its shard", role="culprit")
            else:
                harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
        shard = read_shard(directory, info.rank, step)
        loss = training.train_step(model, training.synthetic_batch(info.rank, step + len(shard)))
        harness.log(info, f"step {step} loss {loss:.4f}")


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    train(info)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
