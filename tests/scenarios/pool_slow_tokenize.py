"""Scenario (control): one rank's multiprocessing.Pool is slow, not stuck. It must never be flagged.

`pool_worker_killed`'s healthy twin. Every rank tokenizes its next shard with a 2-process
multiprocessing.Pool (fork); rank 1's records are long, so its Pool.map takes 6-10 s of its
workers' CPU (a pure-Python loop), longer than a look, while ranks 0, 2, 3 wait for it in the
gradient all_reduce.
Rank 1's main thread idles in Pool.map (the same frames as when a worker was killed), its
workers compute. Every rank logs every step.
"""

from __future__ import annotations

import multiprocessing

import _harness as harness
import _training as training
import torch.distributed as dist

SLOW_RANK = 1
STEPS = 100_000
ROUNDS = {True: 1_600_000, False: 2_000}  # rank 1's records: ~0.8 s of a core each, in CPython


def tokenize(record: tuple[int, int]) -> int:
    seed, rounds = record
    value = seed
    for i in range(rounds):
        value = (value * 1103515245 + i) % 50257
    return value


def tokenize_shard(pool: multiprocessing.pool.Pool, info: harness.RankInfo, step: int) -> int:
    rounds = ROUNDS[info.rank == SLOW_RANK]
    records = [(step * 16 + i, rounds) for i in range(16)]
    return sum(pool.map(tokenize, records, chunksize=2))


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    pool = multiprocessing.get_context("fork").Pool(2)
    model = training.build_model()
    for step in range(STEPS):
        if step == 1:
            harness.report_ready(info, "training (rank 1's Pool.map is slow)", role="healthy")
        tokens = tokenize_shard(pool, info, step)
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f} tokens {tokens}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
