"""Scenario: one rank loops for ever before it joins, the others wait in init_process_group.

`slow_start_rank`'s other hung twin: the same program, where rank 3's index build never ends
(its time limit is infinite): a pure-Python loop at full CPU, its line moving, before
`init_process_group`. By a look of seconds it is the healthy slow start; the job that makes the
slow-start rule lie.
"""

from __future__ import annotations

import slow_start_rank as start

if __name__ == "__main__":
    start.main(endless=True)
