"""Scenario: a preemption handler that checkpoints with a barrier, signalled on one rank only.

Every rank installs a SIGUSR1 handler that saves a checkpoint and meets the others in
`dist.barrier()` before the job is requeued. The warning reaches one task only (a
`scancel --signal=USR1` aimed at one step task, or a node's epilog): rank 1 runs the handler at
step 3, on its main thread between two bytecodes of its loop, and waits in the barrier
for ranks that never get there; ranks 0, 2, 3 wait for it in step 3's gradient all_reduce. The
signal's arrival is made deterministic: rank 1 raises it itself. Culprit: rank 1, in the handler.
"""

from __future__ import annotations

import signal

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

STEPS = 1000
#: The rank the warning reaches, and when.
SIGNALLED_RANK, SIGNALLED_STEP = 1, 3


class Requeue:
    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model

    def on_signal(self, signum: int, frame: object) -> None:
        """SIGUSR1: save a checkpoint, every rank together, then leave for the requeue."""
        state = {name: p.detach().clone() for name, p in self.model.state_dict().items()}
        dist.barrier()  # CULPRIT
        torch.save(state, f"/tmp/requeue-rank{dist.get_rank()}.pt")
        raise SystemExit(0)


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = training.build_model()
    signal.signal(signal.SIGUSR1, Requeue(model).on_signal)
    for step in range(STEPS):
        if info.rank == SIGNALLED_RANK and step == SIGNALLED_STEP:
            harness.report_ready(info, f"step {step}: preemption warning", role="culprit")
            signal.raise_signal(signal.SIGUSR1)  # stand-in: the warning reaching this task only
        elif step == SIGNALLED_STEP:
            harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
