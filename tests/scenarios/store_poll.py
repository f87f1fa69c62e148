"""Scenario: ranks poll a TCPStore key with a short timeout; the rank that sets it never does.

The same job as `store_wait`, written the way code that must stay responsive often is: ranks
0, 1 and 3 wait for the key ``dataset_ready`` 200 ms at a time and retry on the timeout, so
they wake five times a second (a sample can catch one runnable, or in the except branch).
Rank 2 polls for an upstream marker file that never appears (store_wait's own code).
Culprit: rank 2 only.
"""

from __future__ import annotations

from datetime import timedelta

import _harness as harness
import torch.distributed as dist
from store_wait import INDEX_RANK, KEY, upstream_marker, wait_for_upstream
from torch.distributed import distributed_c10d

POLL = timedelta(milliseconds=200)


def wait_for_key(store: dist.Store) -> None:
    """Wait for the key a short while at a time (a stop request could be checked between)."""
    while True:
        try:
            store.wait([KEY], POLL)  # WAITING
            return
        except RuntimeError:  # DistStoreError: the wait timed out
            continue


def prepare_dataset(info: harness.RankInfo, index_rank: int = INDEX_RANK) -> None:
    store = distributed_c10d._get_default_store()
    if info.rank == index_rank:
        harness.report_ready(info, "polling for the upstream marker", role="culprit")
        wait_for_upstream(upstream_marker())
        store.set(KEY, "1")
    else:
        harness.report_ready(info, f"store.wait for {KEY}, {POLL.total_seconds()} s at a time",
                             role="waiting")
        wait_for_key(store)


def main() -> None:
    harness.run_then_barrier(prepare_dataset)


if __name__ == "__main__":
    main()
