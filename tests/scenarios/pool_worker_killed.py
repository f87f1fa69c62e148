"""Scenario: one rank's multiprocessing.Pool lost a worker mid-task, and Pool.map waits forever.

Every rank tokenizes its next shard with a 2-process multiprocessing.Pool (fork). At step 3 one
of rank 2's pool workers is killed while it holds a task (here it SIGKILLs itself on a poisoned
record, as the kernel's OOM killer would): the pool starts a new worker, but the lost task's
result never comes, and Pool.map waits for it forever (concurrent.futures would raise
BrokenProcessPool; multiprocessing.Pool does not). Rank 2's main thread idles in Pool.map, its
pool's handler threads and its two live workers idle too; ranks 0, 1, 3 wait in the next
gradient all_reduce.
"""

from __future__ import annotations

import multiprocessing
import os
import signal

import _harness as harness
import _training as training
import torch.distributed as dist

STALL_RANK = 2
STALL_AT_STEP = 3
STEPS = 1000
POISON = -1


def tokenize(record: int) -> int:
    if record == POISON:
        os.kill(os.getpid(), signal.SIGKILL)  # what the OOM killer does to a worker
    return sum(ord(c) for c in f"record-{record}") % 50257


def tokenize_shard(pool: multiprocessing.pool.Pool, info: harness.RankInfo, step: int) -> int:
    records = list(range(step * 64, step * 64 + 64))
    if info.rank == STALL_RANK and step == STALL_AT_STEP:
        records[17] = POISON
        harness.report_ready(info, f"step {step}: Pool.map of the shard", role="culprit")
    return sum(pool.map(tokenize, records, chunksize=8))  # CULPRIT


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    pool = multiprocessing.get_context("fork").Pool(2)
    model = training.build_model()
    for step in range(STEPS):
        if step == STALL_AT_STEP and info.rank != STALL_RANK:
            harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
        tokens = tokenize_shard(pool, info, step)
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f} tokens {tokens}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
