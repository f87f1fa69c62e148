"""Scenario: `p2p_deadlock` while every rank's health thread all_reduces on a group of its own.

Before training, every rank creates a second gloo group and starts `heartbeat_group_hang`'s
daemon thread (a one-float "alive" all_reduce over it every 0.1 s). At step 3 ranks 2 and 3
both `dist.recv` from each other before sending (the replica check of `p2p_deadlock`), and
ranks 0 and 1 wait for them in step 4's gradient all_reduce. The health collectives go on
completing, rank to rank, ten times a second: every rank's connections to the other ranks
carry data, and none of it is what ranks 2 and 3 wait for. Culprits: ranks 2 and 3.
"""

from __future__ import annotations

import threading

import _harness as harness
import _training as training
import torch.distributed as dist
from heartbeat_group_hang import check_health
from p2p_deadlock import OUTLIER_STEP, STEPS, check_replica_agreement, losses_disagree


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    health_group = dist.new_group(backend="gloo")
    threading.Thread(target=check_health, args=(health_group,), name="health-check",
                     daemon=True).start()
    model = training.build_model()
    for step in range(STEPS):
        if step == OUTLIER_STEP + 1:
            harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
        if losses_disagree(info.rank, step):
            check_replica_agreement(model, info, step)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
