"""Scenario: rank 0 stops training early on its own validation shard and leaves the loop.

Early stopping is decided on each rank's local validation metric instead of the global one.
Rank 0's shard is the easy one: it reaches the target accuracy at step 3, breaks out of the
training loop and waits in the `wait_for_everyone()` barrier before saving the final model.
The other ranks go on to step 4 and wait in the gradient all_reduce.
"""

from __future__ import annotations

import _harness as harness
import _training as training
import torch.distributed as dist

TARGET_ACCURACY = 0.9
STEPS = 1000


def validation_accuracy(rank: int, step: int, easy: frozenset[int]) -> float:
    """Accuracy on this rank's own validation shard; the easy shards reach the target first."""
    return min(0.99, 0.6 + step * (0.1 if rank in easy else 0.02))


def wait_for_everyone(info: harness.RankInfo) -> None:
    harness.report_ready(info, "wait_for_everyone barrier after the loop", role="culprit")
    dist.barrier()  # CULPRIT


def main(easy: frozenset[int] = frozenset({0})) -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = training.build_model()
    for step in range(STEPS):
        if step == 4:
            harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        accuracy = validation_accuracy(info.rank, step, easy)
        harness.log(info, f"step {step} loss {loss:.4f} val_acc {accuracy:.2f}")
        if accuracy >= TARGET_ACCURACY:
            harness.log(info, "target accuracy reached: stopping early")
            break
    wait_for_everyone(info)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
