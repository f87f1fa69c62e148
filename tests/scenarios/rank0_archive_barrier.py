"""Scenario (control): rank 0 archives the run with a child process while the others wait.

Every EVERY steps rank 0 compresses the run's artefacts with an external tool
(`subprocess.run(["gzip", ...])` on a large file, standing in for `tar`/`zstd`/an evaluation
script) and the others wait in `dist.barrier()`. Rank 0's main thread sits in `waitpid`,
idle, while its child computes at full CPU for tens of seconds; nobody logs. It must never get
a hang verdict: it is child_process_wait's sight (a rank waiting for a child) except that the
child works.
"""

from __future__ import annotations

import os
import subprocess
import tempfile

import _harness as harness
import _training as training
import torch.distributed as dist

EVERY = 3
ARCHIVE_BYTES = 512 << 20
#: Cycles of EVERY steps and one archive: about 30 minutes, the job's time limit.
CYCLES = 20


def archive(directory: str, cycle: int) -> None:
    """Compress a large artefact with gzip -9 (tens of seconds of CPU on this machine)."""
    path = os.path.join(directory, f"events-{cycle}.bin")
    with open(path, "wb") as handle:
        block = os.urandom(1 << 20)
        for _ in range(ARCHIVE_BYTES >> 20):
            handle.write(block)
    subprocess.run(["gzip", "-9", "-f", path], check=True)


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = training.build_model()
    step = 0
    with tempfile.TemporaryDirectory(prefix="archive-") as directory:
        for cycle in range(CYCLES):
            for _ in range(EVERY):
                loss = training.train_step(model, training.synthetic_batch(info.rank, step))
                harness.log(info, f"step {step} loss {loss:.4f}")
                step += 1
            if info.rank == 0:
                harness.log(info, f"archiving {cycle}")
            if cycle == 0:
                harness.report_ready(info, "archive" if info.rank == 0 else "barrier",
                                     role="healthy")
            if info.rank == 0:
                archive(directory, cycle)
            dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
