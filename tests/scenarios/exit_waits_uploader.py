"""Scenario: training is over, but one rank never exits: Python waits for its upload thread.

At the end every rank uploads its final checkpoint shard to the storage gateway in a
non-daemon "uploader" thread (HTTP PUT with urllib, no timeout), so that the upload overlaps
destroy_process_group, then returns from main. Python's shutdown joins non-daemon threads.
Each rank's gateway is a server thread of its own process (a stand-in for the node's gateway);
rank 1's takes the connection into its backlog and never answers. Ranks 0, 2 and 3 finish the
upload and exit with code 0; rank 1's main thread has left the program and waits in
threading._shutdown for its uploader, which sits in the socket read. The job stays RUNNING
with no output, and 3 of its 4 ranks are gone.
A verdict must not blame the ranks that are gone: they finished.
"""

from __future__ import annotations

import io
import socket
import threading
import urllib.request
from collections.abc import Callable

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

STUCK_RANK = 1
STEPS = 4
#: urlopen without a timeout; no proxy, so the request goes where the URL says.
CLIENT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
#: The node's gateway lives as long as the process (a local would close its socket at return).
GATEWAYS: list[socket.socket] = []


def storage_gateway(answers: bool) -> socket.socket:
    """A listening socket standing in for the gateway; ``answers``: a thread replies 200."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    if answers:
        threading.Thread(target=answer_uploads, args=(server,), name="gateway",
                         daemon=True).start()
    return server


def answer_uploads(server: socket.socket) -> None:
    while True:
        conn, _ = server.accept()
        with conn:
            header = b""
            while b"\r\n\r\n" not in header:
                header += conn.recv(65536)
            length = int(header.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            body = header.split(b"\r\n\r\n", 1)[1]
            while len(body) < length:
                body += conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")


def upload_shard(url: str, data: bytes) -> None:
    request = urllib.request.Request(url, data=data, method="PUT")
    with CLIENT.open(request) as response:  # CULPRIT
        response.read()


def main(also: Callable[[harness.RankInfo], None] | None = None) -> None:
    """``also``: more each rank starts once its gateway is up (exit_heartbeat_stuck's
    heartbeat)."""
    info = harness.setup()
    harness.init_distributed(info)
    gateway = storage_gateway(answers=info.rank != STUCK_RANK)
    GATEWAYS.append(gateway)
    if also is not None:
        also(info)
    model = training.build_model()
    for step in range(STEPS):
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    shard = buffer.getvalue()
    url = "http://{}:{}/checkpoints/final/rank{}.pt".format(*gateway.getsockname(), info.rank)
    threading.Thread(target=upload_shard, args=(url, shard), name="uploader").start()
    dist.destroy_process_group()
    harness.log(info, "training done")
    if info.rank == STUCK_RANK:
        harness.report_ready(info, "interpreter exit: joins the uploader", role="culprit")
    else:
        harness.report_ready(info, "exits after its upload", role="dead")


if __name__ == "__main__":
    main()
