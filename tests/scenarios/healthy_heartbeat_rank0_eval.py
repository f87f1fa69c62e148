"""Scenario (control): `heartbeat_group_hang`'s health thread on a healthy job whose rank 0
evaluates alone for seconds while the others wait in a barrier on the default group.

Every third step rank 0 computes an evaluation in Python for ~4 s (its own code, the GIL held
by turns) and the other ranks wait for it in `dist.barrier()`; meanwhile every rank's health
thread all_reduces on a second gloo group ten times a second. The waiting ranks' default-group
workers sleep through the look while their connections carry the health checks: the liar of
the rule that sets such data apart (it must leave what the stacks say of a rank-gated phase,
not make it a hang). It must never get a hang verdict.
"""

from __future__ import annotations

import time

import _harness as harness
import _training as training
import torch.distributed as dist
from heartbeat_group_hang import start_health_check

STEPS = 400
EVAL_EVERY = 3
EVAL_SECONDS = 4.0


def evaluate(seconds: float) -> float:
    """A slow evaluation in Python: per-sample metrics over a synthetic test set."""
    total, count, until = 0.0, 0, time.monotonic() + seconds
    while time.monotonic() < until:
        total += sum((i % 7) * 0.5 for i in range(2000))
        count += 1
    return total / max(count, 1)


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    start_health_check()
    model = training.build_model()
    for step in range(STEPS):
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
        if step % EVAL_EVERY == EVAL_EVERY - 1:
            if info.rank == 0:
                harness.log(info, f"step {step} eval {evaluate(EVAL_SECONDS):.2f}")
            dist.barrier()
        if step == 0:
            harness.report_ready(info, "training with rank-0 evaluations", role="healthy")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
