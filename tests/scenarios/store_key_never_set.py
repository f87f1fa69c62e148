"""Scenario: ranks wait in a TCPStore get for a key the last rank publishes under another name.

Only the rank that reads the last shard knows where the dataset ends, so it counts the
records and publishes the total in a job-wide TCPStore for everyone's LR schedule. It
formats the key with a dash ("num_records/epoch-0"), the readers without one
("num_records/epoch0"): the readers block in store.get() for a key nobody will ever set,
while the last rank has gone on to the barrier that should let everyone start together.
Eight ranks on four nodes; the culprit is the last rank (7).
"""

from __future__ import annotations

import os

import _harness as harness
import torch.distributed as dist

#: Readers give up after the process-group timeout, as the job's own store does.
STORE_TIMEOUT = harness.PROCESS_GROUP_TIMEOUT
STEPS = 1000


def open_job_store(info: harness.RankInfo) -> dist.TCPStore:
    """A store beside the process group's, on the port after MASTER_PORT; rank 0 hosts it."""
    return dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]) + 1,
                         info.world_size, is_master=info.rank == 0, timeout=STORE_TIMEOUT)


def count_records() -> int:
    """Records in the dataset: the last shard is short, and only its reader sees by how much."""
    return 4096 * 8 + 77


def publish_record_count(store: dist.TCPStore, info: harness.RankInfo, epoch: int) -> None:
    store.set(f"num_records/epoch-{epoch}", str(count_records()))
    harness.report_ready(info, "barrier after publishing the record count", role="culprit")
    dist.barrier()  # CULPRIT


def read_record_count(store: dist.TCPStore, info: harness.RankInfo, epoch: int) -> int:
    harness.report_ready(info, "store.get of the record count", role="waiting")
    return int(store.get(f"num_records/epoch{epoch}"))  # WAITING


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    store = open_job_store(info)
    if info.rank == info.world_size - 1:
        publish_record_count(store, info, epoch=0)
        total = count_records()
    else:
        total = read_record_count(store, info, epoch=0)
    harness.log(info, f"{total} records in the dataset")
    harness.train_plainly(info, range(STEPS))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
