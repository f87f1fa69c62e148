"""Scenario (control): a healthy job bound by its input pipeline. It must never be flagged.

Each rank reads batches through a DataLoader with two worker processes whose decoding is slow
(a pure-Python loop, ~0.6 s of CPU a batch). The main thread spends most of each step waiting
for the next batch in the DataLoader, idle, while the workers compute; then the gradient
all_reduce, and one log line a step. In a sample every rank's main thread sits in the same
DataLoader wait: only the workers' CPU and the steps say the job moves.
"""

from __future__ import annotations

import _harness as harness
import _training as training
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

DECODE_ROUNDS = 6_000_000  # ~3 s of one core in CPython
STEPS = 100_000


class SlowShard(Dataset):
    """This rank's records, each decoded by a slow pure-Python routine."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def __len__(self) -> int:
        return STEPS

    def __getitem__(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        decode_record(step)
        return training.synthetic_batch(self.rank, step)


def decode_record(step: int) -> int:
    """The slow decoder (it ends): a checksum over DECODE_ROUNDS rounds."""
    checksum = step
    for i in range(DECODE_ROUNDS):
        checksum = (checksum * 31 + i) & 0xFFFF
    return checksum


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    loader = DataLoader(SlowShard(info.rank), batch_size=None, num_workers=2,
                        persistent_workers=True)
    batches = iter(loader)
    harness.train_healthy(info, range(STEPS), lambda step: next(batches))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
