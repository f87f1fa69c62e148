"""Scenario: `stale_port_node` under a launch wrapper that retries the rendezvous.

The job's start-up code gives `init_process_group` a short timeout and tries again after a
back-off when it fails (a pattern of launch libraries meant to ride out a slow store). Node 1's
ranks (2 and 3) take a stale MASTER_PORT as in `stale_port_node`: their store connects are
refused for the whole attempt. Rank 0 hosts the store and waits for the world's clients, rank 1
joins it and waits for 2 and 3; every attempt of every rank times out, each sleeps and tries
again, for ever.

Each rank moves between the rendezvous and its back-off sleep: a look catches ranks leaving the
rendezvous or entering it, which by stacks alone is a collective left or reached ("progressing").
No process group ever forms: the culprits are ranks 2 and 3, at the init line.
"""

from __future__ import annotations

import datetime
import os
import time

import _harness as harness
import torch.distributed as dist
from stale_port_node import rendezvous_port

#: Node 1 of the job exports the port an earlier job used.
STALE_NODE = 1
#: Each attempt's timeout and the back-off after it: a look of 2 s often sees a rank change.
ATTEMPT_S = 6.0
BACKOFF_S = 2.0


def join_job(info: harness.RankInfo) -> None:
    os.environ["MASTER_ADDR"] = harness.master_address()
    os.environ["MASTER_PORT"] = str(rendezvous_port(info, STALE_NODE))
    timeout = datetime.timedelta(seconds=ATTEMPT_S)
    attempt = 0
    while True:
        try:
            dist.init_process_group("gloo", rank=info.rank, world_size=info.world_size, timeout=timeout)  # CULPRIT
            return
        except Exception as exc:  # noqa: BLE001 - the wrapper retries whatever the store raised
            attempt += 1
            print(f"rank {info.rank}: rendezvous attempt {attempt} failed ({type(exc).__name__}); "
                  f"retrying in {BACKOFF_S:.0f} s", flush=True)
            time.sleep(BACKOFF_S)


def main() -> None:
    info = harness.setup()
    stale = info.node_rank == STALE_NODE
    harness.report_ready(info, "init_process_group (stale port, retried)" if stale
                         else "init_process_group (retried)",
                         role="culprit" if stale else "waiting")
    join_job(info)  # WAITING
    harness.train_plainly(info, range(1000))


if __name__ == "__main__":
    main()
