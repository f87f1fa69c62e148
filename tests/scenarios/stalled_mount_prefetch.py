"""Scenario: a prefetch thread's read hangs on a mount that stopped answering; the main thread
waits for it.

Every rank reads its next shard on a one-thread ThreadPoolExecutor (thread "prefetch_0") while
the current step trains, from a network file system (the stalled mount of stalled_mount_read,
mounted by the harness outside the job). From step 3 the mount never answers rank 2's reads:
its prefetch thread waits in the kernel in read(), its main thread in Future.result() for that
shard (a futex: a thread that a suspend stops at once). Ranks 0, 1, 3 wait in step 3's
gradient all_reduce.

stalled_mount_read's liar for the way ranks are read: py-spy's suspend of rank 2 stops its
main thread but never its prefetch thread (the interrupt turns the FUSE wait uninterruptible),
and the main thread's wait says nothing of it.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

import _harness as harness
import _training as training
import torch.distributed as dist
from stalled_mount_read import dataset_directory, read_shard

STALL_RANK = 2
STALL_FROM_STEP = 3
STEPS = 1000


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    directory = dataset_directory()
    prefetcher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefetch")
    pending: Future[bytes] = prefetcher.submit(read_shard, directory, info.rank, 0)
    model = training.build_model()
    for step in range(STEPS):
        if step == STALL_FROM_STEP:
            stalls = info.rank == STALL_RANK
            harness.report_ready(info, f"step {step}: " + (
                "Future.result() of the shard" if stalls else "gradient all_reduce"),
                role="culprit" if stalls else "waiting")
        shard = pending.result()  # CULPRIT
        pending = prefetcher.submit(read_shard, directory, info.rank, step + 1)
        loss = training.train_step(model, training.synthetic_batch(info.rank, step + len(shard)))
        harness.log(info, f"step {step} loss {loss:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
