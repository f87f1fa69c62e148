"""Scenario (control): after training, rank 0 alone runs the final evaluation; the others
have finished.

The shape of many training scripts' end: every rank trains, the process group is destroyed,
the ranks other than 0 return from main and exit 0; rank 0 then evaluates the final model on
the test set for minutes (tensor maths and per-sample metrics in Python) and writes the
report. Ranks 1-3 have no process any more; rank 0 computes in its own code; nobody logs
until the report. It must never get a hang verdict: ranks gone with exit code 0 finished.
"""

from __future__ import annotations

import _harness as harness
import rank0_eval_barrier as evaluation
import torch
import torch.distributed as dist

STEPS = 6
EVAL_SECONDS = 600.0


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    harness.train_plainly(info, range(STEPS))
    dist.barrier()
    dist.destroy_process_group()
    if info.rank != 0:
        harness.report_ready(info, "finished", role="healthy")
        return
    harness.report_ready(info, "final evaluation", role="healthy")
    torch.manual_seed(1)
    width = evaluation.VAL_FEATURES
    encoder = torch.nn.Sequential(*(torch.nn.Sequential(
        torch.nn.Linear(width, width), torch.nn.Tanh()) for _ in range(8)))
    harness.log(info, f"final evaluation: {evaluation.evaluate(encoder, EVAL_SECONDS)}")


if __name__ == "__main__":
    main()
