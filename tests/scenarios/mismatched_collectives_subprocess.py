"""Scenario: mismatched_collectives, each node's ranks started by a launcher of the job's own.

One srun task per node runs this script as the node's launcher: it starts the node's ranks
with `subprocess.Popen`, each given its rank on its command line (`--rank 3 --world-size 4`),
and waits for them, the way small home-grown launchers do; the ranks pass their rank to
`init_process_group` themselves. Nothing in a rank's environment says which rank it is: it
inherits the launcher's SLURM_PROCID (the node's task number), the same for both ranks of a
node. The training loop is mismatched_collectives': rank 1 calls all_gather at step 3 while
the others wait in the gradient all_reduce.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

PROCESSES_PER_NODE = 2


def launch(program: str = __file__) -> int:
    """The node's launcher: start its ranks (``program`` with --rank, --local-rank and
    --world-size), wait for each in turn, exit with the worst status."""
    node_rank = int(os.environ["SLURM_NODEID"])
    world_size = int(os.environ["SLURM_NNODES"]) * PROCESSES_PER_NODE
    ranks = [
        subprocess.Popen([sys.executable, "-u", os.path.abspath(program),
                          "--rank", str(node_rank * PROCESSES_PER_NODE + local),
                          "--local-rank", str(local), "--world-size", str(world_size)])
        for local in range(PROCESSES_PER_NODE)
    ]
    return max(rank.wait() for rank in ranks)


def run_rank(argv: list[str]) -> None:
    import _harness as harness
    import mismatched_collectives
    import torch.distributed as dist

    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--local-rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, required=True)
    args = parser.parse_args(argv)
    info = harness.RankInfo(rank=args.rank, world_size=args.world_size,
                            local_rank=args.local_rank,
                            node_rank=args.rank // PROCESSES_PER_NODE, launcher="subprocess")
    harness.setup(info)
    harness.init_distributed(info)
    mismatched_collectives.train(info)
    dist.destroy_process_group()


if __name__ == "__main__":
    if len(sys.argv) > 1:
        run_rank(sys.argv[1:])
    else:
        sys.exit(launch())
