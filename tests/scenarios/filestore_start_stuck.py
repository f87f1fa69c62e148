"""Scenario: one rank hangs before it joins a rendezvous held in a shared file.

`slow_start_stuck` with torch's FileStore (``init_process_group(init_method="file:///shared/...")``,
the rendezvous of sites whose nodes share a file system and whose jobs set no MASTER_ADDR):
rank 3 asks a dataset service for its shard index, the service never answers, and rank 3 sits
in a socket receive for ever, alive. Ranks 0-2 wait inside `init_process_group` for it, each
polling the shared file; no rank holds a connection to any store, and none should: the liar of
every rule that reads "no connection to the job's store" as "never reached the rendezvous".
"""

from __future__ import annotations

import slow_start_rank as start

if __name__ == "__main__":
    start.main(stuck=True, file_store=True)
