"""Scenario: ranks poll their asynchronous all_reduce while one waits on an outside service.

`async_poll_wait`'s poll loop (`while not work.is_completed(): sleep(0.05)`) with
`http_no_timeout`'s heartbeat: from step 3 the last rank posts a heartbeat to the experiment
tracker after each step, with no timeout; the tracker accepts the connection and never
answers, so the rank sits in the socket read of the reply. Ranks 0-2 poll the next step's
all_reduce for ever. Three ranks asleep together in a loop of their own, one in a socket wait:
the twin of `retry_loop_store_waiter`, where the lone rank's socket goes to the job's store.
Here it goes outside the job: the rank in it is the culprit, the pollers wait on it.
"""

from __future__ import annotations

import _async_steps as steps
import _harness as harness
import _training as training
import torch.distributed as dist
from async_poll_wait import poll
from http_no_timeout import HEARTBEAT_FROM_STEP, STEPS, post_heartbeat, unresponsive_tracker


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    posts_heartbeats = info.rank == info.world_size - 1
    tracker = unresponsive_tracker() if posts_heartbeats else None
    model = training.build_model()
    for step in range(STEPS):
        if step == HEARTBEAT_FROM_STEP + 1:
            harness.report_ready(info, f"step {step}: polling the all_reduce", role="waiting")
        loss = training.compute_loss(model, training.synthetic_batch(info.rank, step))
        loss.backward()
        steps.all_reduce_gradients_async(model, poll)
        training.sgd_update(model)
        harness.log(info, f"step {step} loss {float(loss):.4f}")
        if tracker is not None and step >= HEARTBEAT_FROM_STEP:
            host, port = tracker.getsockname()
            harness.report_ready(info, f"step {step}: heartbeat POST", role="culprit")
            post_heartbeat(f"http://{host}:{port}/api/heartbeat", step, float(loss))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
