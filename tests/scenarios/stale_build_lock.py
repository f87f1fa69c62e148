"""Scenario: one node's ranks wait for ever on the lock file of a build that died.

Every rank JIT-builds the job's fused kernels into its node's build directory the way torch's
`cpp_extension.load` does: the first rank to create `<build dir>/lock` (`FileBaton`,
O_CREAT|O_EXCL) builds, the others `FileBaton.wait()`: sleep 0.1 s while the file exists.
On node 1 an earlier run of the job was killed in the middle of its build and left its lock
file (the program writes it first, standing in for that run): ranks 2 and 3 poll for ever,
inside torch's own code, at the line of the job that called `wait()`. Node 0's ranks built
and wait in the first step's all_reduce.

By stacks: two ranks asleep outside any collective (a poll loop in a library), two in a
collective: the culprit's line is the job's call into the library, not torch's sleep.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import _harness as harness
from torch.utils.file_baton import FileBaton

#: The node where the earlier run's build was killed.
KILLED_BUILD_NODE = 1


def build_dir(info: harness.RankInfo) -> Path:
    base = Path(os.environ.get("SLURMDIAG_SCENARIO_DIR", "/tmp"))
    folder = base / f"torch-extensions-{harness.job_id()}-node{info.node_rank}" / "fused_ops"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def build_fused_ops(info: harness.RankInfo) -> Path:
    folder = build_dir(info)
    library = folder / "fused_ops.so"
    baton = FileBaton(str(folder / "lock"))
    if baton.try_acquire():
        try:
            time.sleep(0.3)  # the compiler's stand-in
            library.write_bytes(b"\x7fELF")
        finally:
            baton.release()
    else:
        if info.node_rank == KILLED_BUILD_NODE:
            harness.report_ready(info, "FileBaton.wait on the build lock", role="culprit")
        baton.wait()  # CULPRIT
    return library


def main() -> None:
    info = harness.setup()
    if info.node_rank == KILLED_BUILD_NODE:
        (build_dir(info) / "lock").touch()  # the earlier run's lock, left when it was killed
    harness.init_distributed(info)
    build_fused_ops(info)
    if info.node_rank != KILLED_BUILD_NODE:
        harness.report_ready(info, "all_reduce of the first step", role="waiting")
    harness.train_plainly(info, range(1000))


if __name__ == "__main__":
    main()
