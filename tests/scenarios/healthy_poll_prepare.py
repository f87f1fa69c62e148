"""Scenario (control): rank 0 prepares the data; the others poll for its marker file.

`rank0_prepare_barrier` written without a collective: rank 0 builds the vocabulary in pure
Python for about PREPARE_SECONDS, then writes a marker; ranks 1-3 poll for the marker
(`while not exists: sleep(0.5)`, asleep at one line). Then every rank trains and logs each
step. It must never get a hang verdict: the sleepers wait for rank 0's work, as in a barrier
(`async_poll_wait`'s rule makes them waiters; this is the job that rule must not turn into a
spinning alarm).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import _harness as harness
import rank0_prepare_barrier as prepare
import torch.distributed as dist

PREPARE_SECONDS = 90.0
POLL_SECONDS = 0.5
STEPS = 1200


def marker() -> Path:
    folder = Path(os.environ.get("SLURMDIAG_SCENARIO_DIR", "/tmp")) / f"prepared-{harness.job_id()}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / "_READY"


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    ready = marker()
    harness.report_ready(info, "preparing the data" if info.rank == 0 else "polling",
                         role="healthy")
    if info.rank == 0:
        vocabulary = prepare.build_vocabulary(PREPARE_SECONDS)
        ready.write_text(f"{len(vocabulary)}\n")
    else:
        while not ready.exists():
            time.sleep(POLL_SECONDS)
    harness.train_plainly(info, range(STEPS))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
