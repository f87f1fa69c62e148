"""Scenario: mismatched_collectives, its ranks started as multiprocessing.Process children.

The shape of PyTorch's own "Writing Distributed Applications" tutorial: one srun task per
node runs this script, which sets the spawn start method and starts one
``multiprocessing.Process(target=init_process, args=(rank, size, fn))`` per "GPU", then joins
them. No torch.multiprocessing frame in the children (their stacks start in
multiprocessing's ``BaseProcess._bootstrap``), no RANK in their environment and no rank in
their command lines (``spawn_main ... --multiprocessing-fork``): only the target's arguments
say which rank each one is. The training loop is mismatched_collectives': rank 1's batch at
step 3 holds an inf, so it calls all_gather while the others wait in the gradient all_reduce.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable

import _harness as harness
import mismatched_collectives
import torch.distributed as dist

PROCESSES_PER_NODE = 2


def run(rank: int, size: int) -> None:
    info = harness.RankInfo(rank=rank, world_size=size, local_rank=rank % PROCESSES_PER_NODE,
                            node_rank=rank // PROCESSES_PER_NODE, launcher="mp.spawn")
    harness.setup(info)
    harness.init_distributed(info)
    mismatched_collectives.train(info)
    dist.destroy_process_group()


def init_process(rank: int, size: int, fn: Callable[[int, int], None]) -> None:
    """The tutorial's entry point of each process: its rank and the world's size."""
    fn(rank, size)


def main(start_method: str = "spawn") -> None:
    node_rank = int(os.environ["SLURM_NODEID"])
    size = int(os.environ["SLURM_NNODES"]) * PROCESSES_PER_NODE
    mp.set_start_method(start_method)
    processes = []
    for local_rank in range(PROCESSES_PER_NODE):
        p = mp.Process(target=init_process,
                       args=(node_rank * PROCESSES_PER_NODE + local_rank, size, run))
        p.start()
        processes.append(p)
    for p in processes:
        p.join()


if __name__ == "__main__":
    main()
