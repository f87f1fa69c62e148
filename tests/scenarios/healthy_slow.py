"""Scenario (control): a healthy job that is merely slow. It must never be flagged.

Each step spends STEP_SECONDS "reading data" (a sleep) and then does the usual gradient
all_reduce; every rank prints one line per step, so both the stacks and the log move.
"""

from __future__ import annotations

import time

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

STEP_SECONDS = 1.0
#: About 30 minutes, the same as the job's time limit.
STEPS = 1800


def read_batch_slowly(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    time.sleep(STEP_SECONDS)
    return training.synthetic_batch(rank, step)


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    harness.train_healthy(info, range(STEPS), lambda step: read_batch_slowly(info.rank, step))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
