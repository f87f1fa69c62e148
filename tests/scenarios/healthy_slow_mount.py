"""Scenario (control): a healthy job that reads its data from a slow network file system.

stalled_mount_read's liar: the same reads of a shard a step, from a FUSE mount that answers
every read 0.7 s late (tests/scenarios/_stalled_mount.py --delay-s). Most dumps find a rank's main thread in read() waiting for the mount's answer
(wchan request_wait_answer) at the same line, step after step; every rank prints one line a
step. It must never be flagged.
"""

from __future__ import annotations

import _harness as harness
import _training as training
import stalled_mount_read
import torch
import torch.distributed as dist

#: About 30 minutes at the mount's pace, the job's time limit.
STEPS = 1800


def read_batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    shard = stalled_mount_read.read_shard(stalled_mount_read.dataset_directory(), rank, step)
    return training.synthetic_batch(rank, step + len(shard))


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    harness.train_healthy(info, range(STEPS), lambda step: read_batch(info.rank, step))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
