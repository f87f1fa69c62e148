"""Scenario (control): a process group created inside a rank-gated branch, which does not hang.

Every 3 steps the evaluation ranks (the first node's, ranks 0 and 1) average their metrics over
a group of their own, built on the spot with ``dist.new_group([0, 1])``. PyTorch's documents
say every rank of the world must call ``new_group``, and the taxonomy has it as a hang; written
as one, it was not: torch 2.13 on gloo builds the group among its members alone, the two
evaluation ranks average their loss and the job goes on, every rank logging every step. A tool
that took the rank-gated ``new_group`` (a collective by its name) for the hang would alarm on
a healthy job.
"""

from __future__ import annotations

import time

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

EVAL_EVERY = 3
EVAL_RANKS = [0, 1]
#: A step reads its batch for this long (a sleep): ~30 minutes of steps, the job's time limit.
STEP_SECONDS = 1.0
STEPS = 1800


def evaluate(info: harness.RankInfo, loss: float) -> float:
    """Average the evaluation ranks' validation loss over their own group."""
    group = dist.new_group(EVAL_RANKS)
    value = torch.tensor([loss])
    dist.all_reduce(value, group=group)
    return float(value) / len(EVAL_RANKS)


def train(info: harness.RankInfo) -> None:
    model = training.build_model()
    for step in range(STEPS):
        if step == EVAL_EVERY + 1:
            harness.report_ready(info, "training, past the first evaluation", role="healthy")
        time.sleep(STEP_SECONDS)  # reading the batch
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
        if info.rank in EVAL_RANKS and step > 0 and step % EVAL_EVERY == 0:
            harness.log(info, f"eval loss {evaluate(info, loss):.4f}")


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    train(info)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
