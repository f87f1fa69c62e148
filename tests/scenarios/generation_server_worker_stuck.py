"""Scenario: `healthy_generation_server` whose shard on rank 2 never answers a request.

The same served model; the client asks every 2 s. Rank 2's shard keeps a cache of prompt
states under a lock, and its first request returned early without releasing it (no
`finally`): on the second request rank 2 waits for that lock for ever. Rank 0's request
handler thread waits in the logits' all_reduce with ranks 1 and 3, rank 0's main thread in its
server's accept loop, as when the service is idle: the rule that calls a serving rank idle must
not hide the request stuck on a thread. Culprit: rank 2.
"""

from __future__ import annotations

from healthy_generation_server import main

if __name__ == "__main__":
    main(stuck_rank=2, request_every_s=2.0)
