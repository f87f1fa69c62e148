"""Scenario: rank 0 blocks in write() on a full pipe to a metrics shipper that stopped reading.

Rank 0 streams per-step metrics (a 20 KB histogram as a JSON line) to a shipper process
through its stdin. The shipper waits for its upstream before it reads anything (here it
is `sh -c 'sleep ...; cat >> file'`), so after about 64 KiB the pipe is full and rank 0's
write() blocks in the kernel: state S, wchan in the pipe write wait, no CPU, the Python
leaf is the write line. A write stuck in the kernel, as on a stalled filesystem. Ranks
1-3 wait in the next gradient all_reduce.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import _harness as harness
import _training as training
import torch.distributed as dist

HISTOGRAM_BINS = 1800  # 12-19 KB of JSON a line (the numbers' lengths vary with the loss)
# padded to whole pages: two lines fill the 64 KiB pipe (16 pages), the third (step 2) blocks.
# With lines of 20,000 bytes (4.9 pages) the kernel took a fourth line in some runs, and rank 0
# said it was blocked a step before it was (make accuracy caught it in the all_reduce).
LINE_BYTES = 32 << 10
STEPS = 1000


class MetricsShipper:
    """A child process that forwards metric lines upstream; rank 0 only."""

    def __init__(self, path: Path) -> None:
        upstream_wait = f"sleep {harness.SAFETY_NET_SECONDS}; cat >> {path}"
        self._process = subprocess.Popen(["sh", "-c", upstream_wait], stdin=subprocess.PIPE,
                                         bufsize=0)
        assert self._process.stdin is not None
        self._pipe = self._process.stdin

    def send(self, record: dict[str, object]) -> None:
        line = json.dumps(record).ljust(LINE_BYTES - 1) + "\n"  # one size: full at step 2
        self._pipe.write(line.encode())  # CULPRIT


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    directory = Path(os.environ.get("SLURMDIAG_SCENARIO_DIR") or tempfile.gettempdir())
    shipper = MetricsShipper(directory / "metrics.jsonl") if info.rank == 0 else None
    model = training.build_model()
    for step in range(STEPS):
        if step == 3:
            harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
        if shipper is not None:
            if step == 2:
                harness.report_ready(info, f"step {step}: write to the shipper's pipe",
                                     role="culprit")
            shipper.send({"step": step, "loss": loss,
                          "grad_histogram": [round(loss * i, 3) for i in range(HISTOGRAM_BINS)]})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
