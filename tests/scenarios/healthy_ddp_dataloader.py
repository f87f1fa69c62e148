"""Scenario (control): the textbook job: DDP, a DataLoader with workers, torch.optim, fast steps.

Each rank wraps a small MLP in ``DistributedDataParallel`` (gradients averaged by DDP's reducer
from autograd hooks, in buckets, on autograd's threads while the main thread waits in
``loss.backward()``), reads its batches through a ``DataLoader`` with two worker processes that
decode each sample in Python, and steps ``torch.optim.SGD``; a step takes a fraction of a
second and every rank logs every step. Any instant finds the ranks somewhere in a healthy step:
waiting for a batch, in a backward that waits for the reducer's all_reduce, or in the optimizer.
Must never alarm.
"""

from __future__ import annotations

import _harness as harness
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

FEATURES = 64
STEPS = 100_000


class Records(Dataset):
    """Synthetic records decoded in Python, as a tokenizer or an image decoder would."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        values = [((index * 7919 + i * 104729 + self.rank) % 1000) / 1000.0 for i in range(FEATURES)]
        for _ in range(200):  # the decoding's work
            values = [v * 0.999 + 0.0005 for v in values]
        x = torch.tensor(values)
        return x, x.sum(dim=0, keepdim=True)


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(
        nn.Linear(FEATURES, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1)),
        bucket_cap_mb=0.1)  # several buckets: several all_reduces a backward
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = DataLoader(Records(info.rank), batch_size=16, num_workers=2, persistent_workers=True)
    for step, (inputs, targets) in enumerate(loader):
        loss = nn.functional.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        harness.log(info, f"step {step} loss {loss.item():.4f}")
        if step == 5:
            harness.report_ready(info, "training", role="healthy")
        if step == STEPS:
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
