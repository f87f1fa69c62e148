"""Scenario: `rank_gated_collective` while every rank streams a checkpoint to a storage gateway.

Rank 0 starts a storage gateway (a child process that accepts TCP connections and writes what
it receives nowhere) and publishes its port on the job's store; every rank then runs an upload
thread that sends the gateway 64 KiB every 50 ms, for as long as the process lives (an
asynchronous checkpoint upload, a metrics or log shipper). The training loop is
rank_gated_collective's: rank 0 waits in save_checkpoint's barrier, the others in the next
step's all_reduce. strace sees every rank send all the time; none of it is collectives.
Culprit: rank 0.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import _harness as harness
import torch.distributed as dist
from rank_gated_collective import train
from torch.distributed import distributed_c10d

CHUNK = bytes(64 * 1024)
GATEWAY = (
    "import socket, sys, threading\n"
    "server = socket.create_server(('0.0.0.0', 0))\n"
    "print(server.getsockname()[1], flush=True)\n"
    "def drain(conn):\n"
    "    while conn.recv(1 << 20):\n"
    "        pass\n"
    "while True:\n"
    "    threading.Thread(target=drain, args=(server.accept()[0],), daemon=True).start()\n"
)


def start_gateway() -> tuple[subprocess.Popen[str], int]:
    """Rank 0: the storage gateway, and its port."""
    gateway = subprocess.Popen([sys.executable, "-c", GATEWAY], stdout=subprocess.PIPE, text=True)
    assert gateway.stdout is not None
    return gateway, int(gateway.stdout.readline())


def upload_forever(address: str, port: int) -> None:
    """Stream checkpoint shards to the gateway (UPLOADS)."""
    with socket.create_connection((address, port)) as conn:
        while True:
            conn.sendall(CHUNK)
            time.sleep(0.05)


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    store = distributed_c10d._get_default_store()
    if info.rank == 0:
        _gateway, port = start_gateway()
        store.set("gateway_port", str(port))
    port = int(store.get("gateway_port"))
    threading.Thread(target=upload_forever, args=(os.environ["MASTER_ADDR"], port),
                     name="checkpoint-upload", daemon=True).start()
    train(info)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
