"""Scenario: a multiprocessing lock whose holder was killed while it held it.

Every rank shares a small on-disk metrics file with a forked helper process (a "flusher" that
compacts it); a multiprocessing.Lock (a POSIX semaphore in shared memory) guards the file. At
step 3 rank 2's flusher takes the lock and is killed (SIGKILL: the OOM killer's stand-in, in the
middle of its compaction): a semaphore has no owner, so nothing releases it, and rank 2's main
thread waits in the lock's acquire for ever (sem_wait: a futex on shared memory, no CPU), its
own threads holding nothing. Ranks 0, 1, 3 wait in step 3's gradient all_reduce. The liar of a
rule that would look for the lock's holder among the rank's threads.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

import _harness as harness
import _training as training
import torch.distributed as dist

STUCK = (2, 3)  # (rank, step)
STEPS = 1000


def compact(lock, path: Path, die: bool) -> None:  # type: ignore[no-untyped-def]
    """The flusher's work: rewrite the metrics file under the lock."""
    with lock:
        lines = path.read_text().splitlines()[-100:]
        if die:
            os.kill(os.getpid(), signal.SIGKILL)  # killed while holding the lock
        path.write_text("\n".join(lines) + "\n")


def record(lock, path: Path, step: int, loss: float) -> None:  # type: ignore[no-untyped-def]
    with lock, path.open("a") as handle:  # CULPRIT
        handle.write(f"{step} {loss:.4f}\n")


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    context = multiprocessing.get_context("fork")
    lock = context.Lock()
    path = Path(os.environ.get("SLURMDIAG_SCENARIO_DIR", "/tmp")) / f"metrics-{info.rank}.txt"
    path.write_text("")
    model = training.build_model()
    for step in range(STEPS):
        flusher = context.Process(target=compact, args=(lock, path, (info.rank, step) == STUCK),
                                  name="metrics-flusher", daemon=True)
        flusher.start()
        flusher.join()
        if (info.rank, step) == STUCK:
            harness.report_ready(info, f"step {step}: recording its metrics", role="culprit")
        elif step == STUCK[1]:
            harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        record(lock, path, step, loss)
        harness.log(info, f"step {step} loss {loss:.4f}")
        time.sleep(0.05)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
