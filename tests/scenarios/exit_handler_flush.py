"""Scenario: one rank's atexit handler waits forever for an acknowledgement.

Every rank registers an atexit handler that flushes its buffered metrics to the metrics
service and waits for its acknowledgement (a socket, no timeout). Each rank's service is a
thread of its own process (a stand-in for the node's agent); rank 3's takes the connection into
its backlog and never answers. After training ranks 0-2 flush, exit with code 0 and are gone;
rank 3's main thread sits in its exit handler's recv, with no frame of the program under it
(atexit runs the handlers from C). No non-daemon thread is involved:
`exit_waits_uploader`'s other shape of a rank that cannot exit.
"""

from __future__ import annotations

import atexit
import json
import socket
import threading

import _harness as harness
import _training as training
import torch.distributed as dist

STUCK_RANK = 3
STEPS = 4
#: The service lives as long as the process (a local would close its socket at return).
SERVICES: list[socket.socket] = []


def metrics_service(answers: bool) -> tuple[str, int]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    SERVICES.append(server)
    if answers:
        threading.Thread(target=acknowledge, args=(server,), name="metrics-service",
                         daemon=True).start()
    return server.getsockname()


def acknowledge(server: socket.socket) -> None:
    while True:
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"ok\n")


def flush_metrics(address: tuple[str, int], buffered: list[dict[str, float]]) -> None:
    with socket.create_connection(address) as conn:
        conn.sendall(json.dumps(buffered).encode() + b"\n")
        conn.recv(16)  # CULPRIT


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    buffered: list[dict[str, float]] = []
    atexit.register(flush_metrics, metrics_service(answers=info.rank != STUCK_RANK), buffered)
    model = training.build_model()
    for step in range(STEPS):
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        buffered.append({"step": step, "loss": loss})
        harness.log(info, f"step {step} loss {loss:.4f}")
    dist.destroy_process_group()
    harness.log(info, "training done")
    if info.rank == STUCK_RANK:
        harness.report_ready(info, "interpreter exit: the atexit flush", role="culprit")
    else:
        harness.report_ready(info, "exits after its flush", role="dead")


if __name__ == "__main__":
    main()
