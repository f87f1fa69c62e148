"""Scenario: two non-contiguous subgroups; one rank's subgroup all_reduce falls back to the world.

The ranks are split into two shards by a table (shard a = 0, 3, 5, 6; shard b = 1, 2, 4, 7), each
a ``dist.new_group`` kept in a dict. Every step averages gradients within the rank's shard
(``dist.all_reduce(flat, group=groups.get(name))``), then the world meets in a barrier. At step 3
rank 5 looks its shard up under a stale spelling: ``groups.get`` returns None and the SAME
all_reduce line runs on the world group. Ranks 0, 3, 6 wait at that line in shard a's all_reduce
for rank 5; rank 5 waits at it in the world's; shard b finishes and waits in the world barrier.
By stacks alone 0, 3, 5, 6 wait together (same line, same op) against 1, 2, 4, 7 in a barrier, a
4:4 tie that blames shard b; only each call's process group sets rank 5 apart. Culprit: rank 5.
"""

from __future__ import annotations

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

SHARDS = {"a": (0, 3, 5, 6), "b": (1, 2, 4, 7)}
BUGGY = (5, 3)  # (rank, step) that looks its shard up under a stale name
STEPS = 1000


def shard_of(rank: int) -> str:
    return next(name for name, ranks in SHARDS.items() if rank in ranks)


def average_in_shard(flat: torch.Tensor, groups: dict[str, dist.ProcessGroup], name: str,
                     info: harness.RankInfo, step: int) -> None:
    if (info.rank, step) == BUGGY:
        harness.report_ready(info, f"step {step}: shard lookup misses, world all_reduce",
                             role="culprit")
        name = f"shard_{name}"  # the stale spelling: no such key, group=None is the world
    elif step == BUGGY[1] and name == "a":
        harness.report_ready(info, f"step {step}: shard a's all_reduce", role="waiting")
    dist.all_reduce(flat, group=groups.get(name))  # CULPRIT


def train(info: harness.RankInfo) -> None:
    groups = {name: dist.new_group(list(ranks)) for name, ranks in SHARDS.items()}
    name = shard_of(info.rank)
    model = training.build_model()
    for step in range(STEPS):
        loss = training.compute_loss(model, training.synthetic_batch(info.rank, step))
        loss.backward()
        flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        average_in_shard(flat, groups, name, info, step)  # WAITING
        training.sgd_update(model)
        if step == BUGGY[1] and name == "b":
            harness.report_ready(info, f"step {step}: world barrier", role="waiting")
        dist.barrier()  # WAITING
        harness.log(info, f"step {step} loss {loss.item():.4f}")


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    train(info)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
