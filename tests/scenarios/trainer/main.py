"""Scenario: a training package launched as `python -m trainer.main`; the last rank deadlocks
on its own non-reentrant lock.

MetricsLogger.log() holds its lock while it appends, and flushes when the buffer is full --
but _flush() takes the same threading.Lock again. The last rank logs its throughput as well
as its loss every step, so its buffer fills first (at step 3): it blocks forever in _flush's
`with self._lock`, a deadlock with itself, no CPU, no collective on its stack. The other
ranks wait for it in step 4's gradient all_reduce.
"""

from __future__ import annotations

import _harness as harness
import _training as training
import torch.distributed as dist
from trainer.metrics import MetricsLogger

STEPS = 1000


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = training.build_model()
    metrics = MetricsLogger(capacity=8)
    logs_throughput = info.rank == info.world_size - 1
    for step in range(STEPS):
        if step == 4:
            harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
        if logs_throughput and len(metrics._buffer) + 2 >= metrics.capacity:
            harness.report_ready(info, f"step {step}: MetricsLogger._flush lock", role="culprit")
        metrics.log(f"step {step} loss {loss:.4f}")
        if logs_throughput:
            metrics.log(f"step {step} samples/s {1000.0 / (step + 1):.1f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
