"""Scenario: dead_rank under a launcher of the job's own that never reaps the dead rank.

One srun task per node runs this script as the node's launcher (mismatched_collectives_
subprocess's, which this script reuses): it starts the node's 2 ranks with `subprocess.Popen`, each told its rank on its
command line, and waits for them in order. Rank 3 (node 2's second) raises FileNotFoundError
before init_process_group and exits 1; its launcher still waits for rank 2, which waits in
init_process_group for rank 3 with ranks 0 and 1, so rank 3 is never reaped: a zombie (state
Z), its pid still listed, nothing to dump. The traceback is in the job log.
"""

from __future__ import annotations

import argparse
import sys

from mismatched_collectives_subprocess import PROCESSES_PER_NODE, launch


def run_rank(argv: list[str]) -> None:
    import _harness as harness
    import dead_rank
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
    if info.rank == dead_rank.MISSING_SHARD_RANK:
        harness.report_ready(info, "open_shard_index: missing index", role="dead")
    dead_rank.open_shard_index(info.rank)
    harness.report_ready(info, "init_process_group", role="waiting")
    harness.init_distributed(info)  # WAITING
    dead_rank.train(info)
    dist.destroy_process_group()


if __name__ == "__main__":
    if len(sys.argv) > 1:
        run_rank(sys.argv[1:])
    else:
        sys.exit(launch(__file__))
