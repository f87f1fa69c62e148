"""Scenario: retry_loop_store_waiter, with a finished collective's handle left in main's locals.

The training loop starts each step's gradient all_reduce asynchronously and keeps the handle
in a local of ``main`` (``pending``), waited for before the optimizer step and never cleared:
when the ranks hang, ``main``'s frame still holds a ``Work`` of a collective that completed.
At step 3 ranks 0-2 retry the dead lease service for ever before they publish their leases
on the store; rank 3 waits for them in ``store.wait``. The culprits are ranks 0-2: the handle
of a collective in an outer frame is no sign that the ranks' sleep loop polls one (the
liar of that reading, store_typo_async_poll's rule).
"""

from __future__ import annotations

import _harness as harness
import _training as training
import torch
import torch.distributed as dist
from majority_retry_loop import LEASE_STEP, STEPS
from retry_loop_store_waiter import shard_map


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = training.build_model()
    pending = None
    for step in range(STEPS):
        if step == LEASE_STEP:
            shard_map(info, step)
        loss = training.compute_loss(model, training.synthetic_batch(info.rank, step))
        loss.backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in grads])
        pending = dist.all_reduce(flat, async_op=True)
        pending.wait()
        training.sgd_update(model)
        harness.log(info, f"step {step} loss {float(loss):.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
