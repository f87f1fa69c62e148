"""Scenario: rank 0 holds the dataset cache's file lock across a barrier the others never reach.

Every rank prepares the tokenized cache on the shared filesystem under a file lock (fcntl.flock,
the way FileLock-based dataset caches do), so that one rank builds it and the others reuse it.
The rank that builds it waits, still holding the lock, in a barrier "until every rank reached
the cache step". Rank 0 gets the lock first and builds the cache; ranks 1-3 block in flock()
for the lock rank 0 holds, so they never reach the barrier: a deadlock across ranks, every
rank idle. By stacks alone three ranks are blocked outside any collective while one waits in
a barrier: the three look like the stragglers, and the one they wait for is rank 0.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

import _harness as harness
import _training as training
import torch.distributed as dist

STEPS = 1000
#: The others reach the cache step a moment after rank 0 (their shards open more slowly).
OTHERS_LATE_S = 1.0


def cache_dir() -> Path:
    # one per job: a cache left by an earlier run would be reused, lock taken and let go
    folder = Path(os.environ.get("SLURMDIAG_SCENARIO_DIR", "/tmp")) / f"token-cache-{harness.job_id()}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def prepare_token_cache(info: harness.RankInfo) -> Path:
    folder = cache_dir()
    cache = folder / "tokens.bin"
    with open(folder / "tokens.lock", "w") as lock:
        if info.rank != 0:
            harness.report_ready(info, "flock of the token cache", role="waiting")
        fcntl.flock(lock, fcntl.LOCK_EX)  # WAITING
        try:
            if not cache.exists():
                cache.write_bytes(bytes(range(256)) * 64)
                harness.report_ready(info, "barrier under the cache lock", role="culprit")
                dist.barrier()  # CULPRIT
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return cache


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    if info.rank != 0:
        time.sleep(OTHERS_LATE_S)
    prepare_token_cache(info)
    model = training.build_model()
    for step in range(STEPS):
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
