"""Scenario (control): slow but moving. Steps take seconds; the last rank is the slow one.

Each step every rank "loads" its batch (0.3 s) and computes; the last rank's shard has the
long sequences, so it computes for about 2.5 s of CPU per step while the others finish in a
fraction of that and wait for it in the gradient all_reduce. At any instant the job looks
like one busy rank and three waiting ones -- yet every rank finishes a step every ~3 s and
prints it. It must never get a hang verdict.
"""

from __future__ import annotations

import time

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

LOAD_SECONDS = 0.3
SLOW_COMPUTE_SECONDS = 2.5
FAST_COMPUTE_SECONDS = 0.2
#: About 30 minutes, the job's time limit.
STEPS = 600


def encode_sequences(seconds: float) -> torch.Tensor:
    """Native tensor maths for about `seconds` of CPU (the long-sequence encoder)."""
    state = torch.eye(64)
    weights = torch.randn(64, 64) / 8
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        state = torch.tanh(state @ weights)
    return state


def next_batch(info: harness.RankInfo, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    time.sleep(LOAD_SECONDS)
    slow = info.rank == info.world_size - 1
    encode_sequences(SLOW_COMPUTE_SECONDS if slow else FAST_COMPUTE_SECONDS)
    return training.synthetic_batch(info.rank, step)


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    harness.train_healthy(info, range(STEPS), lambda step: next_batch(info, step))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
