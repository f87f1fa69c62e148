"""Scenario: a loader thread stuck on its shard service, beside a thread that tokenizes.

Every rank reads its batches through a `ShardReader`: a fill thread fetches each record from
the node's shard service over TCP and hands it over through a bounded queue. From step 3 rank
2's service takes the request and never answers (a listener nobody accepts from): its fill
thread sits in the socket read for ever (no timeout), its main thread in `queue.get()`. The
first rank of each node (0 and 2) also tokenizes the validation set in Python on a thread of
its own (`dead_reader_busy_sidecar`'s): rank 2's process computes while its main thread
waits, the sight of a slow worker thread, but the thread it waits for is the idle fill thread,
and no traceback says so. The others wait for rank 2 in the gradient all_reduce. Culprit: 2.
"""

from __future__ import annotations

import itertools
import queue
import socket
import threading

import _harness as harness
import _training as training
import torch
import torch.distributed as dist
from asyncio_fetch_stuck import unresponsive_service
from dead_reader_busy_sidecar import start_validation_tokenizer

STALL_RANK, STALL_STEP = 2, 3
STEPS = 1000


class ShardReader:
    """Batches read ahead on a fill thread, handed over through a bounded queue."""

    def __init__(self, rank: int, depth: int = 2) -> None:
        self.rank = rank
        self.service = unresponsive_service() if rank == STALL_RANK else None
        self._queue: queue.Queue[tuple[torch.Tensor, torch.Tensor]] = queue.Queue(maxsize=depth)
        self._thread = threading.Thread(target=self._fill, name="shard-fill", daemon=True)
        self._thread.start()

    def _fetch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.service is not None and step >= STALL_STEP:
            with socket.create_connection(self.service.getsockname()) as conn:
                conn.sendall(f"GET shard {self.rank:05d} record {step}\n".encode())
                conn.recv(65536)  # never answered
        return training.synthetic_batch(self.rank, step)

    def _fill(self) -> None:
        for step in itertools.count():
            self._queue.put(self._fetch(step))

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._queue.get()  # CULPRIT


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    start_validation_tokenizer(info)
    model = training.build_model()
    reader = ShardReader(info.rank)
    for step in range(STEPS):
        if step == STALL_STEP:
            role = "culprit" if info.rank == STALL_RANK else "waiting"
            phase = "shard queue.get()" if role == "culprit" else "gradient all_reduce"
            harness.report_ready(info, f"step {step}: {phase}", role=role)
        batch = reader.next_batch()
        loss = training.train_step(model, batch)
        harness.log(info, f"step {step} loss {loss:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
