"""Scenario: a thread holds the GIL in a blocked native call; the rank stops wherever it was.

Each rank ships per-step metrics to a local collector process through a native client: a
"shipper" thread hands each record to the library's blocking write. The library never releases
the GIL around that write (a C extension without Py_BEGIN_ALLOW_THREADS; here libc's write
called through ctypes.PyDLL, which keeps the GIL the same way). On rank 1 the collector stops
reading, the pipe fills, and the write blocks for good with the GIL held: rank 1's main thread
stops at its next switch of the GIL, wherever in the step it is, even on the way back from an
all_reduce. The other ranks wait for rank 1 in the next gradient all_reduce.
"""

from __future__ import annotations

import ctypes
import queue
import subprocess
import threading

import _harness as harness
import _training as training
import torch.distributed as dist

STALLED_RANK = 1
RECORD_BYTES = 16 * 1024  # four records fill a pipe (64 KiB): the fifth write blocks
STEPS = 1000


class MetricsClient:
    """A native client's blocking send to the metrics collector, on a shipper thread."""

    def __init__(self, collector: list[str]) -> None:
        self.collector = subprocess.Popen(collector, stdin=subprocess.PIPE,
                                          stdout=subprocess.DEVNULL)
        self.fd = self.collector.stdin.fileno()  # type: ignore[union-attr]
        self.libc = ctypes.PyDLL("libc.so.6")  # its calls keep the GIL, as the library does
        self.records: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._ship, name="shipper", daemon=True).start()

    def send(self, record: bytes) -> None:
        self.records.put(record)

    def _ship(self) -> None:
        while True:
            record = self.records.get()
            self.libc.write(self.fd, record, len(record))  # CULPRIT


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    # rank 1's collector has stopped reading (it only sleeps); the others' drain the pipe
    stalled = info.rank == STALLED_RANK
    client = MetricsClient(["sleep", "infinity"] if stalled else ["cat"])
    model = training.build_model()
    for step in range(STEPS):
        if step >= 5 and not stalled:  # rank 1 may still finish step 5's all_reduce
            harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
        if stalled and step == 4:
            harness.report_ready(info, "step 4: the shipper's write blocks, GIL held",
                                 role="culprit")
        client.send(f"step={step} loss={loss:.6f} ".encode().ljust(RECORD_BYTES, b" "))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
