"""Scenario: training is over, one rank never exits, and its heartbeat keeps talking.

exit_waits_uploader with a monitoring heartbeat: every rank also runs a daemon "heartbeat"
thread that sends a status line every 0.2 s to the node's monitoring agent (a child process
standing in for a node agent, which exits when the rank's connection closes). At the end every
rank uploads its final shard in a non-daemon "uploader" thread and returns from main; rank 1's
gateway never answers, so its uploader sits in the socket read and its main thread in
threading._shutdown. Ranks 0, 2, 3 finish and exit 0. On rank 1 strace and tcp_info see data
move all along, but on the heartbeat's connection, not on the one the uploader waits on.

The job that makes an at-exit rule reading "data moved" as "still finishing" lie.
"""

from __future__ import annotations

import io
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

STUCK_RANK = 1
STEPS = 4
HEARTBEAT_EVERY_S = 0.2
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


def start_agent() -> int:
    """The node's monitoring agent (a child process): its port."""
    agent = subprocess.Popen([sys.executable, __file__, "--agent"], stdout=subprocess.PIPE,
                             text=True)
    assert agent.stdout is not None
    return int(agent.stdout.readline())


def serve_agent() -> None:
    """The agent's program: reads one rank's heartbeats until its connection closes."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    print(server.getsockname()[1], flush=True)
    conn, _ = server.accept()
    while conn.recv(65536):
        pass


def send_heartbeats(port: int, rank: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as conn:
        while True:
            status = {"rank": rank, "time": time.time(), "state": "alive"}
            conn.sendall(json.dumps(status).encode() + b"\n")
            time.sleep(HEARTBEAT_EVERY_S)


def upload_shard(url: str, data: bytes) -> None:
    request = urllib.request.Request(url, data=data, method="PUT")
    with CLIENT.open(request) as response:  # CULPRIT
        response.read()


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    gateway = storage_gateway(answers=info.rank != STUCK_RANK)
    GATEWAYS.append(gateway)
    threading.Thread(target=send_heartbeats, args=(start_agent(), info.rank), name="heartbeat",
                     daemon=True).start()
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
    serve_agent() if sys.argv[1:] == ["--agent"] else main()
