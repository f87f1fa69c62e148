"""Scenario: ranks wait in work.wait() for an async all_reduce the last rank never issues.

Gradients are averaged with an asynchronous all_reduce that overlaps the loss logging;
each rank waits on the returned Work handle before its update. At step 3 the last rank's
batch fails validation: its except-branch skips the step and calls a barrier "so every
rank skips together" -- but no other rank skipped. The other ranks wait in work.wait()
(the all_reduce runs on gloo's worker thread), the last rank in the barrier.
"""

from __future__ import annotations

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

#: (rank, step) whose batch is corrupt; the rank is the last one.
CORRUPT_STEP = 3
STEPS = 1000


class CorruptBatch(ValueError):
    pass


def load_batch(info: harness.RankInfo, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    if info.rank == info.world_size - 1 and step == CORRUPT_STEP:
        raise CorruptBatch(f"rank {info.rank} step {step}: label out of range")
    return training.synthetic_batch(info.rank, step)


def skip_step_everywhere(info: harness.RankInfo, step: int) -> None:
    harness.report_ready(info, f"step {step}: barrier after a corrupt batch", role="culprit")
    dist.barrier()  # CULPRIT


def overlapped_step(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor],
                    info: harness.RankInfo, step: int) -> None:
    loss = training.compute_loss(model, batch)
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    work = dist.all_reduce(flat, async_op=True)
    harness.log(info, f"step {step} loss {loss.item():.4f}")  # overlaps the all_reduce
    if step == CORRUPT_STEP:
        harness.report_ready(info, f"step {step}: work.wait()", role="waiting")
    work.wait()  # WAITING
    flat /= info.world_size
    offset = 0
    for grad in grads:
        grad.copy_(flat[offset:offset + grad.numel()].view_as(grad))
        offset += grad.numel()
    training.sgd_update(model)


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = training.build_model()
    for step in range(STEPS):
        try:
            batch = load_batch(info, step)
        except CorruptBatch as error:
            harness.log(info, f"skipping: {error}")
            skip_step_everywhere(info, step)
            continue
        overlapped_step(model, batch, info, step)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
