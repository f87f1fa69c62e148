"""Scenario: rank 0 waits for an evaluator to connect, and the evaluator never comes.

Every 3 steps rank 0 hands the current weights to an evaluation service: it listens on a port,
writes the address to a file the service polls, and `accept()`s its connection (no timeout).
At step 3 the service is gone (its job was preempted), so rank 0's main thread waits in
`accept()` for ever on a listening socket nobody connects to, while ranks 1-3 wait for it in
the `dist.barrier()` that follows the hand-over.
"""

from __future__ import annotations

import os
import socket
import tempfile

import _harness as harness
import _training as training
import torch.distributed as dist

EVERY = 3
STEPS = 1000


def hand_over_to_evaluator(directory: str, step: int) -> None:
    """Publish an address, wait for the evaluator's connection, send it the step."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        with open(os.path.join(directory, "evaluator.addr"), "w") as handle:
            host, port = server.getsockname()[:2]
            handle.write(f"{host}:{port} {step}\n")
        connection, _ = server.accept()  # CULPRIT
        with connection:
            connection.sendall(b"step %d\n" % step)


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = training.build_model()
    directory = tempfile.mkdtemp(prefix="handover-")
    for step in range(STEPS):
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
        if step and step % EVERY == 0:
            harness.report_ready(info, f"step {step}: " + (
                "accept() of the evaluator" if info.rank == 0 else "barrier"),
                role="culprit" if info.rank == 0 else "waiting")
            if info.rank == 0:
                hand_over_to_evaluator(directory, step)
            dist.barrier()  # WAITING
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
