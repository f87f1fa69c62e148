"""Scenario: the last rank waits for a child process that waits for a lock the rank holds.

Every rank appends its metrics to a log it opens with an exclusive flock, so that a second
job pointed at the same directory fails loudly instead of interleaving lines. At the end of
step 3 the last rank archives the log with `flock <log> cp <log> <archive>`, so that the
copy never sees a half-written line: the child `flock` opens the file afresh and waits for
the lock its own parent holds. The rank blocks in subprocess.run (its main thread in
os.waitpid, the child asleep in the kernel's flock wait); the other ranks wait in step 4's
gradient all_reduce.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import tempfile
from pathlib import Path
from typing import IO

import _harness as harness
import _training as training
import torch.distributed as dist

ARCHIVE_AT_STEP = 3
STEPS = 1000


def open_metrics_log(rank: int) -> tuple[Path, IO[str]]:
    directory = Path(os.environ.get("SLURMDIAG_SCENARIO_DIR") or tempfile.gettempdir())
    path = directory / f"metrics-rank{rank}.log"
    stream = path.open("a")
    fcntl.flock(stream.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # one writer per file
    return path, stream


def archive_metrics(path: Path) -> None:
    """Copy the metrics log aside under its lock, so no half-written line is copied."""
    archive = path.with_suffix(".archived")
    subprocess.run(["flock", str(path), "cp", str(path), str(archive)], check=True)  # CULPRIT


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    path, metrics = open_metrics_log(info.rank)
    model = training.build_model()
    archiving_rank = info.world_size - 1
    for step in range(STEPS):
        if step == ARCHIVE_AT_STEP + 1:
            harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        metrics.write(f"step {step} loss {loss:.4f}\n")
        metrics.flush()
        harness.log(info, f"step {step} loss {loss:.4f}")
        if info.rank == archiving_rank and step == ARCHIVE_AT_STEP:
            harness.report_ready(info, f"step {step}: flock cp of the metrics log", role="culprit")
            archive_metrics(path)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
