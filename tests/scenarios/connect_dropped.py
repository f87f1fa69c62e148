"""Scenario: a rank's connect() to a service whose host drops its packets, retried for ever.

Every few steps each rank asks the job's shard service for the next shard list (a plain TCP
request, no timeout: the client's default). Rank 1's service (on a host whose firewall or
full accept queue drops connection requests: here a listener that never accepts, its queue
filled, so the kernel drops each new SYN) never completes the handshake: rank 1's connect()
sits in SYN_SENT while the kernel retransmits, fails with ETIMEDOUT after ~2 minutes, and
the client retries. The other ranks wait in the next gradient all_reduce.

What the look sees of rank 1: idle in a socket call in its own code, its socket in state
SYN_SENT to the service's address. Not a slow answer (nothing was ever connected), not a
collective: the network below the stacks.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import _harness as harness
import _training as training
import torch.distributed as dist

SLOW_RANK = 1
FROM_STEP = 3
STEPS = 1000

#: The service's host: a listener with a one-slot accept queue, filled and never accepted.
_SERVICE = """
import socket, sys, time
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(0)
filler = socket.create_connection(server.getsockname())  # the one slot of the queue
print(server.getsockname()[1], flush=True)
time.sleep(10**6)
"""


def start_shard_service() -> tuple[subprocess.Popen[str], int]:
    service = subprocess.Popen([sys.executable, "-c", _SERVICE], stdout=subprocess.PIPE, text=True)
    assert service.stdout is not None
    return service, int(service.stdout.readline())


def next_shard_list(port: int, step: int) -> bytes:
    while True:
        conn = socket.socket()
        # as many SYN retries as Linux allows (hours): with the default (~127 s) the retry's
        # one-second sleep below came round during some looks, and the site moved
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_SYNCNT, 127)
        try:
            with conn:
                conn.connect(("127.0.0.1", port))  # CULPRIT
                conn.sendall(f"NEXT {step}\n".encode())
                return conn.recv(65536)
        except OSError:
            time.sleep(1.0)  # the handshake timed out: try again


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    service = start_shard_service() if info.rank == SLOW_RANK else None
    model = training.build_model()
    for step in range(STEPS):
        if step == FROM_STEP + 1:
            harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
        if service is not None and step >= FROM_STEP:
            harness.report_ready(info, f"step {step}: connect to the shard service", role="culprit")
            next_shard_list(service[1], step)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
