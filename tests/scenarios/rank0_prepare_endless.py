"""Scenario: rank 0's data preparation never ends while the others wait in a barrier.

`rank0_prepare_barrier`'s hung twin: the same program, whose vocabulary must reach more
distinct tokens than the corpus holds, so rank 0 counts forever in Python (GIL held, its line
moving) and ranks 1-3 wait in `dist.barrier()`. The job that makes the rank-gated-phase rule
lie: for a look of a few seconds it is the healthy preparation's sight.
"""

from __future__ import annotations

import rank0_prepare_barrier as prepare

if __name__ == "__main__":
    prepare.main(endless=True)
