"""Scenario: the second node's ranks are never started: its wrapper's data staging stalls.

Each srun task runs run_with_staging.sh, which copies the dataset to node-local disk before it
starts python; the copy on the second node never ends (a stalled parallel filesystem read).
Ranks 0 and 1 start and wait in init_process_group for ranks 2 and 3, whose processes do not
exist yet: on their node the job runs only the wrapper, in its copy step.
"""

from __future__ import annotations

import os

import _harness as harness
import torch.distributed as dist


def main() -> None:
    info = harness.setup()
    harness.report_ready(info, "init_process_group, waiting for the second node", role="waiting")
    os.environ.setdefault("MASTER_ADDR", harness.master_address())
    os.environ.setdefault("MASTER_PORT", str(harness.derived_ports(harness.job_id())[0]))
    dist.init_process_group("gloo", rank=info.rank, world_size=info.world_size)  # WAITING
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
