"""Scenario (control): every rank saves its own checkpoint shard, the larger shards for longer.

Every EVERY steps each rank writes its shard of the model state (sharded checkpointing: no
rank-0 gather) with `torch.save`, each file flushed with `os.fsync`, for a time that grows with
its shard (SAVE_SECONDS[rank]), then goes on to the next step. A rank done early waits for the
others in the next gradient all_reduce; while the look lasts most ranks are in file writes and
fsyncs, their I/O counters growing, and nobody logs. It must never get a hang verdict.
"""

from __future__ import annotations

import tempfile

import _harness as harness
import _training as training
import torch.distributed as dist
from rank0_checkpoint_barrier import save_checkpoint

EVERY = 3
#: Seconds of writing a save takes on each rank (the shards' sizes differ).
SAVE_SECONDS = (2.0, 27.0, 52.0, 77.0)
STEPS = 60


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = training.build_model()
    with tempfile.TemporaryDirectory(prefix="shards-") as directory:
        for step in range(STEPS):
            if step and step % EVERY == 0:
                if step == EVERY:
                    harness.report_ready(info, f"step {step}: saving its shard", role="healthy")
                seconds = SAVE_SECONDS[info.rank % len(SAVE_SECONDS)]
                parts = save_checkpoint(directory, seconds)  # each rank its own directory
                harness.log(info, f"checkpoint at step {step}: {parts} files")
            loss = training.train_step(model, training.synthetic_batch(info.rank, step))
            harness.log(info, f"step {step} loss {loss:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
