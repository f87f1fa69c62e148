"""Scenario: two ranks deadlock in point-to-point recv, each waiting for the other to send.

Ranks are paired (0,1), (2,3) as two replicas of a small model. When a pair's losses
disagree by too much, both partners call check_replica_agreement, which swaps weight
checksums with dist.recv then dist.send. With a blocking recv first on BOTH sides, neither
ever sends. At step 3 the pair (2,3) hits that path (its shards both contain the outlier
batch); ranks 2 and 3 wait in recv forever, ranks 0 and 1 in step 4's gradient all_reduce.
Both culprits sit on the same line: the fault is the pair's order, not one rank.
"""

from __future__ import annotations

import _harness as harness
import _training as training
import torch
import torch.distributed as dist
from torch import nn

#: The pair whose shards hold the outlier batch, and when.
OUTLIER_PAIR = 1
OUTLIER_STEP = 3
STEPS = 1000


def partner(rank: int) -> int:
    return rank ^ 1


def losses_disagree(rank: int, step: int) -> bool:
    """Whether this pair's losses drifted apart (deterministic stand-in for the check)."""
    return rank // 2 == OUTLIER_PAIR and step == OUTLIER_STEP


def weights_checksum(model: nn.Module) -> torch.Tensor:
    return torch.stack([p.detach().sum() for p in model.parameters()]).sum().reshape(1)


def check_replica_agreement(model: nn.Module, info: harness.RankInfo, step: int) -> bool:
    """Swap weight checksums with the partner replica."""
    peer = partner(info.rank)
    mine, theirs = weights_checksum(model), torch.zeros(1)
    harness.report_ready(info, f"step {step}: recv from rank {peer}", role="culprit")
    dist.recv(theirs, src=peer)  # CULPRIT
    dist.send(mine, dst=peer)
    return bool(torch.isclose(mine, theirs))


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    train(info)


def train(info: harness.RankInfo) -> None:
    """The training loop, from a fresh model: the pair's check at OUTLIER_STEP."""
    model = training.build_model()
    for step in range(STEPS):
        if step == OUTLIER_STEP + 1:
            harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
        if losses_disagree(info.rank, step):
            check_replica_agreement(model, info, step)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
