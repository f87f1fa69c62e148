"""Scenario: tensor parallel with DTensor on a 2-D device mesh; one rank spins in its data code.

Four ranks, ``init_device_mesh("cpu", (2, 2), ("dp", "tp"))``: tensor-parallel pairs inside a
node (tp: {0, 1}, {2, 3}), data-parallel pairs across nodes (dp: {0, 2}, {1, 3}). The MLP is
split with ``parallelize_module`` (its first Linear column-wise, its last row-wise, as the
PyTorch TP tutorial does): the row-wise layer's output is a partial sum that DTensor reduces
over tp with a functional all_reduce, waited for when the loss first reads it. Gradients are
then averaged over dp by hand. At step 3 rank 3's sequence packer loops for ever: a document
longer than the context window can never fit the bin it keeps retrying (100% CPU, its line
moving). Rank 2 waits for rank 3 in tp's all_reduce (``wait_tensor`` of an
AsyncCollectiveTensor, under the loss line); ranks 0 and 1 finish their step and wait in dp's
all_reduce, for 2 and for 3.
"""

from __future__ import annotations

import _harness as harness
import _training as training
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

CONTEXT = 64
LONG_DOCUMENT = (3, 3)  # (rank, step) whose batch holds a document longer than the context
STEPS = 1000


def document_lengths(rank: int, step: int) -> list[int]:
    lengths = [8 + (7 * i + step) % 40 for i in range(training.BATCH_SIZE)]
    if (rank, step) == LONG_DOCUMENT:
        lengths[2] = CONTEXT + 9
    return lengths


def pack_sequences(lengths: list[int]) -> list[list[int]]:  # CULPRIT
    """First-fit packing of documents into context-sized bins, retrying a document that does
    not fit in a fresh bin."""
    bins: list[list[int]] = [[]]
    pending = list(lengths)
    while pending:
        length = pending[0]
        for packed in bins:
            if sum(packed) + length <= CONTEXT:
                packed.append(pending.pop(0))
                break
        else:
            bins.append([])  # a fresh bin, then try again
            bins = bins[-4:]  # only the last few bins are kept open
    return bins


def average_over_dp(model: torch.nn.Module, dp: dist.ProcessGroup) -> None:
    grads = [p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
             for p in model.parameters()]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=dp)  # WAITING
    flat /= dist.get_world_size(dp)
    offset = 0
    for grad in grads:
        grad.copy_(flat[offset:offset + grad.numel()].view_as(grad))
        offset += grad.numel()


def train(info: harness.RankInfo) -> None:
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    model = training.build_model()
    parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    dp = mesh["dp"].get_group()
    for step in range(STEPS):
        if step == LONG_DOCUMENT[1]:
            role = "culprit" if info.rank == LONG_DOCUMENT[0] else "waiting"
            harness.report_ready(info, f"step {step}: " + (
                "packing sequences" if role == "culprit" else "tp or dp all_reduce"), role=role)
        pack_sequences(document_lengths(info.rank, step))
        inputs, targets = training.synthetic_batch(info.rank // 2, step)  # one batch per tp pair
        loss = torch.nn.functional.mse_loss(model(inputs), targets)  # WAITING
        loss.backward()
        average_over_dp(model, dp)
        training.sgd_update(model)
        harness.log(info, f"step {step} loss {loss.item():.4f}")


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    train(info)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
