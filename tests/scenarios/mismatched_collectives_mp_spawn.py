"""Scenario: mismatched_collectives, launched with torch.multiprocessing.spawn.

One srun task per node runs this script, which starts one process per "GPU" with mp.spawn,
the way the PyTorch DDP tutorial does: the ranks are the spawned children, their rank is
computed in the spawned function, and nothing in their environment says which rank they are.
The training loop is mismatched_collectives': rank 1's batch at step 3 holds an inf, so it
calls all_gather while the others wait in the gradient all_reduce.
"""

from __future__ import annotations

import os

import _harness as harness
import mismatched_collectives
import torch.distributed as dist
import torch.multiprocessing as mp

PROCESSES_PER_NODE = 2


def run(local_rank: int, nprocs: int) -> None:
    """One process per device: what mp.spawn calls with the process index first."""
    node_rank = int(os.environ["SLURM_NODEID"])
    rank = node_rank * nprocs + local_rank
    world_size = int(os.environ["SLURM_NNODES"]) * nprocs
    info = harness.RankInfo(rank=rank, world_size=world_size, local_rank=local_rank,
                            node_rank=node_rank, launcher="mp.spawn")
    harness.setup(info)
    harness.init_distributed(info)
    mismatched_collectives.train(info)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(PROCESSES_PER_NODE,), nprocs=PROCESSES_PER_NODE)
