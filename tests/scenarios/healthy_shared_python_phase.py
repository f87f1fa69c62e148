"""Scenario (control): most ranks clean their text in Python for seconds; the rank that need not waits.

Every epoch ranks 1-3, whose shards come from a raw crawl, normalise their documents in pure
Python (a loop of several lines in one function, the GIL held, no collective) for ~10 s;
rank 0's shard is clean already, so it goes straight to the step and waits in its gradient
all_reduce for them. Then three steps, every rank logging every step. The lines of ranks 1-3
move inside one function and no collective is entered or left while rank 0 waits: the shape of
majority_spinning, healthy. Must never alarm.
"""

from __future__ import annotations

import _harness as harness
import torch.distributed as dist

#: Documents a raw rank normalises each epoch: ~10 s of Python on a shared core, so that most looks fall inside it.
DOCUMENTS = 2_000_000
STEPS_PER_EPOCH = 3
#: ~30 minutes of epochs at a few seconds each, the job's time limit.
EPOCHS = 400


def normalised(epoch: int, rank: int) -> int:
    """How many of this epoch's raw documents survive cleaning (lower-cased, spaces folded)."""
    kept = 0
    for i in range(DOCUMENTS):
        text = f"  Doc {epoch}-{rank}-{i}:  The  QUICK brown   fox  "
        words = [w.lower() for w in text.split() if w.isascii()]
        cleaned = " ".join(words)
        if len(cleaned) > 10 and not cleaned.startswith("spam"):
            kept += 1
    return kept


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)

    def clean_shard(epoch: int) -> None:
        if info.rank != 0:
            harness.log(info, f"epoch {epoch}: {normalised(epoch, info.rank)} documents kept")

    harness.train_in_epochs(info, EPOCHS, STEPS_PER_EPOCH, clean_shard)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
