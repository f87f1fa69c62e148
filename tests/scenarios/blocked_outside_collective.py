"""Scenario: one rank blocked outside any collective, on its data-prefetch queue.

Batches are read by a background thread and handed over through a bounded queue. On rank 2
the reader thread hits a truncated record, raises and dies (the traceback goes to stderr,
the training loop never hears of it), and the main thread then blocks forever in
queue.get(). The other ranks wait for rank 2 in the gradient all_reduce.
"""

from __future__ import annotations

import itertools
import queue
import threading

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

#: Rank 2's reader dies on the record of this step.
TRUNCATED_RECORD = (2, 3)
STEPS = 1000


def read_batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Read one batch from this rank's shard."""
    if (rank, step) == TRUNCATED_RECORD:
        raise EOFError(f"shard {rank:05d}: record {step} truncated after 112 of 576 bytes")
    return training.synthetic_batch(rank, step)


class Prefetcher:
    """Reads batches ahead of the training loop on a background thread."""

    def __init__(self, rank: int, depth: int = 2) -> None:
        self.rank = rank
        self._queue: queue.Queue[tuple[torch.Tensor, torch.Tensor]] = queue.Queue(maxsize=depth)
        self._thread = threading.Thread(target=self._fill, name="prefetch", daemon=True)
        self._thread.start()

    def _fill(self) -> None:
        for step in itertools.count():
            self._queue.put(read_batch(self.rank, step))

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._queue.get()  # CULPRIT


def train(info: harness.RankInfo) -> None:
    model = training.build_model()
    prefetcher = Prefetcher(info.rank)
    hang_step = TRUNCATED_RECORD[1]
    for step in range(STEPS):
        if step == hang_step:
            role = "culprit" if info.rank == TRUNCATED_RECORD[0] else "waiting"
            phase = "prefetch queue.get()" if role == "culprit" else "gradient all_reduce"
            harness.report_ready(info, f"step {step}: {phase}", role=role)
        batch = prefetcher.next_batch()
        loss = training.train_step(model, batch)
        harness.log(info, f"step {step} loss {loss:.4f}")


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    train(info)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
