"""Scenario: `srun --multi-prog`, rank 0 a leader with a program of its own, stalled.

The job's step gives task 0 another command than the others (a multi-prog configuration file):
rank 0 runs tests/scenarios/_multi_prog_leader.py --stall-tracker, ranks 1-3 this file. Both
train the same model with the same gradient all_reduce; the leader also reports every step to
the run's tracker, and from step 3 the tracker never answers: the leader waits in recv() before
its all_reduce, ranks 1-3 wait in step 3's all_reduce for it. Culprit: rank 0, the one rank
running another program: the liar of a rule that would take a rank whose command differs from
the others' for a helper or a launcher, or would compare its stack only with the ranks of its
own program.
"""

from __future__ import annotations

import _harness as harness
import torch.distributed as dist

WAIT_STEP = 3
STEPS = 1000


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    harness.train_plainly(info, range(WAIT_STEP))
    harness.report_ready(info, f"step {WAIT_STEP}: gradient all_reduce", role="waiting")
    harness.train_plainly(info, range(WAIT_STEP, STEPS))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
