"""Scenario (netns cluster only): one node cannot reach the rendezvous store.

Four nodes, one rank each; MASTER_ADDR is the first node's address on the data network
(SLURMDIAG_SCENARIO_MASTER_ADDR, given by the test: the scenarios' launcher drops MASTER_ADDR
from the submitting shell). Before the job starts, the test adds a route to nowhere on rank 2's
node for that address (a firewall rule's stand-in): rank 2's store connect never succeeds,
and torch's store client retries until its timeout. Rank 0 hosts the store and waits in its
constructor for the world's clients, ranks 1 and 3 joined and wait in gloo's mesh: every rank
inside init_process_group, at one line of the job.
"""

from __future__ import annotations

import os

import _harness as harness
import torch.distributed as dist


def join_job(info: harness.RankInfo) -> None:
    os.environ["MASTER_ADDR"] = os.environ["SLURMDIAG_SCENARIO_MASTER_ADDR"]
    os.environ["MASTER_PORT"] = str(harness.derived_ports(harness.job_id())[0])
    timeout = harness.PROCESS_GROUP_TIMEOUT
    dist.init_process_group("gloo", rank=info.rank, world_size=info.world_size, timeout=timeout)  # CULPRIT


def main() -> None:
    info = harness.setup()
    harness.report_ready(info, "init_process_group", role="waiting")
    join_job(info)  # WAITING
    harness.train_plainly(info, range(100000))


if __name__ == "__main__":
    main()
