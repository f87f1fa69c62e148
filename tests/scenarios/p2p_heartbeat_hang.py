"""Scenario: `p2p_deadlock` while every rank's health thread all_reduces on a group of its own.

Before training, every rank creates a second gloo group and starts `heartbeat_group_hang`'s
daemon thread (a one-float "alive" all_reduce over it every 0.1 s). At step 3 ranks 2 and 3
both `dist.recv` from each other before sending (the replica check of `p2p_deadlock`), and
ranks 0 and 1 wait for them in step 4's gradient all_reduce. The health collectives go on
completing, rank to rank, ten times a second: every rank's connections to the other ranks
carry data, and none of it is what ranks 2 and 3 wait for. Culprits: ranks 2 and 3.
"""

from __future__ import annotations

import _harness as harness
from heartbeat_group_hang import start_health_check
from p2p_deadlock import train


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    start_health_check()
    train(info)


if __name__ == "__main__":
    main()
