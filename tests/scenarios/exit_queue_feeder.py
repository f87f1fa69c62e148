"""Scenario: training is over, but one rank cannot exit: its multiprocessing queue cannot flush.

Every rank ships its metrics to a logger process (a child, multiprocessing.Process) through a
multiprocessing.Queue; at the end it puts its final summary (a large dict) on the queue and
returns from main. A queue's feeder thread writes each item into the pipe, and Python's exit
joins that thread (multiprocessing's finalizer) until the pipe has taken everything. Rank 1's
logger has stopped reading (it waits for a flag that never comes), so its feeder sits in the
pipe write and the rank's main thread in the exit handler that joins it: the job stays
RUNNING, silent, with ranks 0, 2, 3 gone. Python's documentation warns of this ("joining
processes that use queues"); no frame of the program is on any stack.
"""

from __future__ import annotations

import multiprocessing as mp
import time

import _harness as harness
import _training as training
import torch.distributed as dist

STUCK_RANK = 1
STEPS = 4
SUMMARY_VALUES = 20_000


def run_logger(queue: mp.Queue, reads: bool) -> None:
    """The logger process: reads metrics until the None sentinel; rank 1's stalls first."""
    if not reads:
        while True:
            time.sleep(3600)  # waiting for a flush flag that never comes
    while queue.get() is not None:
        pass


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    logger = ctx.Process(target=run_logger, args=(queue, info.rank != STUCK_RANK),
                         name="metrics-logger", daemon=True)
    logger.start()
    model = training.build_model()
    for step in range(STEPS):
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        queue.put({"step": step, "loss": loss})
        harness.log(info, f"step {step} loss {loss:.4f}")
    summary = {f"layer{i}.grad_norm": float(i) for i in range(SUMMARY_VALUES)}
    queue.put({"final": summary})  # CULPRIT
    queue.put(None)
    dist.destroy_process_group()
    harness.log(info, "training done")
    if info.rank == STUCK_RANK:
        harness.report_ready(info, "interpreter exit: joins the queue's feeder", role="culprit")
    else:
        harness.report_ready(info, "exits once its queue is flushed", role="dead")


if __name__ == "__main__":
    main()
