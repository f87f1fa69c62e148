"""Scenario (control): one rank builds its shard index for two minutes before it joins.

Every rank indexes its data shard before `init_process_group`; ranks 0-2 find a cached index,
rank 3 has none and builds it: it hashes every record in pure Python for ~2 minutes (its line
moving, a core busy), then joins, and training runs, every rank logging every step. Meanwhile
ranks 0-2 wait inside `init_process_group` for the missing member, the shape of `dead_rank`
(a member that never joins) with the member alive and working. It must never get a hang
verdict: a slow start, not a hang.
"""

from __future__ import annotations

import hashlib
import socket
import time

import _harness as harness
import torch.distributed  # noqa: F401 - before the ranks say they are ready: imports take 10-20 s

SLOW_RANK = 3
BUILD_SECONDS = 120.0
STEPS = 1000


def build_shard_index(rank: int, seconds: float) -> list[int]:  # CULPRIT
    """Hash every record of the shard to find record boundaries (a stand-in that takes
    ``seconds`` of one core)."""
    offsets, digest, record = [], hashlib.sha1(), 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(2000):
            digest.update(record.to_bytes(8, "little") * 8)
            if digest.digest()[0] == 0:
                offsets.append(record)
            record += 1
    return offsets


def fetch_shard_index(rank: int) -> bytes:
    """Ask the dataset service for the shard's index: its listener takes the connection into
    its backlog and never answers (a hung service), and there is no timeout."""
    service = socket.socket()
    service.bind(("127.0.0.1", 0))
    service.listen(1)
    client = socket.create_connection(service.getsockname())
    client.sendall(f"GET /index/shard-{rank:05d}\n".encode())
    return client.recv(65536)  # CULPRIT


def main(stuck: bool = False, endless: bool = False, file_store: bool = False) -> None:
    info = harness.setup()
    slow = info.rank == SLOW_RANK
    if slow:
        harness.report_ready(info, "fetching its shard index" if stuck else "building its shard index",
                             role="culprit" if stuck or endless else "healthy")
    else:
        harness.report_ready(info, "init_process_group",
                             role="waiting" if stuck or endless else "healthy")
    if slow and stuck:
        fetch_shard_index(info.rank)
    build_shard_index(info.rank, (float("inf") if endless else BUILD_SECONDS) if slow else 0.1)
    harness.init_distributed(info, file_store=file_store)  # WAITING
    harness.train_plainly(info, range(STEPS))


if __name__ == "__main__":
    main()
