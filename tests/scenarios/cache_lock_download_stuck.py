"""Scenario: the rank building the shared cache under its file lock is stuck in a download.

`healthy_cache_lock_build`'s hung twin: every rank takes the cache's `fcntl.flock`; rank 0
gets it first and, holding it, fetches the tokenizer's vocabulary from the model hub (urllib,
no timeout) before it builds; the hub accepted the connection and never answers (a listening
socket nobody accepts from). Rank 0 sits in the socket read for ever, the lock held; ranks 1-3
block in `flock()`. The job that would make "ranks waiting for a lock holder wait for a
rank-gated phase" lie if the holder's state were not read: the holder does not work.
"""

from __future__ import annotations

import fcntl
import time
import urllib.request

import _harness as harness
import cache_lock_barrier as cache_lock
import http_no_timeout
import torch.distributed as dist

STEPS = 1000


def fetch_vocabulary(url: str) -> bytes:
    with http_no_timeout.TRACKER_CLIENT.open(urllib.request.Request(url)) as response:  # CULPRIT
        return response.read()


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    hub = http_no_timeout.unresponsive_tracker() if info.rank == 0 else None
    if info.rank != 0:
        time.sleep(cache_lock.OTHERS_LATE_S)
    folder = cache_lock.cache_dir()
    cache = folder / "tokens.bin"
    with open(folder / "tokens.lock", "w") as lock:
        if info.rank != 0:
            harness.report_ready(info, "flock of the token cache", role="waiting")
        fcntl.flock(lock, fcntl.LOCK_EX)  # WAITING
        try:
            if not cache.exists() and hub is not None:
                host, port = hub.getsockname()
                harness.report_ready(info, "vocabulary download under the lock", role="culprit")
                cache.write_bytes(fetch_vocabulary(f"http://{host}:{port}/vocab.json"))
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    harness.train_plainly(info, range(STEPS))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
