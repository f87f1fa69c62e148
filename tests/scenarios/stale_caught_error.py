"""Scenario: an error caught and logged at start-up, long before a rank-gated barrier hangs.

Every rank tries to resume from the run's last checkpoint; there is none yet, so each catches the
FileNotFoundError in main, logs its traceback (traceback.print_exc) and starts from scratch. The
training loop is in main too: every third step rank 0 alone writes a summary and then waits in a
barrier "so nobody reads it half-written", while ranks 1-3 go on to the next step's gradient
all_reduce (helper train_step). Rank 0 sits in main, the function that caught an error the log
holds, at another line: the liar of the rule that takes such an error for the culprit's path
(error_cleanup_barrier). The tracebacks are old: dozens of step lines follow them in the log.
Culprit: rank 0, in the summary's barrier.
"""

from __future__ import annotations

import os
import tempfile
import traceback
from pathlib import Path

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

SUMMARY_EVERY = 3
HANG_AFTER_STEP = 12  # the summary barrier runs for rank 0 alone from here
STEPS = 1000


def run_directory() -> Path:
    return Path(os.environ.get("SLURMDIAG_SCENARIO_DIR") or tempfile.gettempdir())


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = training.build_model()
    try:
        model.load_state_dict(torch.load(run_directory() / "last.pt"))
    except FileNotFoundError:
        traceback.print_exc()
        harness.log(info, "no checkpoint to resume from: starting from scratch")
    for step in range(STEPS):
        if step == HANG_AFTER_STEP + 1 and info.rank != 0:
            harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
        if step % SUMMARY_EVERY == 0 and (step < HANG_AFTER_STEP or info.rank == 0):
            if info.rank == 0:
                (run_directory() / "summary.txt").write_text(f"step {step} loss {loss:.4f}\n")
            if step >= HANG_AFTER_STEP:
                harness.report_ready(info, f"step {step}: the summary's barrier", role="culprit")
            dist.barrier()  # CULPRIT
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
