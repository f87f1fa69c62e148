"""Scenario: `blocked_outside_collective` on a node whose first rank also tokenizes on a thread.

The same job: a prefetch thread reads batches ahead through a bounded queue, and on rank 2 it
dies on a truncated record (its traceback in the job's stderr), leaving the main thread in
`queue.get()` for ever; the other ranks wait for rank 2 in the gradient all_reduce. Besides, the
first rank of each node (ranks 0 and 2) tokenizes the validation set on a thread of its own, in
Python, for hours: rank 2's process computes while its main thread waits. That is the sight
of a main thread waiting for a slow worker thread ("cannot tell"), but the thread it waits for
is dead, and the job's log says so. Culprit: rank 2.
"""

from __future__ import annotations

import threading

import _harness as harness
import torch.distributed as dist
from blocked_outside_collective import train

#: Documents of the validation set, each tokenized in Python.
VALIDATION_DOCUMENTS = 1_000_000_000


def tokenize_validation_set() -> int:
    """Byte-pair merges over the validation documents, the slow way: hours of a core."""
    tokens = 0
    for document in range(VALIDATION_DOCUMENTS):
        text = f"validation document {document} " * 20
        tokens += len(text.split())
    return tokens


def start_validation_tokenizer(info: harness.RankInfo) -> None:
    """The first rank of each node tokenizes the validation set on a thread of its own."""
    if info.local_rank == 0:
        threading.Thread(target=tokenize_validation_set, name="val-tokenize",
                         daemon=True).start()


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    start_validation_tokenizer(info)
    train(info)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
