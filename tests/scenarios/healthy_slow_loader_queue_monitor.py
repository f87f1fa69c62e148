"""Scenario (control): a slow loader on a module's queue, watched by a queue-depth monitor.

Every rank takes its batches from a module-level queue that a loader thread fills (it reaches
the queue as a global, no argument); on rank 2, whose shard is stored compressed, each batch
takes 2.5 s of Python to decode, so the other ranks wait for it in the gradient all_reduce and
rank 2's main thread waits in `BATCHES.get()` while its loader computes. Beside it a
monitor thread, handed the queue, logs its depth every 5 s and sleeps between. Every rank logs
every step. The only thread whose locals hold the queue is the monitor, asleep; the producer,
which computes, holds nothing of it. It must never get a hang verdict: the liar of the rule
that a computing thread that does not hold what the main thread waits on is not worked
through.
"""

from __future__ import annotations

import queue
import threading
import time

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

SLOW_RANK = 2
#: Seconds of Python to decode one of the slow rank's batches.
DECODE_S = 2.5
STEPS = 100_000
BATCHES: queue.Queue[tuple[torch.Tensor, torch.Tensor]] = queue.Queue(maxsize=2)


def decode(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One batch of this rank's shard; the slow rank's are decompressed in Python."""
    if rank == SLOW_RANK:
        until, total = time.monotonic() + DECODE_S, 0
        while time.monotonic() < until:
            total += sum(range(1000)) % 7
    return training.synthetic_batch(rank, step)


def fill(rank: int) -> None:
    for step in range(STEPS):
        BATCHES.put(decode(rank, step))


def watch_depth(batches: queue.Queue[tuple[torch.Tensor, torch.Tensor]],
                info: harness.RankInfo) -> None:
    """Log the queue's depth every 5 s (a dashboard's input-pipeline panel)."""
    while True:
        time.sleep(5)
        harness.log(info, f"input queue depth {batches.qsize()}")


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    threading.Thread(target=fill, args=(info.rank,), name="loader", daemon=True).start()
    threading.Thread(target=watch_depth, args=(BATCHES, info), name="queue-monitor",
                     daemon=True).start()
    model = training.build_model()
    for step in range(STEPS):
        if step == 2:
            harness.report_ready(info, "training, rank 2's loader slow", role="healthy")
        loss = training.train_step(model, BATCHES.get())
        harness.log(info, f"step {step} loss {loss:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
