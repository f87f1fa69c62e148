"""Scenario: each rank reduces its evaluation metrics in the order its evaluators finished.

Two evaluation tasks (``qa`` and ``summaries``), each with its own process group over every
rank (``dist.new_group``, as a multi-task trainer keeps one a task, so that a task's metrics
never mix with another's). Every third step each rank runs both evaluations on a thread pool
and, as each one finishes (``as_completed``), all_reduces that task's metric over the task's
group. On ranks 0-2 ``qa`` finishes first; on rank 3 its ``qa`` shard is the long one, so
``summaries`` finishes first and rank 3 all_reduces on the summaries group while ranks 0-2
all_reduce on the qa group. Each side waits for the other for ever.

Every rank's main thread is at the same line, in the same all_reduce, under the same
frames: only the group differs (``groups[task]``, read from the locals). The liar of a rule
that takes one collective position (op and call path) for one collective: this is a
disagreement, not a hang below Python. Culprit: rank 3, the one rank on the other group.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor, as_completed

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

TASKS = ("qa", "summaries")
ODD_RANK = 3
EVAL_EVERY = 3
STEPS = 1000


def evaluate(task: str, rank: int, step: int) -> tuple[str, float]:
    """A task's metric on this rank's evaluation shard (rank 3's qa shard is the long one)."""
    slow = task == "qa" and rank == ODD_RANK
    time.sleep(0.6 if slow else 0.1 if task == "qa" else 0.3)
    return task, 0.5 + 0.01 * step


def reduce_metrics(groups: dict[str, dist.ProcessGroup], info: harness.RankInfo, step: int,
                   ordered: bool) -> None:
    with ThreadPoolExecutor(max_workers=len(TASKS), thread_name_prefix="eval") as pool:
        futures = [pool.submit(evaluate, task, info.rank, step) for task in TASKS]
        done = [f.result() for f in futures] if ordered else (f.result() for f in as_completed(futures))
        for task, metric in done:
            if step == EVAL_EVERY and not ordered:
                role = "culprit" if info.rank == ODD_RANK else "waiting"
                harness.report_ready(info, f"step {step}: {task} metric all_reduce", role=role)
            value = torch.tensor([metric])
            dist.all_reduce(value, group=groups[task])  # CULPRIT
            harness.log(info, f"step {step} {task} {value.item() / info.world_size:.3f}")


def main(ordered: bool = False) -> None:
    """``ordered``: the fix (every rank reduces the tasks in one order, each step): the healthy
    twin, healthy_metric_group_order."""
    info = harness.setup()
    harness.init_distributed(info)
    groups = {task: dist.new_group(list(range(info.world_size))) for task in TASKS}
    model = training.build_model()
    every = 1 if ordered else EVAL_EVERY
    for step in range(STEPS):
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
        if ordered and step == 2:
            harness.report_ready(info, "metric all_reduces every step", role="healthy")
        if step % every == 0 and step > 0:
            reduce_metrics(groups, info, step, ordered)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
