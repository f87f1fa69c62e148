"""Scenario: a `breakpoint()` left in the code stops one rank at the debugger's prompt.

Someone debugging a loss spike added `breakpoint()` under a divergence check and forgot it.
Launched interactively (srun forwards the terminal to the tasks; here a stream nobody types
into, tests/scenarios/run_interactive.sh), rank 1's batch at step 3 diverges: pdb stops it at
the line after the call and waits for a command on its standard input, the rank idle in a
read; ranks 0, 2, 3 wait in step 3's gradient all_reduce. (From a batch script, stdin is
/dev/null: pdb reads end-of-file and the rank dies with BdbQuit instead.)
"""

from __future__ import annotations

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

DIVERGED_AT = (1, 3)  # (rank, step) whose batch holds a corrupted record
LOSS_LIMIT = 1e4
STEPS = 1000


def batch_for(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    inputs, targets = training.synthetic_batch(rank, step)
    if (rank, step) == DIVERGED_AT:
        inputs = inputs * 1e4  # a record decoded with the wrong scale
    return inputs, targets


def check_divergence(loss: torch.Tensor, step: int) -> None:
    if loss.item() > LOSS_LIMIT:
        breakpoint()  # noqa: T100 - look at the batch
        print(f"step {step}: loss {loss.item():.1f}")  # CULPRIT


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = training.build_model()
    for step in range(STEPS):
        if step == DIVERGED_AT[1] and info.rank != DIVERGED_AT[0]:
            harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
        batch = batch_for(info.rank, step)
        loss = training.compute_loss(model, batch)
        if (info.rank, step) == DIVERGED_AT:
            harness.report_ready(info, f"step {step}: breakpoint", role="culprit")
        check_divergence(loss, step)
        loss.backward()
        training.all_reduce_gradients(model)
        training.sgd_update(model)
        harness.log(info, f"step {step} loss {float(loss):.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
