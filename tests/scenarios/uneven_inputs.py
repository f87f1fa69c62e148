"""Scenario: one rank's data shard is shorter, so it leaves the epoch early (taxonomy D9, D22).

Each rank reads every WORLD_SIZE-th record and drops records that fail validation. The
corrupt records all land in rank 2's shard, so rank 2 has one batch fewer per epoch. It
finishes the epoch and waits in the end-of-epoch barrier, while the other ranks wait inside
loss.backward() for DistributedDataParallel's gradient all_reduce of their last batch.
"""

from __future__ import annotations

import _harness as harness
import _training as training
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

NUM_RECORDS = 96
#: Truncated records in the source file; all of them fall into rank 2's shard.
CORRUPT_RECORDS = frozenset({66, 70, 74, 78, 82, 86, 90, 94})
EPOCHS = 100
DATALOADER_WORKERS = 2


def is_valid(record_id: int) -> bool:
    return record_id not in CORRUPT_RECORDS


def shard_records(rank: int, world_size: int) -> list[int]:
    """This rank's records, with the ones that fail validation dropped."""
    return [r for r in range(rank, NUM_RECORDS, world_size) if is_valid(r)]


class RecordDataset(Dataset):
    def __init__(self, record_ids: list[int]) -> None:
        self.record_ids = record_ids

    def __len__(self) -> int:
        return len(self.record_ids)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(self.record_ids[index])
        features = torch.randn(training.FEATURES, generator=generator)
        return features, features.sum().reshape(1)


def batches_on_shortest_shard(world_size: int) -> int:
    return min(len(shard_records(r, world_size)) for r in range(world_size)) // training.BATCH_SIZE


def train_epoch(
    model: DistributedDataParallel, loader: DataLoader, info: harness.RankInfo, epoch: int
) -> float:
    total = 0.0
    for index, batch in enumerate(loader):
        if epoch == 0 and index == batches_on_shortest_shard(info.world_size):
            harness.report_ready(info, f"epoch {epoch} batch {index}: DDP backward", role="waiting")
        loss = training.compute_loss(model, batch)
        loss.backward()  # WAITING
        training.sgd_update(model)
        total += loss.item()
        harness.log(info, f"epoch {epoch} batch {index} loss {loss.item():.4f}")
    return total


def end_of_epoch(info: harness.RankInfo, epoch: int) -> None:
    """Wait for every rank before validation starts."""
    if epoch == 0:
        harness.report_ready(info, f"epoch {epoch}: end-of-epoch barrier", role="culprit")
    dist.barrier()  # CULPRIT


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = DistributedDataParallel(training.build_model())
    dataset = RecordDataset(shard_records(info.rank, info.world_size))
    # Worker processes, as real input pipelines have: they carry the rank's environment and
    # must be reported under their rank, never as ranks of their own.
    loader = DataLoader(dataset, batch_size=training.BATCH_SIZE, drop_last=True,
                        num_workers=DATALOADER_WORKERS, persistent_workers=True)
    harness.log(info, f"{len(dataset)} records, {len(loader)} batches per epoch")
    for epoch in range(EPOCHS):
        train_epoch(model, loader, info, epoch)
        end_of_epoch(info, epoch)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
