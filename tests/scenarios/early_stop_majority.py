"""Scenario: three of four ranks stop training early on their own validation shards.

`early_stop_local`'s twin the other way round: the same program, where the shards of ranks 1-3
are the easy ones. They reach the target accuracy at step 3, leave the training loop and wait
in the `wait_for_everyone()` barrier; rank 0 alone goes on to step 4 and waits in the gradient
all_reduce. The ranks that diverged are the majority: the job that makes a rule blaming the
smallest group of ranks lie.
"""

from __future__ import annotations

import early_stop_local as early_stop

if __name__ == "__main__":
    early_stop.main(easy=frozenset({1, 2, 3}))
