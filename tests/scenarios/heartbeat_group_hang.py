"""Scenario: `mismatched_collectives` while every rank's health thread all_reduces on a group of its own.

Before training, every rank creates a second gloo group and starts a daemon thread that
all_reduces a one-float "alive" flag over it every 0.1 s (a liveness check between ranks, a
straggler detector's timings, metrics averaged in the background). At step 3 rank 1 calls
all_gather while ranks 0, 2 and 3 call the gradient all_reduce: the main threads hang, and the
health threads go on completing their collectives, rank to rank, ten times a second. Every
rank's connections to the other ranks carry data all along; none of it is the training's.
Culprit: rank 1.
"""

from __future__ import annotations

import threading
import time

import _harness as harness
import torch
import torch.distributed as dist
from mismatched_collectives import train

#: Seconds between two health checks.
HEALTH_PERIOD_S = 0.1


def check_health(group: dist.ProcessGroup) -> None:
    """Every rank says it is alive, over the health group, for as long as the process lives."""
    alive = torch.ones(1)
    while True:
        dist.all_reduce(alive, group=group)
        alive.fill_(1.0)
        time.sleep(HEALTH_PERIOD_S)


def start_health_check() -> None:
    """A second gloo group, made by every rank, and the daemon thread that checks over it."""
    health_group = dist.new_group(backend="gloo")
    threading.Thread(target=check_health, args=(health_group,), name="health-check",
                     daemon=True).start()


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    start_health_check()
    train(info)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
