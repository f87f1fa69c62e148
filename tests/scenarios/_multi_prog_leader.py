"""Rank 0's program in the `srun --multi-prog` scenarios: the same training as every rank, plus
what the leader alone does, as jobs that give one task another command do (a leader that owns
the experiment tracker, the checkpoint uploads, the run's bookkeeping).

The leader reports every step to the run's tracker, a service it reaches over TCP (here a thread
of its own stands in for it, answering each report). ``--stall-tracker``: from step 3 the
tracker takes the report and never answers, and the leader, with no timeout, waits in recv()
for ever, before its gradient all_reduce. ``--slow-tracker S``: every answer comes S seconds
late (a loaded tracker), and the leader trains on, each step S seconds long for every rank;
without either, the leader trains as any rank.
"""

from __future__ import annotations

import socket
import sys
import threading
import time

import _harness as harness
import _training as training
import mismatched_collectives
import torch.distributed as dist

STALL_STEP = 3
STEPS = 1000


def serve_tracker(server: socket.socket, stall_from: int | None, delay_s: float = 0.0) -> None:
    """The tracker's stand-in: answer "ok" to each report (``delay_s`` late), until the
    stalling step."""
    conn, _ = server.accept()
    with conn:
        for step in range(STEPS):
            if not conn.recv(4096):
                return
            if stall_from is not None and step >= stall_from:
                threading.Event().wait()  # took the report, never answers
            time.sleep(delay_s)
            conn.sendall(b"ok\n")


def report_step(tracker: socket.socket, step: int, loss: float) -> None:
    tracker.sendall(f"step={step} loss={loss:.4f}\n".encode())
    tracker.recv(16)  # CULPRIT


def main() -> None:
    args = sys.argv[1:]
    stall = "--stall-tracker" in args
    delay_s = float(args[args.index("--slow-tracker") + 1]) if "--slow-tracker" in args else 0.0
    info = harness.setup()
    harness.init_distributed(info)
    server = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=serve_tracker, args=(server, STALL_STEP if stall else None, delay_s),
                     name="tracker", daemon=True).start()
    tracker = socket.create_connection(server.getsockname())
    if delay_s:
        # the leader trains as its peers do, each step waiting for the tracker first
        def next_batch(step: int):  # type: ignore[no-untyped-def]
            report_step(tracker, step, 0.0)
            return training.synthetic_batch(info.rank, step)

        harness.train_healthy(info, range(STEPS), next_batch)
        dist.destroy_process_group()
        return
    if not stall:
        # the leader is an ordinary rank of the mismatched_collectives training
        mismatched_collectives.train(info)
        dist.destroy_process_group()
        return
    model = training.build_model()
    loss = 0.0
    for step in range(STEPS):
        if step == STALL_STEP:
            harness.report_ready(info, f"step {step}: reporting to the tracker", role="culprit")
        report_step(tracker, step, loss)
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
