"""Scenario (control): a healthy FSDP2 job with slow steps.

Every rank shards its model with ``fully_shard`` (each Linear a unit, then the root) and
trains: each step reads its batch for STEP_SECONDS (a sleep: a slow file system), then runs
forward and backward through FSDP's all-gathers and reduce-scatters, and logs. Between
samples, ranks go in and out of FSDP's collectives and torch.distributed's own code; it must
never get a hang verdict.
"""

from __future__ import annotations

import time

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

STEP_SECONDS = 1.0
STEPS = 1800


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = training.fully_sharded(training.build_model())
    for step in range(STEPS):
        if step == 1:
            harness.report_ready(info, "training", role="healthy")
        time.sleep(STEP_SECONDS)  # reading the batch
        inputs, targets = training.synthetic_batch(info.rank, step)
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        training.sgd_update(model)
        harness.log(info, f"step {step} loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
