"""Scenario: a renamed main thread, a DataLoader with persistent workers, one rank out of data.

The training script names its main thread (``threading.current_thread().name = "trainer"``,
as frameworks and user code do) and reads batches through a DataLoader with one persistent
worker process, so each rank also holds multiprocessing's idle QueueFeederThread. Rank 5's
shard is three batches long: it leaves the loop and waits in the final barrier while the
other seven ranks wait in the next step's gradient all_reduce (barrier vs all_reduce never
match in gloo). Regression test for a verdict that judged every rank by its idle feeder
thread (issue 13).
"""

from __future__ import annotations

import threading

import _harness as harness
import _training as training
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

SHORT_RANK = 5
SHORT_BATCHES = 3
BATCHES = 100_000


class Shard(Dataset):
    """This rank's shard of a synthetic regression set, one batch per item."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.length = SHORT_BATCHES if rank == SHORT_RANK else BATCHES

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return training.synthetic_batch(self.rank, index)


def train(info: harness.RankInfo) -> None:
    model = training.build_model()
    loader = DataLoader(Shard(info.rank), batch_size=None, num_workers=1,
                        persistent_workers=True)
    for step, batch in enumerate(loader):
        if step == SHORT_BATCHES:
            harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
        loss = training.train_step(model, batch)
        harness.log(info, f"step {step} loss {loss:.4f}")
    harness.report_ready(info, "end of data: final barrier", role="culprit")
    dist.barrier()  # CULPRIT


def main() -> None:
    threading.current_thread().name = "trainer"
    info = harness.setup()
    harness.init_distributed(info)
    train(info)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
