"""A batch script written in Python (`#!/usr/bin/env python3` under the #SBATCH lines, or a
project's `submit.py` that sbatch runs): it sets things up, then runs the training's srun line
as its child and waits for it. The batch step then holds a Python process with the batch
step's SLURM_PROCID, 0, that is no rank: the ranks are in the srun's step. Stdlib only."""

from __future__ import annotations

import subprocess
import sys


def main(argv: list[str]) -> int:
    print(f"driver: running {' '.join(argv[:6])} ...", flush=True)
    done = subprocess.run(argv, check=False)
    print(f"driver: the training step ended with {done.returncode}", flush=True)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
