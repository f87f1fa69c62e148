"""Scenario (control): a healthy job whose DataLoader workers wait on a slow remote store.

Each rank reads batches through a DataLoader with two worker processes that fetch every record
from object storage: ~2 s of latency a batch (here a sleep stands in for the network wait) and
almost no CPU. The main thread waits for the next batch, idle; its workers wait too, idle;
then the gradient all_reduce and one log line a step. In a look of a few seconds every
process of the job sleeps: only the steps say it moves (`input_bound`'s I/O-bound twin: there
the workers compute). It must never get a hang verdict.
"""

from __future__ import annotations

import time

import _harness as harness
import _training as training
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

FETCH_SECONDS = 2.0
STEPS = 100_000


class RemoteShard(Dataset):
    """This rank's records, each fetched from a slow remote store."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def __len__(self) -> int:
        return STEPS

    def __getitem__(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(FETCH_SECONDS)  # the object store's latency
        return training.synthetic_batch(self.rank, step)


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    loader = DataLoader(RemoteShard(info.rank), batch_size=None, num_workers=2,
                        persistent_workers=True)
    batches = iter(loader)
    harness.train_healthy(info, range(STEPS), lambda step: next(batches))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
