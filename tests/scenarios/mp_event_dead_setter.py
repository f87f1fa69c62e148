"""Scenario: a rank waits on a multiprocessing.Event that a helper process dies before setting.

Each rank prepares its next shard in a helper process (multiprocessing, fork) that sets a
shared `Event` once the shard is written; the rank waits on the event before it trains on. At
step 3 rank 3's helper crashes (a corrupt source file) before the set: rank 3's main thread waits
in `Event.wait()` (a semaphore in shared memory, futex) for ever, its helper a zombie nobody
reaps. Ranks 0, 1, 2 wait for rank 3 in the next gradient all_reduce.
"""

from __future__ import annotations

import multiprocessing as mp
import os

import _harness as harness
import _training as training
import torch.distributed as dist

CORRUPT = (3, 3)  # (rank, step) whose shard source is corrupt
STEPS = 1000


def prepare_shard(rank: int, step: int, ready) -> None:  # type: ignore[no-untyped-def]
    if (rank, step) == CORRUPT:
        os._exit(3)  # the shard's source is corrupt: the helper dies before it says ready
    ready.set()


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    ctx = mp.get_context("fork")
    model = training.build_model()
    for step in range(STEPS):
        ready = ctx.Event()
        helper = ctx.Process(target=prepare_shard, args=(info.rank, step, ready), daemon=True)
        helper.start()
        if step == CORRUPT[1]:
            stuck = info.rank == CORRUPT[0]
            harness.report_ready(info, f"step {step}: " + (
                "Event.wait() for a dead helper" if stuck else "gradient all_reduce"),
                role="culprit" if stuck else "waiting")
        ready.wait()  # CULPRIT
        helper.join()
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
