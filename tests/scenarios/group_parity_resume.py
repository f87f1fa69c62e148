"""Scenario: two all-rank groups taken in turns, and one rank resumed a step behind.

The trainer keeps two process groups over every rank (``[dist.new_group(all) for _ in
range(2)]``) and averages each step's gradients on ``comm_groups[step % 2]`` (a double buffer:
one group's work can still drain while the next step's starts). After a restart every rank
reads the step to resume from its own checkpoint; rank 3's last save was one step older, so it
resumes at step 4 while the others resume at step 5: from then on rank 3 all_reduces on the
other group. Every main thread waits at one line, in one all_reduce, under the same frames;
py-spy shows the list's first item only (``[<ProcessGroup at 0x..>, ...]``). Culprit: rank 3.
"""

from __future__ import annotations

from collections.abc import Callable

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

LAGGING_RANK = 3
RESUME_STEP = 5
STEPS = 10**8  # the control trains until the job is cancelled


def saved_step(rank: int, lagging: bool) -> int:
    """The step this rank's own checkpoint says to resume from (rank 3's save is one behind)."""
    return RESUME_STEP - 1 if lagging and rank == LAGGING_RANK else RESUME_STEP


def average_gradients(model: torch.nn.Module, comm_groups: list[dist.ProcessGroup], step: int,
                      info: harness.RankInfo, first: int,
                      role_of: Callable[[int], str] | None) -> None:
    flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    if step == first and role_of is not None:
        role = role_of(info.rank)
        harness.report_ready(info, f"step {step}: all_reduce on comm_groups[{step % 2}]", role=role)
    dist.all_reduce(flat, group=comm_groups[step % 2])  # CULPRIT
    flat /= info.world_size


def main(lagging: bool = True) -> None:
    """``lagging=False``: every checkpoint agrees (healthy_group_parity, the control)."""
    info = harness.setup()
    harness.init_distributed(info)
    comm_groups = [dist.new_group(list(range(info.world_size))) for _ in range(2)]
    model = training.build_model()
    first = saved_step(info.rank, lagging)

    def hung_role(rank: int) -> str:
        return "culprit" if rank == LAGGING_RANK else "waiting"
    harness.log(info, f"resuming at step {first}")
    for step in range(first, STEPS):
        loss = training.compute_loss(model, training.synthetic_batch(info.rank, step))
        loss.backward()
        average_gradients(model, comm_groups, step, info, first, hung_role if lagging else None)
        if not lagging and step == first + 2:
            harness.report_ready(info, "training on both groups in turn", role="healthy")
        training.sgd_update(model)
        harness.log(info, f"step {step} loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
