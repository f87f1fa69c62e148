"""Scenario (control): training is over and every rank's last upload is slow, not stuck.

`exit_waits_uploader`'s healthy twin. Every rank uploads its final checkpoint (64 MB) in a
non-daemon "uploader" thread and returns from main, so Python's exit waits for the upload.
The storage gateway (a child process of the rank, standing in for a remote service) reads
32 KiB every 0.25 s (128 KiB/s): the upload takes several minutes, and the
uploader sits in one blocking send all along while its connection keeps carrying data. Then
the gateway answers and every rank exits with code 0.

Any look inside those minutes sees what exit_waits_uploader shows (every main thread in
threading._shutdown, the uploader idle in a socket call): must never alarm.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
import urllib.request

import _harness as harness
import _training as training
import torch.distributed as dist

STEPS = 4
UPLOAD_BYTES = 64 << 20
READ_BYTES, READ_EVERY_S = 32 << 10, 0.25
#: urlopen without a timeout; no proxy, so the request goes where the URL says.
CLIENT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def start_gateway() -> tuple[subprocess.Popen[str], int]:
    """The storage gateway: another process (a child, standing in for a remote service), as
    a gateway's reading is not the rank's; its port."""
    gateway = subprocess.Popen([sys.executable, __file__, "--gateway"], stdout=subprocess.PIPE,
                               text=True)
    assert gateway.stdout is not None
    return gateway, int(gateway.stdout.readline())


def serve_gateway() -> None:
    """The gateway's program: takes each upload READ_BYTES every READ_EVERY_S, answers 200."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    print(server.getsockname()[1], flush=True)
    while True:
        conn, _ = server.accept()
        threading.Thread(target=take_upload, args=(conn,), daemon=True).start()


def take_upload(conn: socket.socket) -> None:
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, READ_BYTES)
    with conn:
        header = b""
        while b"\r\n\r\n" not in header:
            header += conn.recv(READ_BYTES)
        length = int(header.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        received = len(header.split(b"\r\n\r\n", 1)[1])
        while received < length:
            time.sleep(READ_EVERY_S)  # a gateway throttled to READ_BYTES / READ_EVERY_S
            received += len(conn.recv(READ_BYTES))
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")


def upload_checkpoint(url: str, data: bytes) -> None:
    request = urllib.request.Request(url, data=data, method="PUT")
    with CLIENT.open(request) as response:
        response.read()


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    _gateway, port = start_gateway()
    model = training.build_model()
    for step in range(STEPS):
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
    url = f"http://127.0.0.1:{port}/checkpoints/final/rank{info.rank}.pt"
    checkpoint = bytes(UPLOAD_BYTES)
    threading.Thread(target=upload_checkpoint, args=(url, checkpoint), name="uploader").start()
    dist.destroy_process_group()
    harness.log(info, "training done")
    harness.report_ready(info, "interpreter exit: joins the uploader (slow, moving)",
                         role="healthy")


if __name__ == "__main__":
    serve_gateway() if sys.argv[1:] == ["--gateway"] else main()
