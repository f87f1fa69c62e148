"""Scenario (control): rank 0 runs an external program while the others wait in a barrier.

Every EVERY steps rank 0 runs the evaluation script on the last checkpoint as a child process
(`subprocess.run([python, "-c", EVALUATION])`, standing in for an evaluation harness, `tar` or
`zstd`) and the others wait in `dist.barrier()`. Rank 0's main thread sits in `waitpid`, idle,
while its child computes at full CPU for about a minute; nobody logs. It must never get a hang
verdict: it is child_process_wait's sight (a rank waiting for a child) except that the child
works.
"""

from __future__ import annotations

import subprocess
import sys

import _harness as harness
import torch.distributed as dist

EVERY = 3
#: The child: a minute of scoring in pure Python, then its result on stdout.
EVALUATION = """
import time
deadline = time.monotonic() + 60
score = 0
while time.monotonic() < deadline:
    score = (score * 31 + sum(i * i for i in range(1000))) % 1000003
print(score)
"""
#: Cycles of EVERY steps and one evaluation: about 30 minutes, the job's time limit.
CYCLES = 25


def evaluate_checkpoint() -> str:
    done = subprocess.run([sys.executable, "-c", EVALUATION], check=True,
                          capture_output=True, text=True)
    return done.stdout.strip()


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    harness.train_with_rank0_phase(
        info, EVERY, CYCLES, lambda cycle: f"evaluation {cycle}: {evaluate_checkpoint()}",
        "evaluation script")
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
