"""Scenario (control): a healthy job whose every rank waits a few seconds each step.

The job trains on a stream that a data service releases in rounds: each step every rank sleeps
until the next round (~4 s, `time.sleep`), then computes its step, all_reduces its gradients
and logs one line. In a look of a few seconds every rank sleeps at the same line, nothing on
any stack but the sleep: only the log says the job moves. It must never get a hang verdict.
"""

from __future__ import annotations

import time

import _harness as harness
import _training as training
import torch.distributed as dist

ROUND_SECONDS = 4.0
STEPS = 100_000


def wait_for_next_round() -> None:
    time.sleep(ROUND_SECONDS - time.time() % ROUND_SECONDS)


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)

    def next_batch(step: int):  # type: ignore[no-untyped-def]
        wait_for_next_round()
        return training.synthetic_batch(info.rank, step)

    harness.train_healthy(info, range(STEPS), next_batch)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
