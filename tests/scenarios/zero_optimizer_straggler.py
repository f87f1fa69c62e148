"""Scenario: DDP with torch's ZeroRedundancyOptimizer (ZeRO-1); one rank never reaches the step.

Each rank keeps the optimizer state of a shard of the parameters and, after its own update,
broadcasts its shard to the others (``_sync_params``: asynchronous broadcasts, then a wait on
their handles, in a list comprehension of torch's). Before each optimizer step a rank waits for
its asynchronous snapshot writer to finish copying the parameters (so the update cannot change
them mid-copy). On rank 2 the writer thread dies at step 3 (its disk is full), the copy is
never marked done, and rank 2 waits on that event for ever, past its backward. Ranks 0, 1 and 3
finish backward and their own update and wait in ZeRO's parameter broadcast for rank 2's shard:
the wait's frame is torch's, with no c10d collective above it.
"""

from __future__ import annotations

import threading

import _harness as harness
import _training as training
import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel

DISK_FULL = (2, 3)  # (rank, step) whose snapshot writer fails
STEPS = 1000


class SnapshotWriter:
    """Copies the parameters to host memory on a thread, one snapshot per step."""

    def __init__(self, info: harness.RankInfo) -> None:
        self.info = info
        self.copied = threading.Event()

    def start(self, model: torch.nn.Module, step: int) -> None:
        self.copied.clear()
        threading.Thread(target=self._copy, args=(model, step), name="snapshot-writer",
                         daemon=True).start()

    def _copy(self, model: torch.nn.Module, step: int) -> None:
        if (self.info.rank, step) == DISK_FULL:
            raise OSError(28, "No space left on device", f"/local/snapshots/step{step:06d}.pt")
        _ = [p.detach().clone() for p in model.parameters()]
        self.copied.set()

    def wait_copied(self) -> None:
        self.copied.wait()  # CULPRIT


def train(info: harness.RankInfo) -> None:
    model = DistributedDataParallel(training.build_model())
    optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.SGD,
                                        lr=training.LEARNING_RATE)
    writer = SnapshotWriter(info)
    for step in range(STEPS):
        writer.start(model, step)
        loss = training.compute_loss(model, training.synthetic_batch(info.rank, step))
        loss.backward()
        if step == DISK_FULL[1]:
            role = "culprit" if info.rank == DISK_FULL[0] else "waiting"
            harness.report_ready(info, f"step {step}: " + (
                "waiting for the snapshot copy" if role == "culprit" else "ZeRO's broadcast"),
                role=role)
        writer.wait_copied()
        optimizer.step()  # WAITING
        optimizer.zero_grad()
        harness.log(info, f"step {step} loss {loss.item():.4f}")


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    train(info)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
