"""Scenario (control): the second node's wrapper stages its data slowly but surely.

Each srun task runs run_with_slow_staging.sh, which copies the node's shard at 1 MB/s before
it starts python on the second node (~2 minutes), and at once on the first. Ranks 0 and 1 start
and wait in init_process_group for ranks 2 and 3, whose processes do not exist yet: on their
node the job runs only the wrapper and its rsync, which moves data all the while. Then every
rank trains (healthy_slow's steps). The liar of staging_stalled's reading: a look during the
copy must not be a hang.
"""

from __future__ import annotations

import _harness as harness
import torch.distributed as dist
from healthy_slow import STEPS, read_batch_slowly


def main() -> None:
    info = harness.setup()
    harness.report_ready(info, "init_process_group, the second node still staging",
                         role="healthy")
    harness.init_distributed(info)
    harness.train_healthy(info, range(STEPS), lambda step: read_batch_slowly(info.rank, step))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
