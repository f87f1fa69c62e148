"""Scenario (control): rank 0's metrics go to a consumer that drains them slowly. Not a hang.

Rank 0 ships four ~19 KB JSON lines a step (histograms) through the stdin pipe of a child
that reads 4 KiB every 50 ms (~80 KB/s, a slow network upload). The 64 KiB pipe stays full:
rank 0 spends most of each step blocked in write() in the kernel (state S, wchan
anon_pipe_write, the same Python line in every sample), yet its written bytes advance all the
time (too slowly to count as I/O work, and with too little CPU to count as compute) and every
rank logs every step (~1 s). The others wait for it in the gradient all_reduce.
It must never be flagged: a rank caught in a pipe write is not stuck while the pipe drains
(what would make `pipe_write_full`'s rule lie).
"""

from __future__ import annotations

import json
import subprocess
import sys

import _harness as harness
import _training as training
import torch.distributed as dist

HISTOGRAM_BINS = 1800  # ~19 KB a line
LINES_PER_STEP = 4  # ~75 KB a step: ~1 s at the consumer's pace
#: About 30 minutes, the same as the job's time limit.
STEPS = 1800
CONSUMER = (
    "import sys, time\n"
    "while sys.stdin.buffer.read(4096):\n"
    "    time.sleep(0.05)\n"
)


class MetricsShipper:
    """A child process that uploads metric lines slowly; rank 0 only."""

    def __init__(self) -> None:
        self._process = subprocess.Popen([sys.executable, "-c", CONSUMER],
                                         stdin=subprocess.PIPE, bufsize=0)
        assert self._process.stdin is not None
        self._pipe = self._process.stdin

    def send(self, record: dict[str, object]) -> None:
        self._pipe.write((json.dumps(record) + "\n").encode())  # BLOCKS-WHILE-DRAINED


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    shipper = MetricsShipper() if info.rank == 0 else None
    model = training.build_model()
    for step in range(STEPS):
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
        if shipper is not None:
            for part in range(LINES_PER_STEP):
                shipper.send({"step": step, "part": part, "loss": loss,
                              "grad_histogram": [round(loss * i, 3)
                                                 for i in range(HISTOGRAM_BINS)]})
        if step == 3:
            harness.report_ready(info, "training", role="healthy")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
