"""Scenario: mismatched_collectives, each node's ranks started by a launcher that gives each
one its LOCAL_RANK in its environment.

One srun task per node runs this script as the node's launcher: it starts the node's ranks with
`subprocess.Popen([python, this script], env={..., "LOCAL_RANK": i})` and waits for them; each
rank computes its global rank as SLURM_NODEID x 2 + LOCAL_RANK. No rank flag on the command
line, no RANK in the environment: the ranks inherit the launcher's SLURM_PROCID (the node's task
number), the same for both ranks of a node, and only LOCAL_RANK tells them apart. The training
loop is mismatched_collectives': rank 1 calls all_gather at step 3 while the others wait in the
gradient all_reduce.
"""

from __future__ import annotations

import os
import subprocess
import sys

PROCESSES_PER_NODE = 2


def launch() -> int:
    ranks = [subprocess.Popen([sys.executable, "-u", os.path.abspath(__file__)],
                              env={**os.environ, "LOCAL_RANK": str(local)})
             for local in range(PROCESSES_PER_NODE)]
    return max(rank.wait() for rank in ranks)


def run_rank() -> None:
    import _harness as harness
    import mismatched_collectives
    import torch.distributed as dist

    local = int(os.environ["LOCAL_RANK"])
    node = int(os.environ["SLURM_NODEID"])
    info = harness.RankInfo(rank=node * PROCESSES_PER_NODE + local,
                            world_size=int(os.environ["SLURM_NNODES"]) * PROCESSES_PER_NODE,
                            local_rank=local, node_rank=node, launcher="subprocess")
    harness.setup(info)
    harness.init_distributed(info)
    mismatched_collectives.train(info)
    dist.destroy_process_group()


if __name__ == "__main__":
    if "LOCAL_RANK" in os.environ:
        run_rank()
    else:
        sys.exit(launch())
