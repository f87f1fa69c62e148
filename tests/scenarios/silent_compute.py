"""Scenario (no hang): every rank computes for a long time between collectives, silently.

Each phase is one long loop of tensor maths (a matmul and a tanh per iteration, 100% CPU,
no log line) that ends on a wall-clock boundary shared by every rank, then one all_reduce of
the result. Nothing is hung: a diagnosis that sees every rank busy in its own code with no
collective on its stack must not raise a hang (issue 13: it said all_waiting).
"""

from __future__ import annotations

import time

import _harness as harness
import torch
import torch.distributed as dist

#: Seconds of compute per phase; phases end on multiples of this (the same for every rank).
PHASE_SECONDS = 30.0
SIZE = 64


def compute_phase(state: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Iterate a small recurrent map until the phase's wall-clock end."""
    end = (time.time() // PHASE_SECONDS + 1) * PHASE_SECONDS
    while time.time() < end:
        state = torch.tanh(state @ weight)  # BUSY
    return state


def train(info: harness.RankInfo) -> None:
    generator = torch.Generator().manual_seed(info.rank)
    weight = torch.randn(SIZE, SIZE, generator=generator) / SIZE**0.5
    state = torch.randn(SIZE, SIZE, generator=generator)
    for phase in range(1000):
        if phase == 0:
            harness.report_ready(info, "phase 0: computing", role="healthy")
        state = compute_phase(state, weight)
        total = state.sum().reshape(1)
        dist.all_reduce(total)
        harness.log(info, f"step {phase} loss {total.item():.4f}")


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    train(info)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
