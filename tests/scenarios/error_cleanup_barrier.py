"""Scenario: a rank's error caught for a clean shutdown that waits for the others.

The training script wraps its loop so that an error is logged and the process group is torn
down "cleanly": ``except (ValueError, RuntimeError, OSError): traceback.print_exc()`` then, in ``finally``, a barrier so
that no rank destroys the group while another still uses it, then destroy_process_group. At
step 3 rank 3's batch fails its shape check (ValueError): its traceback is in the job's log, and
its main thread goes on to the barrier of the cleanup while ranks 0-2 wait in step 3's gradient
all_reduce. Rank 3 is alive, not crashed: the liar of a rule that would read the log's traceback
as the rank's end. Culprit: rank 3, in the cleanup's barrier.
"""

from __future__ import annotations

import traceback

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

BAD_BATCH = (3, 3)  # (rank, step)
STEPS = 1000


def load_batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    inputs, targets = training.synthetic_batch(rank, step)
    if (rank, step) == BAD_BATCH:
        inputs = inputs[:, :-1]  # a record one feature short
    if inputs.shape[1] != training.FEATURES:
        raise ValueError(f"batch of step {step}: {inputs.shape[1]} features, "
                         f"expected {training.FEATURES}")
    return inputs, targets


def train(info: harness.RankInfo) -> None:
    model = training.build_model()
    for step in range(STEPS):
        if step == BAD_BATCH[1] and info.rank != BAD_BATCH[0]:
            harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
        loss = training.train_step(model, load_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    try:
        train(info)
    except (ValueError, RuntimeError, OSError):
        traceback.print_exc()
        harness.report_ready(info, "the cleanup's barrier after its error", role="culprit")
    finally:
        dist.barrier()  # CULPRIT
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
