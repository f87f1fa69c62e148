"""Scenario: rank_gated_collective, its ranks forked with multiprocessing.Process.

One srun task per node forks its ranks with ``multiprocessing.Process`` and Linux's default
start method (fork): each child keeps its parent's command line and environment, so nothing
outside the child's own stack says it is a rank, or which one: the target gets its place on
the node and computes its rank. The parent then waits for them in ``Process.join``. The
training loop is rank_gated_collective's: rank 0 waits in the barrier of its rank-0-only
checkpoint save while the others wait in the next step's gradient all_reduce.
"""

from __future__ import annotations

import multiprocessing
import os

import _harness as harness
import rank_gated_collective
import torch.distributed as dist

PROCESSES_PER_NODE = 2


def worker(local_rank: int, nprocs: int) -> None:
    node_rank = int(os.environ["SLURM_NODEID"])
    rank = node_rank * nprocs + local_rank
    world_size = int(os.environ["SLURM_NNODES"]) * nprocs
    info = harness.RankInfo(rank=rank, world_size=world_size, local_rank=local_rank,
                            node_rank=node_rank, launcher="mp.spawn")
    harness.setup(info)
    harness.init_distributed(info)
    rank_gated_collective.train(info)
    dist.destroy_process_group()


if __name__ == "__main__":
    workers = [multiprocessing.Process(target=worker, args=(i, PROCESSES_PER_NODE))
               for i in range(PROCESSES_PER_NODE)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
