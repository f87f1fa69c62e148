"""Scenario (control): rank 0 downloads the next data shard, slowly, while the others wait.

Every EVERY steps rank 0 fetches the next shard (64 MB) from the data service
(`if rank == 0: download(...)`, then the barrier everywhere) and the others wait for it in
`dist.barrier()`. The service (a child process, standing in for a remote object store) sends
32 KiB every 0.25 s: the download takes minutes, during which rank 0 sits in the socket
receive, idle, and nobody logs. Data arrives on its connection all along. It must never get a
hang verdict: it is http_no_timeout's sight (a rank idle in a socket receive while the others
wait) except that data moves.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
import urllib.request

import _harness as harness
import torch.distributed as dist

EVERY = 3
SHARD_BYTES = 64 << 20
SEND_BYTES, SEND_EVERY_S = 32 << 10, 0.25
#: Cycles of EVERY steps and one download: about 30 minutes, the job's time limit.
CYCLES = 4
#: urlopen without a timeout; no proxy, so the request goes where the URL says.
CLIENT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def start_service() -> int:
    """The data service (a child process): its port."""
    service = subprocess.Popen([sys.executable, __file__, "--service"], stdout=subprocess.PIPE,
                               text=True)
    assert service.stdout is not None
    return int(service.stdout.readline())


def serve_shards() -> None:
    """The service's program: answers each GET with SHARD_BYTES, SEND_BYTES every SEND_EVERY_S."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    print(server.getsockname()[1], flush=True)
    while True:
        conn, _ = server.accept()
        threading.Thread(target=send_shard, args=(conn,), daemon=True).start()


def send_shard(conn: socket.socket) -> None:
    with conn:
        request = b""
        while b"\r\n\r\n" not in request:
            request += conn.recv(65536)
        conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {SHARD_BYTES}\r\n"
                     "Connection: close\r\n\r\n".encode())
        chunk = bytes(SEND_BYTES)
        for _ in range(SHARD_BYTES // SEND_BYTES):
            conn.sendall(chunk)
            time.sleep(SEND_EVERY_S)  # a store throttled to SEND_BYTES / SEND_EVERY_S


def download_shard(url: str) -> int:
    with CLIENT.open(url) as response:
        return len(response.read())


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    port = start_service() if info.rank == 0 else None
    harness.train_with_rank0_phase(
        info, EVERY, CYCLES,
        lambda cycle: f"shard {cycle}: {download_shard(f'http://127.0.0.1:{port}/{cycle}')} bytes",
        "shard download")
    dist.destroy_process_group()


if __name__ == "__main__":
    serve_shards() if sys.argv[1:] == ["--service"] else main()
