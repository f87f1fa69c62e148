"""A node monitor run as a step of its own beside the training step (the shape of a site's
`srun --overlap --ntasks-per-node=1 python gpu_logger.py &` in the batch script): one Python
process a node, with the step's SLURM_PROCID (0, 1, ... a node, the same numbers as the training
ranks'), that samples the node every 2 s and prints a line. Stdlib only: the load and the memory
stand in for nvidia-smi's utilisation query."""

from __future__ import annotations

import os
import time


def sample() -> str:
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    with open("/proc/meminfo") as f:
        free = next(line.split()[1] for line in f if line.startswith("MemAvailable"))
    return f"monitor {os.environ.get('SLURMD_NODENAME', '?')}: load {load} available {free} kB"


if __name__ == "__main__":
    while True:
        print(sample(), flush=True)
        time.sleep(2.0)
