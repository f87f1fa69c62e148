"""Scenario (control): rank 0 copies the checkpoint to shared storage with a throttled copy
tool while the others wait in a barrier.

The shape of `rsync --bwlimit` (or `cp` to a slow NFS mount) run by rank 0 with
`subprocess.run`: the tool (here a small Python copier, standing in for rsync) writes 256 KiB,
syncs it and sleeps 0.25 s, over and over, for minutes: little CPU, asleep most of the time,
its I/O counters growing ~1 MB/s. Rank 0 sits in `waitpid`, ranks 1-3 in `dist.barrier()`,
nobody logs. It must never get a hang verdict: the child moves data, into files.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import _harness as harness
import _training as training
import torch.distributed as dist

EVERY = 3
CYCLES = 4
CHUNK = 256 << 10
CHUNKS = 1024  # 256 MB: ~4 minutes at ~1 MB/s
PAUSE_S = 0.25


def copy_tool(target: str) -> None:
    """The throttled copier: CHUNK at a time, synced, PAUSE_S apart (rsync --bwlimit's way)."""
    block = bytes(CHUNK)
    with open(target, "wb") as out:
        for _ in range(CHUNKS):
            out.write(block)
            out.flush()
            os.fsync(out.fileno())
            time.sleep(PAUSE_S)
    os.unlink(target)  # the scenario's disk is not the point


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    folder = Path(os.environ.get("SLURMDIAG_SCENARIO_DIR", "/tmp")) / f"shared-{harness.job_id()}"
    folder.mkdir(parents=True, exist_ok=True)
    model = training.build_model()
    step = 0
    for cycle in range(CYCLES):
        for _ in range(EVERY):
            loss = training.train_step(model, training.synthetic_batch(info.rank, step))
            harness.log(info, f"step {step} loss {loss:.4f}")
            step += 1
        if cycle == 0:
            harness.report_ready(info, "copy tool" if info.rank == 0 else "barrier",
                                 role="healthy")
        if info.rank == 0:
            target = str(folder / f"ckpt-{cycle}.pt")
            subprocess.run([sys.executable, __file__, "--copy", target], check=True)
            harness.log(info, f"checkpoint {cycle} copied")
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--copy"]:
        copy_tool(sys.argv[2])
    else:
        main()
