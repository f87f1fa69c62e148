"""Scenario: `spinning_rank` with the gradients averaged by an asynchronous all_reduce.

The step overlaps the all_reduce with the next batch's augmentation: `work =
dist.all_reduce(flat, async_op=True)`, then `work.wait()`. Rank 3 never gets there: it spins
in `sample_crop_box` on a thumbnail; ranks 0-2 wait in `work.wait()`, a C++ call below their
own line (gloo's threads do the I/O, the main thread waits on a futex). The job that would
make the rank-gated rule lie if every wait on a peer outside a collective were a barrier: it
is the step's own collective, and rank 3 is late for it.
"""

from __future__ import annotations

import random

import _async_steps as steps
import _harness as harness
import _training as training
import spinning_rank
import torch.distributed as dist

STEPS = 1000


def wait(work: dist.Work) -> None:
    work.wait()  # WAITING


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = training.build_model()
    rng = random.Random(info.rank)
    for step in range(STEPS):
        if step == spinning_rank.THUMBNAIL_AT[1]:
            role = "culprit" if info.rank == spinning_rank.THUMBNAIL_AT[0] else "waiting"
            harness.report_ready(info, f"step {step}: {role}", role=role)
        spinning_rank.augment(rng, spinning_rank.image_sizes(info.rank, step))
        loss = training.compute_loss(model, training.synthetic_batch(info.rank, step))
        loss.backward()
        steps.all_reduce_gradients_async(model, wait)
        training.sgd_update(model)
        harness.log(info, f"step {step} loss {float(loss):.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
