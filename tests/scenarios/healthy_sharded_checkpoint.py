"""Scenario (control): every rank saves its own checkpoint shard, the larger shards for longer.

Every EVERY steps each rank writes its shard of the model state (sharded checkpointing: no
rank-0 gather) with `torch.save`, each file flushed with `os.fsync`, for a time that grows with
its shard (SAVE_SECONDS[rank]), then goes on to the next step. A rank done early waits for the
others in the next gradient all_reduce; while the look lasts most ranks are in file writes and
fsyncs, their I/O counters growing, and nobody logs. It must never get a hang verdict.
"""

from __future__ import annotations

import os
import tempfile
import time

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

EVERY = 3
#: Seconds of writing a save takes on each rank (the shards' sizes differ).
SAVE_SECONDS = (2.0, 27.0, 52.0, 77.0)
SHARD_ELEMENTS = 4 << 20  # 16 MB a file
STEPS = 60


def save_shard(directory: str, rank: int, seconds: float) -> int:
    """Write this rank's shard files, each flushed to disk, for about ``seconds``."""
    shard = torch.randn(SHARD_ELEMENTS)
    deadline = time.monotonic() + seconds
    written = 0
    while time.monotonic() < deadline:
        path = os.path.join(directory, f"rank{rank}-part{written % 4}.pt")
        with open(path, "wb") as handle:
            torch.save({"rank": rank, "part": written, "weights": shard}, handle)
            handle.flush()
            os.fsync(handle.fileno())
        written += 1
    return written


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = training.build_model()
    with tempfile.TemporaryDirectory(prefix="shards-") as directory:
        for step in range(STEPS):
            if step and step % EVERY == 0:
                if step == EVERY:
                    harness.report_ready(info, f"step {step}: saving its shard", role="healthy")
                seconds = SAVE_SECONDS[info.rank % len(SAVE_SECONDS)]
                parts = save_shard(directory, info.rank, seconds)
                harness.log(info, f"checkpoint at step {step}: {parts} files")
            loss = training.train_step(model, training.synthetic_batch(info.rank, step))
            harness.log(info, f"step {step} loss {loss:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
