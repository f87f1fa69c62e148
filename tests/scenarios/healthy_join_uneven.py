"""Scenario (control): uneven inputs handled by DDP's ``Join`` context manager, healthy.

Rank 2's shard is shorter: it runs out of batches long before the others. The training loop
runs under ``torch.distributed.algorithms.Join([model])``, as PyTorch's guide to uneven inputs
shows: once rank 2's loop ends, its ``Join.__exit__`` shadows the others' collectives (DDP's
join hook all-reduces zeros for each of their gradient all_reduces) until every rank is done.
For minutes rank 2 sits in torch.distributed's own code while the others train at 1 s a step,
every rank logging: it must never get a hang verdict (the liar of the rule that takes an idle
stack ending in torch.distributed's code for a wait on a peer).
"""

from __future__ import annotations

import time

import _harness as harness
import _training as training
import torch.distributed as dist
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel

SHORT_RANK, SHORT_STEPS = 2, 3
STEP_SECONDS = 1.0
#: About 30 minutes, the job's time limit.
STEPS = 1800


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = DistributedDataParallel(training.build_model())
    steps = SHORT_STEPS if info.rank == SHORT_RANK else STEPS
    with Join([model]):
        for step in range(steps):
            if step == SHORT_STEPS - 1:
                harness.report_ready(info, "training" if info.rank != SHORT_RANK
                                     else "out of batches: shadowing the others", role="healthy")
            time.sleep(STEP_SECONDS)  # reading the batch
            loss = training.compute_loss(model, training.synthetic_batch(info.rank, step))
            loss.backward()
            training.sgd_update(model)
            harness.log(info, f"step {step} loss {loss.item():.4f}")
    harness.log(info, f"done after {steps} steps")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
