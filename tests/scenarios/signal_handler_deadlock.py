"""Scenario: a preemption handler deadlocks on the lock the code it interrupted holds.

The job asks Slurm for a warning before its time limit (`--signal=USR1@90`); every rank installs
a SIGUSR1 handler that notes the preemption in the metrics file, under the lock that guards it,
so that the loop checkpoints at the end of the step. The loop writes its metrics under the same
lock every step. Python runs a signal handler on the main thread, between two bytecodes of
whatever it was doing: on rank 1 the signal comes at step 3 while `write_metrics` holds the lock,
and the handler waits for it for ever (a threading.Lock is not reentrant). The signal's arrival
is made deterministic: rank 1 raises it itself inside the locked region, where slurmstepd's
would land one time in many. Ranks 0, 2, 3 wait for rank 1 in step 4's gradient all_reduce.
Culprit: rank 1, in the handler.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import threading
from pathlib import Path

import _harness as harness
import _training as training
import torch.distributed as dist

METRICS_LOCK = threading.Lock()
STEPS = 1000
#: The rank and step the preemption warning reaches inside the locked region.
SIGNALLED_RANK, SIGNALLED_STEP = 1, 3


class Preemption:
    def __init__(self, metrics: Path) -> None:
        self.metrics = metrics
        self.requested = False

    def on_signal(self, signum: int, frame: object) -> None:
        """SIGUSR1: note it in the metrics file, checkpoint at the end of the step."""
        with METRICS_LOCK, self.metrics.open("a") as fh:  # CULPRIT
            fh.write(json.dumps({"event": "preemption warning", "signal": signum}) + "\n")
        self.requested = True


def write_metrics(metrics: Path, record: dict[str, float], signalled: bool) -> None:
    with METRICS_LOCK, metrics.open("a") as fh:
        if signalled:  # stand-in: slurmstepd's SIGUSR1 arriving now
            signal.raise_signal(signal.SIGUSR1)
        fh.write(json.dumps(record) + "\n")


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    metrics = Path(tempfile.gettempdir()) / f"metrics-{os.getpid()}.jsonl"
    preemption = Preemption(metrics)
    signal.signal(signal.SIGUSR1, preemption.on_signal)
    model = training.build_model()
    for step in range(STEPS):
        signalled = info.rank == SIGNALLED_RANK and step == SIGNALLED_STEP
        if signalled:
            harness.report_ready(info, f"step {step}: preemption warning", role="culprit")
        elif step == SIGNALLED_STEP + 1:
            harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
        write_metrics(metrics, {"step": step, "loss": loss}, signalled)
        if preemption.requested:
            harness.log(info, "preempted: checkpoint and exit")
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
