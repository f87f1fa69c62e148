"""Scenario (control): rank 0 evaluates alone while the others wait for it in a barrier.

The most common shape of a rank-gated phase in real training code:

    if rank == 0:
        evaluate(model, val_set)
    dist.barrier()

Every EVAL_EVERY steps rank 0 runs a validation pass of about EVAL_SECONDS (forward passes
in tensor maths, then per-sample metrics in Python: mixed native and Python, its line moving)
while ranks 1-3 wait in `dist.barrier()`, idle, and nobody logs. For a look of a few seconds
this is the sight of `spinning_rank` (one rank busy, the others waiting for it): it must never
get a hang verdict, since it is the healthy job that would make a spin rule lie.
"""

from __future__ import annotations

import time

import _harness as harness
import torch
import torch.distributed as dist

EVAL_EVERY = 3
EVAL_SECONDS = 90.0
VAL_FEATURES = 256
VAL_BATCH = 64
#: Cycles of EVAL_EVERY steps and one evaluation: about 30 minutes, the job's time limit.
CYCLES = 20


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def evaluate(encoder: torch.nn.Module, seconds: float) -> dict[str, float]:
    """A validation pass: forward in native code, metrics per sample in Python."""
    errors: list[float] = []
    deadline = time.monotonic() + seconds
    batch = 0
    while time.monotonic() < deadline:
        generator = torch.Generator().manual_seed(batch)
        inputs = torch.randn(VAL_BATCH, VAL_FEATURES, generator=generator)
        with torch.no_grad():
            outputs = encoder(inputs)
        for row in outputs.tolist():
            errors.append(sum(abs(x) for x in row) / len(row))
        batch += 1
    return {"batches": float(batch), "mae": sum(errors) / len(errors),
            "p90": percentile(errors, 0.9)}


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    torch.manual_seed(1)
    encoder = torch.nn.Sequential(*(torch.nn.Sequential(
        torch.nn.Linear(VAL_FEATURES, VAL_FEATURES), torch.nn.Tanh()) for _ in range(8)))
    harness.train_with_rank0_phase(
        info, EVAL_EVERY, CYCLES, lambda cycle: f"eval {cycle}: {evaluate(encoder, EVAL_SECONDS)}",
        "evaluation")
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
