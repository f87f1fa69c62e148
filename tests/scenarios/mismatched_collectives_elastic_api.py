"""Scenario: mismatched_collectives, launched through torch's elastic launcher API.

One srun task per node runs this script, which calls
``torch.distributed.launcher.api.elastic_launch`` with a function as the entrypoint, as
torchx, Hydra's launchers and in-house launch scripts do: the elastic agent runs inside this
script's process (no torchrun on any command line), and the ranks are its spawned children
running elastic's ``_wrap``. elastic sets RANK, WORLD_SIZE and the rest in ``os.environ``
after a child starts, so /proc/PID/environ of a rank holds none of them.

The global ranks come from the c10d rendezvous, which orders the agents by the address each
gives (``local_addr``, here a loopback address per node, the later node the lower one, as a
node's own IP on the high-speed fabric would be) and not by SLURM_NODEID: ranks 0-1 run on
the job's second node, ranks 2-3 on its first. The training loop is mismatched_collectives':
rank 1's batch at step 3 holds an inf, so rank 1 calls all_gather while the others wait in
the gradient all_reduce.
"""

from __future__ import annotations

import os

import _harness as harness
import mismatched_collectives
import torch.distributed as dist
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

PROCESSES_PER_NODE = 2


def run() -> None:
    """The entrypoint: each rank learns its place from the environment elastic set."""
    info = harness.setup(harness.rank_info())
    harness.init_distributed(info)
    mismatched_collectives.train(info)
    dist.destroy_process_group()


def launch_config() -> LaunchConfig:
    nodes = int(os.environ["SLURM_NNODES"])
    node_id = int(os.environ["SLURM_NODEID"])
    job = harness.job_id()
    return LaunchConfig(
        min_nodes=nodes,
        max_nodes=nodes,
        nproc_per_node=PROCESSES_PER_NODE,
        run_id=f"elastic-{job}",
        rdzv_backend="c10d",
        rdzv_endpoint=f"{harness.master_address()}:{harness.derived_ports(job)[1]}",
        rdzv_configs={"is_host": node_id == 0},
        # the rendezvous sorts the agents by this address: the last node first
        local_addr=f"127.0.0.{2 + nodes - 1 - node_id}",
        max_restarts=0,
        monitor_interval=1,
        start_method="spawn",
    )


if __name__ == "__main__":
    elastic_launch(launch_config(), run)()
