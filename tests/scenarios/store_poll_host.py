"""Scenario: `store_poll` with the dataset index prepared by rank 0, the store's host.

Rank 0 hosts the job's TCPStore (init_process_group's) and polls for an upstream marker file
that never appears (store_wait's own code); ranks 1-3 wait for the key 200 ms at a time, so
rank 0's store server answers ~15 requests a second: rank 0 moves data over the network in
every strace window although nothing progresses. The store runs on torch's first server
(``USE_LIBUV=0``, the default before torch 2.4), which answers with recv and send calls (the
libuv server reads and writes). Culprit: rank 0 only.
"""

from __future__ import annotations

import os

import _harness as harness
from store_poll import prepare_dataset


def main() -> None:
    os.environ["USE_LIBUV"] = "0"  # the store server of torch < 2.4
    harness.run_then_barrier(lambda info: prepare_dataset(info, index_rank=0))


if __name__ == "__main__":
    main()
