"""Scenario (control): rank 0 prepares the data in Python while the others wait in a barrier.

The shape of Hugging Face's `main_process_first()` and of hand-written `if rank == 0:
prepare(); dist.barrier()`: before training, rank 0 builds the vocabulary and the token index of
the corpus in pure Python (dictionaries and string splitting, the GIL held, its line moving) for
about PREPARE_SECONDS, then writes it for the others; ranks 1-3 wait in `dist.barrier()` and
nobody logs. After the barrier every rank trains and logs each step. It must never get a hang
verdict: for a look of a few seconds it is spinning_rank's sight, except that the others wait
in a barrier, not in the step's all_reduce. `rank0_prepare_endless` runs this program with a
preparation that never ends: its hung twin.
"""

from __future__ import annotations

import random
import time

import _harness as harness
import torch.distributed as dist

PREPARE_SECONDS = 90.0
STEPS = 1200
WORDS = [f"w{i}" for i in range(5000)]


def build_vocabulary(seconds: float, min_tokens: int = 0) -> dict[str, int]:  # CULPRIT
    """Count the corpus' tokens, document by document, in Python, for ``seconds`` and until
    ``min_tokens`` distinct tokens were seen (more than the corpus has: never)."""
    rng = random.Random(0)
    counts: dict[str, int] = {}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline or len(counts) < min_tokens:
        document = " ".join(rng.choice(WORDS) for _ in range(200))
        for token in document.split():
            counts[token] = counts.get(token, 0) + 1
    return counts


def main(endless: bool = False) -> None:
    info = harness.setup()
    harness.init_distributed(info)
    role = ("culprit" if info.rank == 0 else "waiting") if endless else "healthy"
    harness.report_ready(info, "preparing the data" if info.rank == 0 else "barrier", role=role)
    if info.rank == 0:
        vocabulary = build_vocabulary(PREPARE_SECONDS, len(WORDS) + 1 if endless else 0)
        harness.log(info, f"vocabulary of {len(vocabulary)} tokens")
    dist.barrier()  # WAITING
    harness.train_plainly(info, range(STEPS))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
