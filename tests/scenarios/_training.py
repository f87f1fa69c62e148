"""The tiny data-parallel training loop the scenarios share: a model, batches, one step.

Written the way a small research codebase would: gradients are averaged by hand with one
flattened all_reduce per step, so a rank waiting for its peers waits on one known line.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

FEATURES = 16
BATCH_SIZE = 8
LEARNING_RATE = 0.01


def build_model() -> nn.Module:
    torch.manual_seed(0)  # every rank starts from the same weights
    return nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, 1))


def synthetic_batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A deterministic regression batch for this rank and step."""
    generator = torch.Generator().manual_seed(1000 * rank + step)
    inputs = torch.randn(BATCH_SIZE, FEATURES, generator=generator)
    return inputs, inputs.sum(dim=1, keepdim=True)


def compute_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    inputs, targets = batch
    return nn.functional.mse_loss(model(inputs), targets)


def all_reduce_gradients(model: nn.Module) -> None:
    """Average gradients over all ranks with a single flattened all_reduce."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)  # WAITING
    flat /= dist.get_world_size()
    offset = 0
    for grad in grads:
        grad.copy_(flat[offset:offset + grad.numel()].view_as(grad))
        offset += grad.numel()


def sgd_update(model: nn.Module) -> None:
    """Plain SGD, by hand: torch.optim would import torch._dynamo, a second of CPU per rank."""
    with torch.no_grad():
        for param in model.parameters():
            if param.grad is not None:
                param.add_(param.grad, alpha=-LEARNING_RATE)
                param.grad = None


def train_step(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> float:
    """Forward, backward, average gradients, update; returns the local loss."""
    loss = compute_loss(model, batch)
    loss.backward()
    all_reduce_gradients(model)
    sgd_update(model)
    return loss.item()


def fully_sharded(model: nn.Module) -> nn.Module:
    """``model`` sharded with FSDP2 as current code does it: each Linear a unit, then the root."""
    from torch.distributed.fsdp import fully_shard  # only the FSDP scenarios pay its import

    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    return model
