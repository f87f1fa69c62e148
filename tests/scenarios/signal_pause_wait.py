"""Scenario: a rank waits for a signal that the thread meant to send it never sends.

Each rank hands its checkpoint to an `uploader` thread and, before it trains on, waits with
`signal.pause()` for the SIGUSR1 the uploader sends when the upload is safely stored (a design
copied from a C codebase). On rank 1 the upload raises (its storage token expired) and the
thread dies without sending it: the main thread sleeps in `pause()` for ever, in the kernel
(wchan do_sys_pause), no other thread left. Ranks 0, 2, 3 wait for rank 1 in the next gradient
all_reduce.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import _harness as harness
import _training as training
import torch.distributed as dist

EXPIRED = (1, 3)  # (rank, step) whose upload fails
STEPS = 1000


def upload(rank: int, step: int) -> None:
    time.sleep(0.2)  # storing the checkpoint
    if (rank, step) == EXPIRED:
        raise PermissionError("storage token expired")
    os.kill(os.getpid(), signal.SIGUSR1)  # stored: wake the trainer


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    signal.signal(signal.SIGUSR1, lambda signum, frame: None)
    model = training.build_model()
    for step in range(STEPS):
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
        if step == EXPIRED[1]:
            stuck = info.rank == EXPIRED[0]
            harness.report_ready(info, f"step {step}: " + (
                "signal.pause() for the uploader" if stuck else "gradient all_reduce"),
                role="culprit" if stuck else "waiting")
        if step % 3 == 0:
            # (a signal sent before pause() would be lost: the race this design was born with,
            # which the upload's time hides; the hang here is the signal never sent)
            threading.Thread(target=upload, args=(info.rank, step), name="uploader").start()
            signal.pause()  # CULPRIT
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
