"""Scenario: an asynchronous checkpoint whose writer threads wait for a rank that skipped it.

Every SAVE_EVERY steps each rank hands its model shard to a background writer thread, which
writes the file and then waits in a barrier on a checkpoint process group (the shape of
torch.distributed.checkpoint's async_save: the checkpoint is complete once every shard is
written), while training goes on. Before it starts a save, the main thread joins the previous
writer. The saver skips a shard that has not changed since its last save; rank 2's shard is
frozen (a pretrained encoder that is not fine-tuned), so from its second save on rank 2 writes
nothing and never enters the barrier. Ranks 0, 1 and 3 go on training until their next save,
where the main thread waits in `join()` for a writer that waits in the barrier; rank 2 goes on
to the next step and waits in the gradient all_reduce for them.
"""

from __future__ import annotations

import os
import threading

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

SAVE_EVERY = 3
FROZEN_RANK = 2
STEPS = 1000


class AsyncCheckpointer:
    """Writes this rank's shard on a thread; a checkpoint is complete when every rank's is."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.group = dist.new_group(backend="gloo")
        self.writer: threading.Thread | None = None
        self.saved_version = -1

    def save(self, shard: dict[str, torch.Tensor], version: int, rank: int) -> None:
        if self.writer is not None:  # the previous checkpoint must be complete first
            self.writer.join()  # WAITING
        if version == self.saved_version:
            return  # nothing changed since the last save: nothing to write
        path = os.path.join(self.directory, f"shard{rank}-v{version}.pt")
        self.writer = threading.Thread(target=self._write, args=(shard, path, version),
                                       name="ckpt-writer", daemon=True)
        self.writer.start()

    def _write(self, shard: dict[str, torch.Tensor], path: str, version: int) -> None:
        torch.save(shard, path)
        dist.barrier(group=self.group)  # every shard written: the checkpoint is complete
        self.saved_version = version


def train_step(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> float:
    """Forward, backward, gradients averaged one parameter at a time, update."""
    loss = training.compute_loss(model, batch)
    loss.backward()
    for param in model.parameters():
        dist.all_reduce(param.grad)  # CULPRIT
        param.grad /= dist.get_world_size()
    training.sgd_update(model)
    return loss.item()


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = training.build_model()
    directory = os.environ.get("SLURMDIAG_SCENARIO_DIR", ".")
    checkpointer = AsyncCheckpointer(directory)
    version = 0
    for step in range(STEPS):
        if info.rank == FROZEN_RANK and step == 2 * SAVE_EVERY + 1:
            harness.report_ready(info, f"step {step}: gradient all_reduce", role="culprit")
        loss = train_step(model, training.synthetic_batch(info.rank, step))
        if info.rank != FROZEN_RANK:
            version = step  # a fine-tuned shard changes every step
        harness.log(info, f"step {step} loss {loss:.4f}")
        if step % SAVE_EVERY == 0:
            if info.rank != FROZEN_RANK and step == 2 * SAVE_EVERY:
                harness.report_ready(info, f"step {step}: join() of the checkpoint writer",
                                     role="waiting")
            checkpointer.save({k: v.clone() for k, v in model.state_dict().items()}, version,
                              info.rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
