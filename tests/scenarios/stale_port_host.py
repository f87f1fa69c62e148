"""Scenario: the stale rendezvous port is on the node that hosts the store.

`stale_port_node` with node 0 as the stale one: rank 0 hosts the store at the stale port and
rank 1, on the same node, joins it there; ranks 2 and 3 knock at the right port, where nobody
listens, refused. The ranks that never reached the store are not the ones whose setting is
wrong: the job that makes "the ranks that reached nobody are the culprits" lie. What could
tell the two apart, the port a refused connect() aimed at, the kernel forgets with the
socket's connection (a closed socket is in no table).
"""

from __future__ import annotations

import stale_port_node

if __name__ == "__main__":
    stale_port_node.main(stale_node=0)
