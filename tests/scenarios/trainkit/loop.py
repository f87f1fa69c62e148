"""The package's training step: a small model, gradients averaged by one flattened all_reduce."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

FEATURES = 16


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, 1))


def batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    inputs = torch.randn(8, FEATURES, generator=torch.Generator().manual_seed(1000 * rank + step))
    return inputs, inputs.sum(dim=1, keepdim=True)


def train_step(model: nn.Module, data: tuple[torch.Tensor, torch.Tensor]) -> float:
    inputs, targets = data
    loss = nn.functional.mse_loss(model(inputs), targets)
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)  # WAITING
    flat /= dist.get_world_size()
    offset = 0
    with torch.no_grad():
        for param, grad in zip(model.parameters(), grads):
            param.add_(flat[offset:offset + grad.numel()].view_as(grad), alpha=-0.01)
            param.grad = None
            offset += grad.numel()
    return float(loss)
