"""Control: `srun --multi-prog`, the leader's tracker slow, the job healthy.

Task 0 runs tests/scenarios/_multi_prog_leader.py --slow-tracker 3, tasks 1-3 this file. Before
each step the leader reports to its run tracker, which answers 3 s late; the leader waits in
recv() for it, then joins the step's gradient all_reduce, where ranks 1-3 have waited for it.
Each step takes ~3 s for every rank and every rank logs it. In a look of a few seconds the
leader is most often in recv() in every sample and ranks 1-3 in the all_reduce:
multi_prog_leader_stalled's sight, but every answer comes. Must not be flagged.
"""

from __future__ import annotations

import _harness as harness
import _training as training
import torch.distributed as dist

STEPS = 1000


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    harness.train_healthy(info, range(STEPS), lambda step: training.synthetic_batch(info.rank, step))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
