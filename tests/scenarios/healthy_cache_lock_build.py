"""Scenario (control): one rank builds the shared cache under its file lock, the others wait for
the lock.

`cache_lock_barrier`'s healthy twin, the way FileLock-guarded dataset caches work when nothing
goes wrong: every rank takes the cache's `fcntl.flock`; the first (rank 0) finds no cache and
builds it in pure Python for about BUILD_SECONDS (its line moving, the GIL held), then lets the
lock go; ranks 1-3 block in `flock()` all that time (no collective on any stack, nobody logs),
then each finds the cache and moves on. After the cache every rank trains and logs each step.
It must never get a hang verdict: three ranks blocked on a lock that a rank holds while it
computes is a slow build (or, endless, a hang a short look cannot tell), not a deadlock.
"""

from __future__ import annotations

import fcntl
import time

import _harness as harness
import cache_lock_barrier as cache_lock
import rank0_prepare_barrier as prepare
import torch.distributed as dist

BUILD_SECONDS = 90.0
STEPS = 1200


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    if info.rank != 0:
        time.sleep(cache_lock.OTHERS_LATE_S)
    folder = cache_lock.cache_dir()
    cache = folder / "tokens.bin"
    harness.report_ready(info, "building the cache" if info.rank == 0 else "flock", role="healthy")
    with open(folder / "tokens.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not cache.exists():
                vocabulary = prepare.build_vocabulary(BUILD_SECONDS)
                cache.write_text("\n".join(sorted(vocabulary)))
                harness.log(info, f"cache of {len(vocabulary)} tokens built")
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    harness.train_plainly(info, range(STEPS))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
