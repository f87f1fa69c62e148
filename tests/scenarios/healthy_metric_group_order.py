"""Control: ``metric_group_order`` fixed, every rank reduces its tasks' metrics in one order.

The same program, ``main(ordered=True)``: both evaluations run on the thread pool every step
and each rank all_reduces ``qa`` and then ``summaries`` over their own all-rank groups. Rank 3's
``qa`` still takes 0.6 s, so ranks 0-2 wait for it in ``qa``'s all_reduce every step, and a look
can catch ranks at the one all_reduce line on the two groups (a rank that left ``qa``'s first):
the liar of the rule that reads a rank's collective as on another group than the others' when
its address is not the group its dict names.
"""

from __future__ import annotations

import metric_group_order as job

if __name__ == "__main__":
    job.main(ordered=True)
