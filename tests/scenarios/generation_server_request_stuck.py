"""Scenario: `healthy_generation_server` whose request handler waits on a moderation service.

The same served model; the client asks every 2 s. From the second request on, rank 0's
request handler first asks a moderation service about the prompt (urllib, no timeout) before
it broadcasts the command; the service takes the connection and never answers. Rank 0's main
thread sits in its server's accept loop and ranks 1-3 in the command broadcast, as when the
service is idle; the request stuck on rank 0's handler thread is what differs. Culprit: rank 0,
at the handler's call.
"""

from __future__ import annotations

from healthy_generation_server import main

if __name__ == "__main__":
    main(request_every_s=2.0, moderation_stalls=True)
