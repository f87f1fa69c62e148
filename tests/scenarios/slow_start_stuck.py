"""Scenario: one rank hangs before it joins, the others wait in init_process_group.

`slow_start_rank`'s hung twin: the same program, where rank 3 asks a dataset service for its
shard index instead of building it; the service takes the connection and never answers, and
the request has no timeout: rank 3 sits in a socket receive for ever, alive. Ranks 0-2 wait
inside `init_process_group` for it, polling the store: their stacks change between samples.
The job that makes "ranks changed stack between samples" say progressing.
"""

from __future__ import annotations

import slow_start_rank as start

if __name__ == "__main__":
    start.main(stuck=True)
