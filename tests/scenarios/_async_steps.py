"""The shared step's gradient average with the all_reduce started asynchronously
(`async_op=True`); each scenario waits for it its own way (``work.wait()``, a poll of
``work.is_completed()``), so that its wait sits on a line of its own."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn


def all_reduce_gradients_async(model: nn.Module, wait: Callable[[dist.Work], None]) -> None:
    """_training.all_reduce_gradients with ``wait(work)`` between start and use."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    wait(dist.all_reduce(flat, async_op=True))
    flat /= dist.get_world_size()
    offset = 0
    for grad in grads:
        grad.copy_(flat[offset:offset + grad.numel()].view_as(grad))
        offset += grad.numel()
