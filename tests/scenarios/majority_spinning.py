"""Scenario: most ranks spin in one endless Python loop; the one rank that skipped it waits.

Every rank but rank 0 de-duplicates its shard's token ids before the step; at step 3 their shards
(ranks 1-3, the ones fed by the same bad upstream file) hold only ids the loop's guard rejects,
and `while not kept:` draws again for ever, in Python at one line (the GIL held, no collective).
Rank 0 reads another file, has nothing to de-duplicate, and waits in step 3's gradient all_reduce.
The liar of the shared-phase rule (healthy_object_broadcast): more ranks busy at one line than
waiting, on a CPU job, is read as a slow step ("cannot tell", info), so this hang is a known miss
by design: the price of no alarm on a healthy job's long shared phase.
"""

from __future__ import annotations

import random

import _harness as harness
import _training as training
import torch.distributed as dist

BAD_STEP = 3
STEPS = 1000


def deduplicated_ids(rank: int, step: int) -> list[int]:  # CULPRIT
    """A sample of this step's token ids with the reserved ones dropped."""
    rng = random.Random(rank * 1000 + step)
    kept: list[int] = []
    while not kept:
        kept = [i for i in (rng.randrange(8) for _ in range(16)) if step != BAD_STEP or i > 99]
    return kept


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = training.build_model()
    for step in range(STEPS):
        if step == BAD_STEP:
            role = "waiting" if info.rank == 0 else "culprit"
            harness.report_ready(info, f"step {step}: " + (
                "gradient all_reduce" if info.rank == 0 else "de-duplicating"), role=role)
        if info.rank != 0:
            deduplicated_ids(info.rank, step)
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
