"""Scenario: http_no_timeout on two nodes, its ranks started with torch.multiprocessing.spawn.

One srun task per node runs this script, which spawns one process per "GPU" (the PyTorch DDP
tutorial's way): the ranks are the spawned children, their rank computed in the spawned
function, nothing in their environment saying which rank they are. The last rank (3, on the
second node) posts a heartbeat to a tracker that never answers and sits in the socket read;
ranks 0-2 wait in the next gradient all_reduce, rank 2 on the culprit's own node.
"""

from __future__ import annotations

import os

import _harness as harness
import http_no_timeout
import torch.multiprocessing as mp

PROCESSES_PER_NODE = 2


def run(local_rank: int, nprocs: int) -> None:
    """What mp.spawn calls in each process, its index first."""
    node_rank = int(os.environ["SLURM_NODEID"])
    rank = node_rank * nprocs + local_rank
    world_size = int(os.environ["SLURM_NNODES"]) * nprocs
    http_no_timeout.main(harness.RankInfo(rank=rank, world_size=world_size,
                                          local_rank=local_rank, node_rank=node_rank,
                                          launcher="mp.spawn"))


if __name__ == "__main__":
    mp.spawn(run, args=(PROCESSES_PER_NODE,), nprocs=PROCESSES_PER_NODE)
