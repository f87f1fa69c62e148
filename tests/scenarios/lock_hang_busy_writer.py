"""Scenario: rank 2 deadlocks on its own lock while its trace writer keeps writing megabytes.

Every rank runs a `trace-writer` thread that appends profiler events to a local trace file
(~4 MB/s, a ring of 32 MB: the file is rewritten from its start when full), the way a
profiler's or a telemetry exporter's background thread does. At step 3 rank 2's metrics
buffer fills and `record()`, holding the buffer's `threading.Lock`, calls `flush()`, which
takes the same non-reentrant lock: its main thread waits in `acquire` forever, while the
writer thread goes on writing, so the process's I/O counters grow by megabytes a second. The
others wait in step 4's gradient all_reduce: the job that makes a rule reading the process's
I/O as the main thread's work call rank 2 busy.
"""

from __future__ import annotations

import collections
import os
import threading
import time
import zlib

import _harness as harness
import _training as training

STUCK_RANK = 2
STUCK_STEP = 3
STEPS = 1000
#: The trace writer: 64 KiB a write, 16 writes every 0.25 s (~4 MB/s), in a 32 MB ring.
CHUNK = 64 << 10
RING = 32 << 20


def write_trace(path: str, packed: bool = False) -> None:
    """The trace writer thread: profiler events appended to a ring file, forever; ``packed``:
    each chunk also compressed for the upload queue, and written without a pause (a busy
    thread writing ~50 MB/s)."""
    event = (b'{"ph": "X", "name": "aten::mm", "dur": 12}\n' * (CHUNK // 44 + 1))[:CHUNK]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    offset = 0
    upload: collections.deque[bytes] = collections.deque(maxlen=64)
    while True:
        for number in range(16):
            if packed:
                upload.append(zlib.compress(event + str(number).encode(), 6))
            os.pwrite(fd, event, offset)
            offset = (offset + CHUNK) % RING
        time.sleep(0.002 if packed else 0.25)


class Metrics:
    """Buffered metrics of one rank; flushed when the buffer is full."""

    def __init__(self, info: harness.RankInfo, capacity: int) -> None:
        self.info, self.capacity = info, capacity
        self.buffer: list[str] = []
        self.lock = threading.Lock()

    def record(self, line: str) -> None:
        with self.lock:
            self.buffer.append(line)
            if len(self.buffer) >= self.capacity:
                harness.report_ready(self.info, "record() flushes under its own lock", role="culprit")
                self.flush()

    def flush(self) -> None:
        with self.lock:  # CULPRIT
            for line in self.buffer:
                harness.log(self.info, line)
            self.buffer.clear()


def main(writers: frozenset[int] | None = None, packed: bool = False) -> None:
    """``writers``: the ranks that run a trace writer (None: every rank); ``packed``: see
    write_trace."""
    info = harness.setup()
    harness.init_distributed(info)
    trace = os.path.join(os.environ.get("SLURMDIAG_SCENARIO_DIR", "."), f"trace{info.rank}.json")
    if writers is None or info.rank in writers:
        threading.Thread(target=write_trace, args=(trace, packed), name="trace-writer",
                         daemon=True).start()
    # rank 2's buffer fills at step 3; the others' never does
    metrics = Metrics(info, capacity=2 * STUCK_STEP + 2 if info.rank == STUCK_RANK else 10**9)
    model = training.build_model()
    for step in range(STEPS):
        if step == STUCK_STEP + 1:
            harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
        metrics.record(f"step {step} loss {loss:.4f}")
        metrics.record(f"step {step} lr 0.01")


if __name__ == "__main__":
    main()
