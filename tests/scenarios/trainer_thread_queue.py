"""Scenario: training runs on a worker thread; the main thread only waits for it, in a loop.

Some trainers keep the main thread free for signals (a Ctrl-C, a SIGTERM from the scheduler)
and run the training loop on a `trainer` thread, the main thread joining it a second at a time.
Batches come from a prefetch thread through a bounded queue. On rank 2 the prefetch thread
dies on a truncated record, so rank 2's trainer thread blocks in `queue.get()` for ever; the
other ranks' trainer threads wait for it in the gradient all_reduce. Every rank's main thread
sits in the same join loop: the rank's state is on another thread.
"""

from __future__ import annotations

import itertools
import queue
import threading

import _harness as harness
import _training as training
import torch
import torch.distributed as dist
from blocked_outside_collective import TRUNCATED_RECORD, read_batch

STEPS = 1000


def prefetch(rank: int, batches: queue.Queue[tuple[torch.Tensor, torch.Tensor]]) -> None:
    for step in itertools.count():
        batches.put(read_batch(rank, step))


def train(info: harness.RankInfo) -> None:
    model = training.build_model()
    batches: queue.Queue[tuple[torch.Tensor, torch.Tensor]] = queue.Queue(maxsize=2)
    threading.Thread(target=prefetch, args=(info.rank, batches), name="prefetch",
                     daemon=True).start()
    for step in range(STEPS):
        if step == TRUNCATED_RECORD[1]:
            role = "culprit" if info.rank == TRUNCATED_RECORD[0] else "waiting"
            harness.report_ready(info, f"step {step}: {role}", role=role)
        batch = batches.get()  # CULPRIT
        loss = training.train_step(model, batch)
        harness.log(info, f"step {step} loss {loss:.4f}")


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    trainer = threading.Thread(target=train, args=(info,), name="trainer")
    trainer.start()
    while trainer.is_alive():  # the main thread stays free for signals
        trainer.join(timeout=1.0)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
