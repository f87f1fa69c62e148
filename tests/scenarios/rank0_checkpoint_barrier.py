"""Scenario (control): rank 0 writes the checkpoint to disk while the others wait in a barrier.

Every EVERY steps rank 0 saves the model's shards (`if rank == 0: save(...)`, then the barrier
everywhere), each shard written with `torch.save` and flushed to disk with `os.fsync`, for
about SAVE_SECONDS; ranks 1-3 wait in `dist.barrier()` and nobody logs. Rank 0 is in file
writes and fsyncs, its I/O counters growing. It must never get a hang verdict.
"""

from __future__ import annotations

import os
import tempfile
import time

import _harness as harness
import torch
import torch.distributed as dist

EVERY = 3
SAVE_SECONDS = 90.0
SHARD_ELEMENTS = 4 << 20  # 16 MB a shard
#: Cycles of EVERY steps and one save: about 30 minutes, the job's time limit.
CYCLES = 15


def save_checkpoint(directory: str, seconds: float) -> int:
    """Write shards, each flushed to disk, for about ``seconds``; how many were written."""
    shard = torch.randn(SHARD_ELEMENTS)
    deadline = time.monotonic() + seconds
    written = 0
    while time.monotonic() < deadline:
        path = os.path.join(directory, f"shard{written % 8}.pt")
        with open(path, "wb") as handle:
            torch.save({"index": written, "weights": shard}, handle)
            handle.flush()
            os.fsync(handle.fileno())
        written += 1
    return written


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    with tempfile.TemporaryDirectory(prefix="ckpt-") as directory:
        harness.train_with_rank0_phase(
            info, EVERY, CYCLES,
            lambda cycle: f"checkpoint {cycle}: {save_checkpoint(directory, SAVE_SECONDS)} shards",
            "checkpoint save")
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
