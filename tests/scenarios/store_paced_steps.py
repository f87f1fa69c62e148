"""Scenario (control): every step waits for a go-ahead on the job's store. Not a hang.

Rank 0 asks a slow data service for the next shard (a sleep of ~0.9 s) and announces it on
the job's TCPStore (``batch/<step>``); ranks 1-3 wait for that key in ``store.wait``, then
every rank runs the usual step with its gradient all_reduce and logs it. Most samples catch
ranks 1-3 at the same ``store.wait`` line, idle, the kernel waiting on a socket: a wait on a
peer, like the hung ranks of `store_wait`, which the traffic rule leaves out of its count
because their own store requests are not collectives. Here they are the job's pace, and
rank 0 moves data every step. It must never be flagged (what would make the traffic rule's
peer-wait exclusion lie).
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

SERVICE_SECONDS = 0.9
#: About 30 minutes, the same as the job's time limit.
STEPS = 1800


def pacing_store(info: harness.RankInfo) -> dist.TCPStore:
    """A client of the job's store (init_process_group's, on MASTER_ADDR:MASTER_PORT)."""
    return dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                         info.world_size, is_master=False, timeout=timedelta(minutes=30))


def fetch_shard(store: dist.TCPStore, step: int) -> None:
    """Rank 0: ask the data service which shard comes next, and tell the others."""
    time.sleep(SERVICE_SECONDS)  # the service's answer
    store.set(f"batch/{step}", str(step % 64))


def next_batch(info: harness.RankInfo, store: dist.TCPStore,
               step: int) -> tuple[torch.Tensor, torch.Tensor]:
    if info.rank == 0:
        fetch_shard(store, step)
    else:
        store.wait([f"batch/{step}"])  # PACED-HERE
    return training.synthetic_batch(info.rank, step)


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    store = pacing_store(info)
    harness.train_healthy(info, range(STEPS), lambda step: next_batch(info, store, step))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
