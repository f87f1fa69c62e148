"""Scenario (control): `healthy_large_allreduce` with a second gloo group for its metrics.

Every rank also creates a metrics group (dist.new_group) and averages its loss over it once
every five steps. The steps are one large all_reduce on the default group, seconds long: at any
instant every rank sits in it, its data flowing, while the metrics group's connections and
threads stay idle for half a minute. The liar of heartbeat_group_hang's rule (data that moved
on another group than the waited one is not the waited collective's): here the default group
is the one moving. It must never get a hang verdict.
"""

from __future__ import annotations

import _harness as harness
import torch
import torch.distributed as dist
from healthy_large_allreduce import ELEMENTS, STEPS, average_gradients

#: Steps between two metrics reductions.
METRICS_EVERY = 5


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    metrics = dist.new_group(backend="gloo")
    flat = torch.full((ELEMENTS,), float(info.rank))
    for step in range(STEPS):
        average_gradients(flat)
        loss = torch.tensor([float(flat[0])])
        if step % METRICS_EVERY == 0:
            dist.all_reduce(loss, group=metrics)
            loss /= info.world_size
        harness.log(info, f"step {step} loss {loss.item():.4f}")
        if step == 0:
            harness.report_ready(info, "large all_reduce steps", role="healthy")


if __name__ == "__main__":
    main()
