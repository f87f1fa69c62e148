"""Scenario: a rank is killed, and its forked child keeps its connections open.

Every rank starts a resource monitor with `multiprocessing` (fork) after `init_process_group`:
a loop that samples its parent's memory once a second, so it inherits the rank's gloo
sockets. At step 3 rank 2 is killed outright (SIGKILL: what the kernel's OOM killer does; no
traceback, no atexit). Its monitor lives on, orphaned, still looping, holding a copy of every
socket of rank 2: the peers' connections are never closed, so gloo never raises "Connection
closed by peer" (as it does when a rank dies alone, dead_rank's SLURMDIAG_DEAD_RANK_AFTER_INIT
mode) and ranks 0, 1, 3 wait in the gradient all_reduce for ever. (A `multiprocessing.Pool`
would not do it: its workers close their task queue's writing end and exit on EOF once the
parent is gone.)

What the look sees on rank 2's node: no rank 2, but a Python process with rank 2's
environment (SLURM_PROCID=2), the child of no rank: the job that makes "a process with the
rank's variables is the rank" lie.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import _harness as harness
import _training as training
import torch.distributed as dist

KILLED_RANK = 2
KILLED_AT_STEP = 3
STEPS = 1000


def monitor_memory(parent: int) -> None:
    """Sample the rank's resident memory once a second (for the job's dashboard)."""
    peak = 0
    while True:
        try:
            with open(f"/proc/{parent}/statm") as statm:
                peak = max(peak, int(statm.read().split()[1]))
        except OSError:
            pass  # the rank is gone: keep the last figure
        time.sleep(1.0)


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    monitor = multiprocessing.get_context("fork").Process(  # inherits the gloo sockets
        target=monitor_memory, args=(os.getpid(),), name="memory-monitor", daemon=True)
    monitor.start()
    model = training.build_model()
    for step in range(STEPS):
        if step == KILLED_AT_STEP:
            if info.rank == KILLED_RANK:
                harness.report_ready(info, f"step {step}: killed (SIGKILL)", role="dead")
                os.kill(os.getpid(), signal.SIGKILL)  # CULPRIT
            harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
