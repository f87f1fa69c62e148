"""Scenario: a rank waits for a store key nobody sets while the others poll their async
all_reduce.

At step 3 rank 0 publishes the evaluation settings on the job's TCPStore as ``eval_config``;
rank 2, the evaluation rank, reads them with ``store.get("eval/config")`` (the key's old name:
code of two versions), which blocks until the key exists: for ever. Ranks 0, 1 and 3 go on to
the step's gradient all_reduce, started asynchronously and polled
(``while not work.is_completed(): sleep(0.05)``, async_poll_wait's loop), which rank 2 never
joins. Three ranks asleep together in a loop of their own, one in a socket wait on the job's
store: the liar of the rule that makes such a waiter wait on the sleepers
(retry_loop_store_waiter). The culprit is rank 2; the handle of the collective in the pollers'
locals tells them from a retry loop.
"""

from __future__ import annotations

import _async_steps as steps
import _harness as harness
import _training as training
import torch.distributed as dist
from async_poll_wait import poll
from torch.distributed import distributed_c10d

EVAL_RANK = 2
CONFIG_STEP = 3
STEPS = 1000


def read_eval_config(store: dist.Store) -> bytes:
    return store.get("eval/config")  # CULPRIT


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    store = distributed_c10d._get_default_store()
    model = training.build_model()
    for step in range(STEPS):
        if step == CONFIG_STEP:
            if info.rank == 0:
                store.set("eval_config", b'{"every": 100}')
            if info.rank == EVAL_RANK:
                harness.report_ready(info, "store.get of a key nobody sets", role="culprit")
                read_eval_config(store)
            else:
                harness.report_ready(info, f"step {step}: polling the all_reduce",
                                     role="waiting")
        loss = training.compute_loss(model, training.synthetic_batch(info.rank, step))
        loss.backward()
        steps.all_reduce_gradients_async(model, poll)
        training.sgd_update(model)
        harness.log(info, f"step {step} loss {float(loss):.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
