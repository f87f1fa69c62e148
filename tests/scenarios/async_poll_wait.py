"""Scenario: the gradient all_reduce is polled (`while not work.is_completed(): sleep`), and
one rank never joins it.

The training loop starts its gradient all_reduce asynchronously and polls it in a loop that
sleeps 50 ms between checks (a home-grown timeout and heartbeat: the pattern of code that wants
to log while it waits). Rank 2's prefetch thread died on a truncated record
(`blocked_outside_collective`): its main thread blocks in `queue.get()` for ever. Ranks 0, 1, 3
poll their all_reduce for ever: their stacks move between the poll's two lines, as a job that
makes progress moves. The job that makes "progress read from line numbers" lie.
"""

from __future__ import annotations

import time

import _async_steps as steps
import _harness as harness
import _training as training
import blocked_outside_collective as prefetching
import torch.distributed as dist

POLL_SECONDS = 0.05
STEPS = 1000


def poll(work: dist.Work) -> None:
    while not work.is_completed():
        time.sleep(POLL_SECONDS)  # WAITING


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = training.build_model()
    prefetcher = prefetching.Prefetcher(info.rank)
    hang_step = prefetching.TRUNCATED_RECORD[1]
    for step in range(STEPS):
        if step == hang_step:
            role = "culprit" if info.rank == prefetching.TRUNCATED_RECORD[0] else "waiting"
            harness.report_ready(info, f"step {step}: {role}", role=role)
        loss = training.compute_loss(model, prefetcher.next_batch())
        loss.backward()
        steps.all_reduce_gradients_async(model, poll)
        training.sgd_update(model)
        harness.log(info, f"step {step} loss {float(loss):.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
