"""Scenario (control): rank 0 evaluates the checkpoint in a child Python process while the
others wait in a barrier.

The shape of `subprocess.run([sys.executable, "evaluate.py", ckpt])` on rank 0 alone (an
evaluation kept out of the training process, or a project's own scorer): the child computes
for ~90 s in pure Python (a core at 100 %, its line moving), rank 0 sits in `waitpid` with no
CPU of its own, ranks 1-3 in `dist.barrier()`, nobody logs. It must never get a hang verdict:
rank 0 works through its child, as through a copy tool that moves data.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time

import _harness as harness

EVERY = 3
CYCLES = 4
EVAL_S = 90.0


def evaluate(seconds: float) -> float:
    """The scorer: per-sample metrics in pure Python for ``seconds``."""
    rng = random.Random(0)
    total, count = 0.0, 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        predictions = [rng.random() for _ in range(512)]
        targets = [rng.random() for _ in range(512)]
        total += sum((p - t) ** 2 for p, t in zip(predictions, targets)) / len(targets)
        count += 1
    return total / max(count, 1)


def run_evaluation(cycle: int) -> str:
    done = subprocess.run([sys.executable, __file__, "--evaluate", str(cycle)], check=True,
                          capture_output=True, text=True)
    return f"evaluation {cycle}: {done.stdout.strip()}"


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    harness.train_with_rank0_phase(info, EVERY, CYCLES, run_evaluation, "evaluation in a child")
    import torch.distributed as dist

    dist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--evaluate"]:
        print(f"mse {evaluate(EVAL_S):.4f}")
    else:
        main()
