"""Scenario: a rank closes its metrics writer and joins a thread that was never told to stop.

Each rank writes its per-step metrics through a background writer thread fed by a queue; at
every epoch's end the trainer closes the writer (put the sentinel, join the thread) and opens
a new file. On rank 3 the close path returns early from the sentinel's put when the epoch had
no metrics to flush (a refactor moved the put under the check), so its main thread waits in
`Thread.join()` for a thread idle in `queue.get()`, forever. Ranks 0, 1, 2 wait for rank 3 in
the next step's gradient all_reduce. Nothing is spinning; no thread of rank 3 holds a socket.
"""

from __future__ import annotations

import json
import os
import queue
import tempfile
import threading

import _harness as harness
import _training as training
import torch.distributed as dist

EPOCH_STEPS = 3
STEPS = 1000
#: The rank whose writer sees an epoch without metrics to flush.
QUIET_RANK = 3
_STOP = object()


class MetricsWriter:
    """Appends JSON lines to a file from a background thread."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.pending = 0
        self._queue: queue.Queue[object] = queue.Queue()
        self._thread = threading.Thread(target=self._write, name="metrics-writer", daemon=True)
        self._thread.start()

    def _write(self) -> None:
        with open(self.path, "a", encoding="utf-8") as out:
            while True:
                item = self._queue.get()
                if item is _STOP:
                    return
                out.write(json.dumps(item) + "\n")
                self.pending -= 1

    def record(self, metrics: dict[str, float]) -> None:
        self.pending += 1
        self._queue.put(metrics)

    def close(self, flushed_elsewhere: bool) -> None:
        if not flushed_elsewhere:
            self._queue.put(_STOP)
        self._thread.join()  # CULPRIT


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = training.build_model()
    directory = tempfile.mkdtemp(prefix="metrics-")
    writer = MetricsWriter(os.path.join(directory, "epoch0.jsonl"))
    for step in range(STEPS):
        if step and step % EPOCH_STEPS == 0:
            if info.rank == QUIET_RANK:
                harness.report_ready(info, f"step {step}: joins its metrics writer", role="culprit")
            else:
                harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
            # the quiet rank's last epoch was logged by its checkpoint hook: nothing to flush
            writer.close(flushed_elsewhere=info.rank == QUIET_RANK)
            writer = MetricsWriter(os.path.join(directory, f"epoch{step // EPOCH_STEPS}.jsonl"))
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        writer.record({"step": step, "loss": loss})
        harness.log(info, f"step {step} loss {loss:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
