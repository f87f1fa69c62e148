"""Scenario: one node's ranks knock at a rendezvous port nobody listens on.

The batch script exports MASTER_PORT, but the job's second node also sources a launch
environment left there by an earlier job (a module file, a shell profile), which sets the
port that job used. Ranks 2 and 3 (node 1) connect to MASTER_ADDR at that stale port: the
connection is refused, and torch's store client retries until its timeout (the process
group's, 2 h), printing "failed to connect" now and then. Rank 0 hosts the store on the right
port and waits in the store's constructor for the world's clients; rank 1 joined it and waits
in gloo's full-mesh connect for the addresses of ranks 2 and 3.

By stacks alone ranks 0, 2 and 3 sit at the same line (the TCPStore call of torch's
rendezvous) and rank 1 apart: "the smallest group" would blame rank 1, the one rank that got
furthest. The culprits are ranks 2 and 3; their sockets and system calls say why (a connect
refused again and again, no connection to the store).
"""

from __future__ import annotations

import os

import _harness as harness
import torch.distributed as dist

#: Node 1 of the job exports the port an earlier job used.
STALE_NODE = 1
STALE_PORT_OFFSET = 17


def rendezvous_port(info: harness.RankInfo, stale_node: int) -> int:
    """MASTER_PORT as the rank's node sees it."""
    port = harness.derived_ports(harness.job_id())[0]
    if info.node_rank == stale_node:
        port += STALE_PORT_OFFSET  # the earlier job's port, from the node's launch environment
    return port


def join_job(info: harness.RankInfo, stale_node: int) -> None:
    os.environ["MASTER_ADDR"] = harness.master_address()
    os.environ["MASTER_PORT"] = str(rendezvous_port(info, stale_node))
    timeout = harness.PROCESS_GROUP_TIMEOUT
    dist.init_process_group("gloo", rank=info.rank, world_size=info.world_size, timeout=timeout)  # CULPRIT


def main(stale_node: int = STALE_NODE) -> None:
    info = harness.setup()
    stale = info.node_rank == stale_node
    harness.report_ready(info, "init_process_group (stale port)" if stale else "init_process_group",
                         role="culprit" if stale else "waiting")
    join_job(info, stale_node)  # WAITING
    harness.train_plainly(info, range(1000))


if __name__ == "__main__":
    main()
