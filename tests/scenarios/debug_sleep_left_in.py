"""Scenario: a debugging pause left in the training loop: rank 2 sleeps for a day at step 3.

Someone chasing a bad batch made one rank wait so that they could attach a debugger to it,
and the line shipped:

    if rank == DEBUG_RANK and step == DEBUG_STEP:
        time.sleep(DEBUG_PAUSE_S)  # attach gdb/py-spy here

Rank 2's main thread sits in time.sleep (clock_nanosleep, state S, no CPU) at one line of the
job's code for every sample; ranks 0, 1, 3 wait in step 3's gradient all_reduce. The sight of
a paced loop (healthy_paced_steps) in one look, but the sleep never returns: the liar of a
rule that would take a rank asleep in time.sleep for a slow step.
"""

from __future__ import annotations

import time

import _harness as harness
import _training as training
import torch.distributed as dist

DEBUG_RANK = 2
DEBUG_STEP = 3
DEBUG_PAUSE_S = 24 * 3600.0
STEPS = 1000


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = training.build_model()
    for step in range(STEPS):
        if info.rank == DEBUG_RANK and step == DEBUG_STEP:
            harness.report_ready(info, f"step {step}: the debugging sleep", role="culprit")
            time.sleep(DEBUG_PAUSE_S)  # CULPRIT
        if step == DEBUG_STEP and info.rank != DEBUG_RANK:
            harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
