"""Scenario: a finalizer that takes a lock its own thread already holds.

Every rank keeps decoded shards in a small cache. A cached shard releases its buffer in
``__del__``, which takes the cache's lock to update the byte count. Eviction pops the oldest
shard *while holding that lock*; on most steps something else (the prefetch list) still holds
the shard, so its ``__del__`` runs later, outside the lock. At step 3 rank 2's prefetch list was
cleared first, so the pop drops the last reference, CPython runs ``__del__`` at once, on the
same thread, inside the ``with``: a plain ``threading.Lock`` is not reentrant, and the main
thread waits on itself for ever (a futex, no CPU). Ranks 0, 1, 3 wait in step 3's gradient
all_reduce. The stack reads evict -> ``__del__`` -> the lock: no other thread is involved.
"""

from __future__ import annotations

import threading

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

STUCK = (2, 3)  # (rank, step)
CAPACITY = 2
STEPS = 1000


class ShardCache:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.shards: list[Shard] = []
        self.cached_bytes = 0

    def add(self, shard: Shard) -> None:
        with self.lock:
            self.shards.append(shard)
            self.cached_bytes += shard.nbytes
            while len(self.shards) > CAPACITY:
                self.shards.pop(0)  # the last reference may go here, inside the lock


class Shard:
    def __init__(self, cache: ShardCache, step: int) -> None:
        self.cache = cache
        self.data = torch.zeros(4096)
        self.nbytes = self.data.numel() * 4
        self.step = step

    def __del__(self) -> None:
        with self.cache.lock:  # CULPRIT
            self.cache.cached_bytes -= self.nbytes


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = training.build_model()
    cache = ShardCache()
    prefetched: list[Shard] = []
    for step in range(STEPS):
        if (info.rank, step) == STUCK:
            prefetched.clear()  # the shards now live in the cache alone
            harness.report_ready(info, f"step {step}: evicting inside the cache lock",
                                 role="culprit")
        elif step == STUCK[1]:
            harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
        shard = Shard(cache, step)
        cache.add(shard)
        if (info.rank, step) != STUCK:
            prefetched.append(shard)
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
