"""Scenario: the world size counted from a hard-coded number of GPUs a node.

The script computes its world as ``SLURM_NNODES x GPUS_PER_NODE`` with GPUS_PER_NODE = 4,
written for the 4-GPU nodes it was first run on, but the job runs 2 tasks a node (the nodes it
runs on now have 2): 4 processes join a world of 8. Every rank waits in init_process_group
for ranks 4-7, which were never started; no process is at fault, the launch is. Nothing in
the ranks' environment says 8 (their WORLD_SIZE is unset, SLURM_NTASKS is 4): only the
world size their init_process_group call was given.
"""

from __future__ import annotations

import os

import _harness as harness
import torch.distributed as dist

GPUS_PER_NODE = 4


def main() -> None:
    info = harness.setup()
    world_size = int(os.environ["SLURM_NNODES"]) * GPUS_PER_NODE
    os.environ.setdefault("MASTER_ADDR", harness.master_address())
    os.environ.setdefault("MASTER_PORT", str(harness.derived_ports(harness.job_id())[0]))
    harness.report_ready(info, f"init_process_group of a world of {world_size}", role="waiting")
    dist.init_process_group("gloo", rank=info.rank, world_size=world_size)  # CULPRIT
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
