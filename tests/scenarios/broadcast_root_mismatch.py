"""Scenario: every rank broadcasts the step's schedule from the leader it computed; one rank
computed another leader.

From step 3 the leader of the schedule broadcast is read from a file each rank caches at
start; rank 2's cache is stale and names rank 1. So ranks 0, 1, 3 call
`dist.broadcast(schedule, src=0)` and rank 2 `dist.broadcast(schedule, src=1)`: the same
collective on the same line, with different roots.
"""

from __future__ import annotations

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

STALE_RANK = 2
FROM_STEP = 3
STEPS = 1000


def cached_leader(rank: int, step: int) -> int:
    """The leader each rank's cache names: rank 2's is stale once the leader changed."""
    return 1 if rank == STALE_RANK and step >= FROM_STEP else 0


def sync_schedule(rank: int, step: int) -> torch.Tensor:
    schedule = torch.full((4,), float(step)) if rank == 0 else torch.zeros(4)
    dist.broadcast(schedule, src=cached_leader(rank, step))  # CULPRIT
    return schedule


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = training.build_model()
    for step in range(STEPS):
        if step == FROM_STEP:
            role = "culprit" if info.rank == STALE_RANK else "waiting"
            harness.report_ready(info, f"step {step}: schedule broadcast", role=role)
        sync_schedule(info.rank, step)
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
