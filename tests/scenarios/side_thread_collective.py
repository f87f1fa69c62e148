"""Scenario: rank 0 issues a collective from a side thread while its main thread trains.

At step 3 rank 0 starts a background thread that publishes the evaluation results and
then calls ``dist.barrier()`` "so every rank sees the summary file": only rank 0 runs that
thread. The barrier takes the process group's next sequence number; rank 0's main thread
goes on to the gradient all_reduce with the one after it, while ranks 1-3 wait in their
all_reduce with the number rank 0's barrier took. gloo never matches them. Rank 0's main
thread waits at the same line as everyone else: only its side thread shows the extra call.
"""

from __future__ import annotations

import threading
import time

import _harness as harness
import _training as training
import torch.distributed as dist

PUBLISH_AT = 3
STEPS = 1000


def publish_eval_summary(info: harness.RankInfo, step: int) -> None:
    harness.log(info, f"step {step}: eval summary written")
    dist.barrier()  # CULPRIT


def train(info: harness.RankInfo) -> None:
    model = training.build_model()
    for step in range(STEPS):
        if info.rank == 0 and step == PUBLISH_AT:
            harness.report_ready(info, f"step {step}: barrier in a side thread", role="culprit")
            threading.Thread(target=publish_eval_summary, args=(info, step),
                             name="eval-publisher", daemon=True).start()
            time.sleep(0.5)  # the step's data loading: the barrier goes first
        elif step == PUBLISH_AT:
            harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    train(info)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
