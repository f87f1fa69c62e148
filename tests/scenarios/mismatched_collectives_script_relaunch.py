"""Scenario: mismatched_collectives, the script starting its own node's other ranks.

One srun task per node runs this script. Like PyTorch Lightning's subprocess script launcher
(what Lightning uses when Slurm does not start one task per device: an interactive allocation,
a script run straight from the batch file), the process srun started is local rank 0: it runs
its own command line again for local ranks 1..n-1, with LOCAL_RANK, NODE_RANK and WORLD_SIZE in
their environment and no RANK, and then trains as well. A rank is NODE_RANK x n + LOCAL_RANK;
the children inherit the task's SLURM_PROCID. The training loop is mismatched_collectives':
rank 1 (node 0's child) calls all_gather at step 3 while the others wait in the gradient
all_reduce.
"""

from __future__ import annotations

import os
import subprocess
import sys

import _harness as harness
import mismatched_collectives
import torch.distributed as dist

PROCESSES_PER_NODE = 2


def start_local_ranks() -> list[subprocess.Popen]:
    """In the process srun started: set the contract, then re-run this command line for the
    node's other local ranks (Lightning's _SubprocessScriptLauncher does the same)."""
    nodes = int(os.environ["SLURM_NNODES"])
    os.environ["MASTER_ADDR"] = harness.master_address()
    os.environ["MASTER_PORT"] = str(harness.derived_ports(harness.job_id())[0])
    os.environ["NODE_RANK"] = os.environ["SLURM_NODEID"]
    os.environ["LOCAL_RANK"] = "0"
    os.environ["WORLD_SIZE"] = str(nodes * PROCESSES_PER_NODE)
    command = [sys.executable, os.path.abspath(sys.argv[0]), *sys.argv[1:]]
    return [subprocess.Popen(command, env=dict(os.environ, LOCAL_RANK=str(local)))
            for local in range(1, PROCESSES_PER_NODE)]


def main() -> None:
    children = [] if "LOCAL_RANK" in os.environ else start_local_ranks()
    local = int(os.environ["LOCAL_RANK"])
    node = int(os.environ["NODE_RANK"])
    info = harness.RankInfo(rank=node * PROCESSES_PER_NODE + local,
                            world_size=int(os.environ["WORLD_SIZE"]), local_rank=local,
                            node_rank=node, launcher="script")
    harness.setup(info)
    harness.init_distributed(info)
    mismatched_collectives.train(info)
    dist.destroy_process_group()
    for child in children:
        child.wait()


if __name__ == "__main__":
    main()
