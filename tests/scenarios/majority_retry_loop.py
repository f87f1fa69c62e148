"""Scenario: most ranks retry a dead service for ever while one waits in the collective.

At step 3 every rank fetches the next data shard's lease from a small coordination service
(an HTTP endpoint here, as a job's own shard scheduler). Rank 3's lease came with the previous
one (a prefetch), so it goes on to step 4's gradient all_reduce. The service went away: ranks
0, 1 and 2 get "connection refused", sleep, back off and try again, for ever (a retry loop
with no limit, as `tenacity`'s `stop=never` or a hand-written `while True` does), idle
between attempts. Three ranks in a loop of their own code, one in the collective: "blame the
smallest group" would name rank 3, the only one at the right place. The culprits are ranks
0-2.
"""

from __future__ import annotations

import socket
import time

import _harness as harness
import _training as training
import torch.distributed as dist

PREFETCHED_RANK = 3
LEASE_STEP = 3
STEPS = 1000
#: The service's address: a loopback port nothing listens on (it went away).
SERVICE = ("127.0.0.1", 9)


def fetch_lease(rank: int, step: int) -> str:
    with socket.create_connection(SERVICE, timeout=5) as conn:
        conn.sendall(f"GET /lease?rank={rank}&step={step}\r\n\r\n".encode())
        return conn.recv(4096).decode()


def lease_with_retries(rank: int, step: int) -> str:  # CULPRIT
    delay = 0.2
    while True:
        try:
            return fetch_lease(rank, step)
        except OSError:
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = training.build_model()
    for step in range(STEPS):
        if step == LEASE_STEP:
            role = "waiting" if info.rank == PREFETCHED_RANK else "culprit"
            harness.report_ready(info, "all_reduce" if role == "waiting" else "lease", role=role)
            if info.rank != PREFETCHED_RANK:
                lease_with_retries(info.rank, step)
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
