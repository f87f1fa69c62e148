"""Scenario (netns cluster only): a node's data link starts dropping what it sends mid-training.

Four nodes, one rank each, gloo over the data network (GLOO_SOCKET_IFNAME=eth1, the store on
the management network). The ranks train, every one logging every step; once all are past
step 2 the test adds a blackhole route on node 3 (rank 2) to node 4's data address: what rank
2 sends to rank 3 is dropped by its own node, nothing else changes. gloo's ring all_reduce
stalls at that link and every rank waits in the same all_reduce: the stacks are all alike,
the NICs are up, and only the connections say where the bytes stopped (rank 2's connection to
rank 3 holds unacknowledged data, retransmitted). The network is to blame, not a rank.
"""

from __future__ import annotations

import time

import _harness as harness
import _training as training
import torch.distributed as dist

STEPS = 100000
READY_AFTER = 2


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = training.build_model()
    for step in range(STEPS):
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))  # CULPRIT
        harness.log(info, f"step {step} loss {loss:.4f}")
        if step == READY_AFTER:
            harness.report_ready(info, "training (the fault comes next)", role="waiting")
        time.sleep(0.2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
