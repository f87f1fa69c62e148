"""Scenario: the dedicated evaluator hangs in its own code, and the trainers stop behind it.

`healthy_eval_rank`'s hung twin (the same program, ``main(stuck=True)``): after its third
evaluation rank 3 posts the result to a metrics service that takes the connection and never
answers, with no timeout: idle in ``recv`` for ever. Rank 0 then waits in the next weights'
broadcast on the evaluation group (0, 3), and ranks 1-2 wait for rank 0 in their group's
gradient all_reduce (0-2). Rank 3 is in no group ranks 1-2 wait on, yet the one they wait for
waits for it: the liar of the rule that sets apart ranks outside the waiting ranks' groups.
"""

from __future__ import annotations

import healthy_eval_rank as job

if __name__ == "__main__":
    job.main(stuck=True)
