"""Scenario (control): a healthy job whose steps are dominated by one large all_reduce.

Each step averages a 128 MB buffer (32M float32: a model's worth of gradients) across the
four ranks with gloo, which takes seconds on this machine's two cores: at any instant every
rank sits in the same all_reduce at the same line, the shape of `all_waiting`, yet data flows
all the time and every rank logs every step. It must never get a hang verdict.
"""

from __future__ import annotations

import _harness as harness
import torch
import torch.distributed as dist

ELEMENTS = 32 << 20
#: About 30 minutes, the job's time limit.
STEPS = 600


def average_gradients(flat: torch.Tensor) -> None:
    dist.all_reduce(flat)
    flat /= dist.get_world_size()


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    flat = torch.full((ELEMENTS,), float(info.rank))
    for step in range(STEPS):
        average_gradients(flat)
        harness.log(info, f"step {step} loss {float(flat[0]):.4f}")
        if step == 0:
            harness.report_ready(info, "large all_reduce steps", role="healthy")


if __name__ == "__main__":
    main()
