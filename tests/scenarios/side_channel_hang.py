"""Scenario: `mismatched_collectives` while every rank reports its liveness to its neighbour over
a TCP connection of its own.

Before training, every rank listens on a port of its own (published on the job's store) and
connects to the next rank's; a daemon thread sends a status line every 0.1 s, another reads the
previous rank's (a hand-made liveness ring between ranks, no process group). At step 3 rank 1
calls all_gather while ranks 0, 2 and 3 call the gradient all_reduce: the training hangs, the
ring keeps talking, rank to rank. Culprit: rank 1.
"""

from __future__ import annotations

import socket
import threading
import time

import _harness as harness
import torch.distributed as dist
from mismatched_collectives import train
from torch.distributed import distributed_c10d

#: Seconds between two status lines.
PERIOD_S = 0.1


def report_alive(conn: socket.socket, rank: int) -> None:
    """Tell the next rank this one is alive, for as long as the process lives."""
    while True:
        conn.sendall(f"rank {rank} alive {time.time():.1f}\n".encode())
        time.sleep(PERIOD_S)


def listen_to(conn: socket.socket) -> None:
    """Read the previous rank's status lines (a watchdog would check their times)."""
    while conn.recv(4096):
        pass


def start_liveness_ring(info: harness.RankInfo) -> None:
    store = distributed_c10d._get_default_store()
    server = socket.create_server(("0.0.0.0", 0))
    store.set(f"alive_port_{info.rank}", str(server.getsockname()[1]))
    store.set(f"alive_host_{info.rank}", socket.gethostbyname(socket.gethostname()))
    peer = (info.rank + 1) % info.world_size
    port = int(store.get(f"alive_port_{peer}"))
    host = store.get(f"alive_host_{peer}").decode()
    out = socket.create_connection((host, port))
    incoming, _ = server.accept()
    threading.Thread(target=report_alive, args=(out, info.rank), name="alive-send",
                     daemon=True).start()
    threading.Thread(target=listen_to, args=(incoming,), name="alive-recv", daemon=True).start()


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    start_liveness_ring(info)
    train(info)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
