"""Scenario: a DataLoader worker that never finishes its record; its rank waits for it forever.

Each rank reads batches through a DataLoader with one worker process. A record is decoded, then
checked; a record that fails the check is re-decoded with the next seed, as augmentation code
does for a crop that misses the object. Rank 1's shard holds a record that can never pass (its
box is empty), so its worker re-decodes it forever at full CPU, and rank 1's main thread waits
for that batch in the DataLoader. The other ranks wait for rank 1 in the gradient all_reduce.
The healthy twin is input_bound: a worker computing and a main thread waiting look the same.
"""

from __future__ import annotations

import _harness as harness
import _training as training
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

BAD_RECORD = (1, 3)  # (rank, step): a record whose box is empty
STEPS = 100_000


class CheckedShard(Dataset):
    """This rank's records, re-decoded until they pass their check."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def __len__(self) -> int:
        return STEPS

    def __getitem__(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        area = 0 if (self.rank, step) == BAD_RECORD else 64
        seed = step
        while not crop_is_valid(area, seed):  # never true for an empty box
            seed += 1
        return training.synthetic_batch(self.rank, step)


def crop_is_valid(area: int, seed: int) -> bool:
    """A random crop keeps at least a quarter of the object's box."""
    generator = torch.Generator().manual_seed(seed)
    kept = int(torch.randint(0, 64, (1,), generator=generator)) * area // 64
    return kept * 4 >= area > 0


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = training.build_model()
    loader = DataLoader(CheckedShard(info.rank), batch_size=None, num_workers=1,
                        persistent_workers=True)
    batches = iter(loader)
    for step in range(STEPS):
        if step == BAD_RECORD[1]:
            role = "culprit" if info.rank == BAD_RECORD[0] else "waiting"
            harness.report_ready(info, f"step {step}", role=role)
        batch = next(batches)  # CULPRIT
        loss = training.train_step(model, batch)
        harness.log(info, f"step {step} loss {loss:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
