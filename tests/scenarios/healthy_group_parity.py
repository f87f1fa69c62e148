"""Control: ``group_parity_resume`` with every checkpoint agreeing (``main(lagging=False)``).

Each step's gradient all_reduce runs on ``comm_groups[step % 2]`` on every rank, steps of a few
milliseconds back to back: a look catches ranks at the one all_reduce line, and a rank that has left one
step's all_reduce for the next one's can be on the other group of the list for a moment (the
liar of the rule that reads a rank on another group than the others' as a disagreement).
"""

from __future__ import annotations

import group_parity_resume as job

if __name__ == "__main__":
    job.main(lagging=False)
