"""Scenario (control): rank 0 saves the checkpoint on a thread; its update waits for the save.

Every EVERY steps rank 0 hands the model's state to a `checkpoint-saver` thread, which writes
it under the saver's `threading.Lock` (`torch.save` of 16 MB files, each flushed with
`os.fsync`, for about SAVE_SECONDS); the training step's weight update takes the same lock, so
that no weight changes while it is being written. So rank 0's main thread waits in `acquire`
for the whole save while its saver thread writes, its I/O counters growing, and ranks 1-3 wait
in the next step's gradient all_reduce. `lock_hang_busy_writer`'s healthy twin: there the lock
is never released and another thread's writing is not the main thread's progress; here it is.
It must never get a hang verdict.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

EVERY = 3
SAVE_SECONDS = 75.0
SHARD_ELEMENTS = 4 << 20  # 16 MB a file
STEPS = 60


class CheckpointSaver:
    """Writes checkpoints on a background thread; ``lock`` is held while one is written."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.lock = threading.Lock()
        self.saves = 0

    def save_async(self, state: dict[str, torch.Tensor]) -> None:
        taken = threading.Event()
        threading.Thread(target=self._save, args=(state, taken), name="checkpoint-saver",
                         daemon=True).start()
        taken.wait()  # the save holds the lock before the step goes on

    def _save(self, state: dict[str, torch.Tensor], taken: threading.Event) -> None:
        with self.lock:
            taken.set()
            shard = torch.randn(SHARD_ELEMENTS)
            deadline = time.monotonic() + SAVE_SECONDS
            part = 0
            while time.monotonic() < deadline:
                path = os.path.join(self.directory, f"ckpt{self.saves}-part{part % 4}.pt")
                with open(path, "wb") as handle:
                    torch.save({"state": state, "part": part, "padding": shard}, handle)
                    handle.flush()
                    os.fsync(handle.fileno())
                part += 1
            self.saves += 1


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = training.build_model()
    with tempfile.TemporaryDirectory(prefix="ckpt-") as directory:
        saver = CheckpointSaver(directory)
        for step in range(STEPS):
            if step and step % EVERY == 0:
                if step == EVERY:
                    harness.report_ready(info, f"step {step}: checkpoint save"
                                         if info.rank == 0 else "all_reduce", role="healthy")
                if info.rank == 0:
                    saver.save_async({k: v.clone() for k, v in model.state_dict().items()})
            loss = training.compute_loss(model, training.synthetic_batch(info.rank, step))
            loss.backward()
            with saver.lock:  # no weight changes while a checkpoint is written
                training.all_reduce_gradients(model)
                training.sgd_update(model)
            harness.log(info, f"step {step} loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
