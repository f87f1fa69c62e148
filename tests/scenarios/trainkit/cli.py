"""`trainkit-train`: the console script's entry point.

Every REFRESH_EVERY steps the shard-index rank refreshes the index before its next step; this
time the upstream export never finishes: rank 2 polls for its marker for ever (sleeping), ranks
0, 1, 3 wait for it in the next step's gradient all_reduce.
"""

from __future__ import annotations

import _harness as harness
import torch.distributed as dist
from trainkit import loop, shards

INDEX_RANK = 2
REFRESH_EVERY = 3
STEPS = 1000


def main() -> int:
    info = harness.setup()
    harness.init_distributed(info)
    model = loop.build_model()
    for step in range(STEPS):
        if step == REFRESH_EVERY + 1 and info.rank != INDEX_RANK:
            harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
        loss = loop.train_step(model, loop.batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
        if info.rank == INDEX_RANK and step > 0 and step % REFRESH_EVERY == 0:
            harness.report_ready(info, f"step {step}: polling for the export", role="culprit")
            shards.refresh_index(shards.export_marker())
    dist.destroy_process_group()
    return 0
