"""Scenario: two threads of one rank take two locks in opposite orders: a classic deadlock.

Every rank keeps its running statistics behind two locks: `stats_lock` (the numbers) and
`io_lock` (the file they are flushed to). The training loop updates the numbers, then flushes
(stats_lock, then io_lock); a `metrics-flusher` thread rotates the file every few steps (io_lock,
then stats_lock, to write a summary). On rank 2 at step 3 both come at once: the main thread holds
stats_lock and waits for io_lock, the flusher holds io_lock and waits for stats_lock, for ever
(made certain here with an event between the two acquires). Ranks 0, 1, 3 wait for rank 2 in the
gradient all_reduce. Nothing runs on rank 2.
"""

from __future__ import annotations

import threading

import _harness as harness
import _training as training
import torch.distributed as dist

DEADLOCK = (2, 3)  # (rank, step)
STEPS = 1000


class RunningStats:
    def __init__(self) -> None:
        self.stats_lock = threading.Lock()
        self.io_lock = threading.Lock()
        self.values: list[float] = []
        self.flusher_holds_io = threading.Event()

    def record_and_flush(self, loss: float, collide: bool) -> None:
        with self.stats_lock:
            self.values.append(loss)
            if collide:
                self.flusher_holds_io.wait()  # the flusher is inside its io_lock now
            with self.io_lock:  # CULPRIT
                pass  # (appends the new value to the file)

    def rotate(self, collide: threading.Event) -> None:
        """The flusher thread: when asked, rotate the file and write a summary of the values."""
        collide.wait()
        with self.io_lock:
            self.flusher_holds_io.set()
            with self.stats_lock:
                summary = sum(self.values) / max(1, len(self.values))
        harness_summary.append(summary)


harness_summary: list[float] = []


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = training.build_model()
    stats = RunningStats()
    collide = threading.Event()
    threading.Thread(target=stats.rotate, args=(collide,), name="metrics-flusher",
                     daemon=True).start()
    for step in range(STEPS):
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
        unlucky = (info.rank, step) == DEADLOCK
        if step == DEADLOCK[1]:
            harness.report_ready(info, f"step {step}: " + (
                "record_and_flush, the two locks crossed" if unlucky else "gradient all_reduce"),
                role="culprit" if unlucky else "waiting")
        if unlucky:
            collide.set()
        stats.record_and_flush(loss, collide=unlucky)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
