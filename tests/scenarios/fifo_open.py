"""Scenario: a rank blocks in the kernel opening its shard manifest, a FIFO nobody writes.

Each rank reads the list of its shard's files from <state_dir>/manifest-rank<R>, written by
a staging daemon before training. On rank 1's node the daemon crashed after creating the
named pipe it streams the manifest through (the setup below makes that FIFO): open() for
reading blocks until a writer opens the other end, which never happens. Rank 1 sits in the
open() call, process state S, its wchan in the kernel's FIFO open; no Python frame moves.
This is the nearest real stand-in for a read from a stalled NFS or Lustre mount (state D),
which this machine cannot produce. The other ranks wait in the first gradient all_reduce.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import _harness as harness
import torch.distributed as dist

#: The rank whose staging daemon died and left a FIFO in place of the manifest.
STALLED_RANK = 1
STEPS = 1000


def stage_manifest(rank: int, path: Path) -> None:
    """What the staging daemon leaves behind: a file, or on the stalled rank an unfed FIFO."""
    path.unlink(missing_ok=True)
    if rank == STALLED_RANK:
        os.mkfifo(path)
    else:
        path.write_text("".join(f"shard-{rank:03d}-{i:05d}.tar\n" for i in range(64)))


def read_manifest(path: Path) -> list[str]:
    with open(path) as manifest:  # CULPRIT
        return manifest.read().split()


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    directory = Path(os.environ.get("SLURMDIAG_SCENARIO_DIR") or tempfile.gettempdir())
    path = directory / f"manifest-rank{info.rank}"
    stage_manifest(info.rank, path)
    role = "culprit" if info.rank == STALLED_RANK else "waiting"
    harness.report_ready(info, "open manifest" if role == "culprit" else "step 0: all_reduce",
                         role=role)
    files = read_manifest(path)
    harness.log(info, f"{len(files)} files in the manifest")
    harness.train_plainly(info, range(STEPS))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
