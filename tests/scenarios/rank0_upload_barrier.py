"""Scenario (control): rank 0 uploads a checkpoint, slowly, while the others wait in a barrier.

Every EVERY steps rank 0 uploads the checkpoint (64 MB) to the storage gateway and the others
wait for it in `dist.barrier()` (`if rank == 0: upload(...)`, then the barrier everywhere). The
gateway (a child process, standing in for a remote object store) reads 32 KiB every 0.25 s:
the upload takes minutes, during which rank 0 sits in one blocking send, idle, and nobody
logs. Its connection carries data all along. It must never get a hang verdict: it is
http_no_timeout's sight (a rank idle in a socket call while the others wait) except that
data moves. `rank0_upload_stalled` runs this program with a gateway that stops reading: its
hung twin.
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

EVERY = 3
UPLOAD_BYTES = 64 << 20
READ_BYTES, READ_EVERY_S = 32 << 10, 0.25
#: Cycles of EVERY steps and one upload: about 30 minutes, the job's time limit.
CYCLES = 4
#: urlopen without a timeout; no proxy, so the request goes where the URL says.
CLIENT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def start_gateway(stalled: bool) -> int:
    """The storage gateway (a child process): its port. ``stalled``: it stops reading."""
    gateway = subprocess.Popen([sys.executable, __file__, "--gateway", str(int(stalled))],
                               stdout=subprocess.PIPE, text=True)
    assert gateway.stdout is not None
    return int(gateway.stdout.readline())


def serve_gateway(stalled: bool) -> None:
    """The gateway's program: takes each upload READ_BYTES every READ_EVERY_S, answers 200;
    ``stalled``: reads the request's header, then nothing more."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    print(server.getsockname()[1], flush=True)
    while True:
        conn, _ = server.accept()
        threading.Thread(target=take_upload, args=(conn, stalled), daemon=True).start()


def take_upload(conn: socket.socket, stalled: bool) -> None:
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, READ_BYTES)
    with conn:
        header = b""
        while b"\r\n\r\n" not in header:
            header += conn.recv(READ_BYTES)
        length = int(header.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        while stalled:
            time.sleep(3600)  # a store that stopped taking data, the connection left open
        received = len(header.split(b"\r\n\r\n", 1)[1])
        while received < length:
            time.sleep(READ_EVERY_S)  # a store throttled to READ_BYTES / READ_EVERY_S
            received += len(conn.recv(READ_BYTES))
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")


def upload_checkpoint(url: str, data: bytes) -> None:
    request = urllib.request.Request(url, data=data, method="PUT")
    with CLIENT.open(request) as response:  # CULPRIT
        response.read()


def main(stalled: bool = False) -> None:
    info = harness.setup()
    harness.init_distributed(info)
    port = start_gateway(stalled) if info.rank == 0 else None
    model = training.build_model()
    step = 0
    for cycle in range(CYCLES):
        for _ in range(EVERY):
            loss = training.train_step(model, training.synthetic_batch(info.rank, step))
            harness.log(info, f"step {step} loss {loss:.4f}")
            step += 1
        if cycle == 0:
            role = ("culprit" if port else "waiting") if stalled else "healthy"
            harness.report_ready(info, "checkpoint upload" if port else "barrier", role=role)
        if port is not None:
            upload_checkpoint(f"http://127.0.0.1:{port}/ckpt/{cycle}.pt", bytes(UPLOAD_BYTES))
            harness.log(info, f"checkpoint {cycle} uploaded")
        dist.barrier()  # WAITING
    dist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--gateway"]:
        serve_gateway(stalled=sys.argv[2:] == ["1"])
    else:
        main()
