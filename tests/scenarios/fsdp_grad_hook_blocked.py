"""Scenario: FSDP2 (``fully_shard``) training; one rank's gradient hook blocks inside backward.

Every rank shards its model with ``fully_shard`` (each Linear a unit, then the root), as
current FSDP2 code does. A hook on the logits' gradient hands the gradient's norm to a metrics
thread through a one-slot queue. On rank 2 that thread dies on the norm of step 3 (it refuses
a value above its alert threshold and raises), so the queue is never emptied again: step 4's
put fills it, step 5's blocks for ever, inside ``loss.backward()``, before any of backward's
reduce-scatters. Ranks 0, 1 and 3 wait for rank 2 in FSDP's reduce-scatter of the last layer's
gradients, also inside ``loss.backward()``: every main thread is at one user line, and only
the frames above it (a hook's queue.put against FSDP's collective) tell the culprit apart.
"""

from __future__ import annotations

import queue
import threading

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

ALERT = (2, 3)  # (rank, step) whose metrics thread dies on the step's norm
HANG_STEP = ALERT[1] + 2  # the second put after the thread died blocks (one-slot queue)
STEPS = 1000


class GradientMetrics:
    """Gradient norms, recorded by a hook during backward and written out by a thread."""

    def __init__(self, info: harness.RankInfo) -> None:
        self.info = info
        self.step = 0
        self._norms: queue.Queue[tuple[int, float]] = queue.Queue(maxsize=1)
        threading.Thread(target=self._drain, name="grad-metrics", daemon=True).start()

    def _drain(self) -> None:
        while True:
            step, norm = self._norms.get()
            if (self.info.rank, step) == ALERT:
                raise ValueError(f"step {step}: logit gradient norm {norm:.3g} over the alert line")

    def hook(self, grad: torch.Tensor) -> None:
        if self.step == HANG_STEP and self.info.rank == ALERT[0]:
            harness.report_ready(self.info, f"step {self.step}: metrics queue.put in a grad hook",
                                 role="culprit")
        self._norms.put((self.step, float(grad.norm())))  # CULPRIT



def train(info: harness.RankInfo) -> None:
    model = training.fully_sharded(training.build_model())
    metrics = GradientMetrics(info)
    for step in range(STEPS):
        metrics.step = step
        inputs, targets = training.synthetic_batch(info.rank, step)
        logits = model(inputs)
        logits.register_hook(metrics.hook)
        loss = torch.nn.functional.mse_loss(logits, targets)
        if step == HANG_STEP and info.rank != ALERT[0]:
            harness.report_ready(info, f"step {step}: FSDP reduce-scatter in backward",
                                 role="waiting")
        loss.backward()  # WAITING
        training.sgd_update(model)
        harness.log(info, f"step {step} loss {loss.item():.4f}")


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    train(info)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
