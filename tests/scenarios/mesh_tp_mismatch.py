"""Scenario: a 2-D mesh (tensor x data parallel); one rank calls another collective on its
tensor-parallel group, and the hang spreads to the data-parallel groups.

Four ranks on two nodes: tensor-parallel pairs inside a node (tp: {0, 1}, {2, 3}), data-parallel
pairs across nodes (dp: {0, 2}, {1, 3}), each a ``dist.new_group`` as Megatron-style code builds
them. Every step all_reduces the row-parallel layer's partial output over tp, then averages the
gradients over dp. At step 3 rank 3's activation logging is on and it all_gathers its partial
output over tp instead of reducing it. Rank 2 waits for it in tp's all_reduce; ranks 0 and 1
finish tp's all_reduce and wait in dp's, for 2 and for 3. By stacks alone two ranks wait at the
dp line, one at the tp line and one at an all_gather: only the groups say that 0 and 1 wait on
the tp pair's hang. Culprit: rank 3 (the all_gather).
"""

from __future__ import annotations

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

LOGGING = (3, 3)  # (rank, step) whose activation logging gathers instead of reducing
STEPS = 1000


def row_parallel_output(partial: torch.Tensor, tp: dist.ProcessGroup, info: harness.RankInfo,
                        step: int) -> torch.Tensor:
    if (info.rank, step) == LOGGING:
        harness.report_ready(info, f"step {step}: tp all_gather of the activations", role="culprit")
        parts = [torch.empty_like(partial) for _ in range(dist.get_world_size(tp))]
        dist.all_gather(parts, partial, group=tp)  # CULPRIT
        return torch.stack(parts).sum(dim=0)
    if step == LOGGING[1] and info.rank == 2:
        harness.report_ready(info, f"step {step}: tp all_reduce", role="waiting")
    dist.all_reduce(partial, group=tp)  # WAITING
    return partial


def average_over_dp(model: torch.nn.Module, dp: dist.ProcessGroup, info: harness.RankInfo,
                    step: int) -> None:
    flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    if step == LOGGING[1] and info.rank in (0, 1):
        harness.report_ready(info, f"step {step}: dp all_reduce", role="waiting")
    dist.all_reduce(flat, group=dp)  # WAITING
    flat /= dist.get_world_size(dp)


def train(info: harness.RankInfo) -> None:
    # every rank creates every group, in the same order (new_group is collective)
    tp_groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    dp_groups = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    tp, dp = tp_groups[info.rank // 2], dp_groups[info.rank % 2]
    model = training.build_model()
    for step in range(STEPS):
        loss = training.compute_loss(model, training.synthetic_batch(info.rank, step))
        loss.backward()
        with torch.no_grad():
            partial = model[0].weight.grad.sum(dim=1)  # the layer's shard of an activation
            row_parallel_output(partial, tp, info, step)
        average_over_dp(model, dp, info, step)
        training.sgd_update(model)
        harness.log(info, f"step {step} loss {loss.item():.4f}")


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    train(info)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
