"""Scenario: one rank frozen (SIGSTOP) inside the gradient all_reduce, and never thawed.

Every rank snapshots itself for a crash-analysis service once, at step 3, with a helper in the
shape of CRIU's dump: freeze the process (SIGSTOP), copy its memory, thaw it (SIGCONT). Rank 2
reaches step 3's all_reduce first (the others' batches come late) and its helper dies between
the freeze and the thaw: rank 2 sits in state T inside the all_reduce, and ranks 0, 1, 3 join
that all_reduce and wait for it there. Every rank's stack holds the same line: only the
process state tells rank 2 apart.
"""

from __future__ import annotations

import os
import subprocess
import time

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

FROZEN_RANK = 2
SNAPSHOT_STEP = 3
STEPS = 1000
#: The freeze comes this long after the helper starts: rank 2 is in the all_reduce by then.
FREEZE_AFTER_S = 0.5
#: The other ranks' batches at the snapshot step come this late.
LATE_BATCH_S = 2.0

#: The helper: freezes the rank, then dies (the copy failed) before it thaws it.
SNAPSHOT_HELPER = 'sleep {delay}; kill -STOP {pid}; echo "snapshot of {pid}: copy failed" >&2; exit 1'


def snapshot_for_crash_analysis(rank: int) -> None:
    """Start this rank's snapshot helper; it freezes the process a moment later."""
    if rank == FROZEN_RANK:
        helper = SNAPSHOT_HELPER.format(delay=FREEZE_AFTER_S, pid=os.getpid())
        subprocess.Popen(["sh", "-c", helper], start_new_session=True)


def sync_gradients(model: torch.nn.Module) -> None:
    """Average gradients over all ranks with one flattened all_reduce (_training's, on a line
    of this file: every rank's stack holds it, the culprit's site and the waiting ranks')."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)  # CULPRIT
    flat /= dist.get_world_size()
    offset = 0
    for grad in grads:
        grad.copy_(flat[offset:offset + grad.numel()].view_as(grad))
        offset += grad.numel()


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = training.build_model()
    for step in range(STEPS):
        batch = training.synthetic_batch(info.rank, step)
        if step == SNAPSHOT_STEP:
            if info.rank == FROZEN_RANK:
                harness.report_ready(info, f"step {step}: frozen in the all_reduce", role="culprit")
                snapshot_for_crash_analysis(info.rank)
            else:
                time.sleep(LATE_BATCH_S)
                harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
        loss = training.compute_loss(model, batch)
        loss.backward()
        sync_gradients(model)  # WAITING
        training.sgd_update(model)
        harness.log(info, f"step {step} loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
