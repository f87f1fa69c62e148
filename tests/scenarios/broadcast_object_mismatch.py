"""Scenario: ranks 1-3 wait in broadcast_object_list for a resume state rank 0 never sends.

On start, rank 0 looks for the newest checkpoint and broadcasts its training state (step,
RNG seeds, data position) to the others with dist.broadcast_object_list; the others always
call it to receive. When there is no checkpoint (a fresh run) rank 0 returns early, without
broadcasting, and goes on to the barrier before the first step. Ranks 1-3 wait in the
object broadcast (its first broadcast: the pickled sizes), rank 0 in the barrier: rank 0,
the only rank in the common code path, is the culprit.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import _harness as harness
import torch.distributed as dist

STEPS = 1000


def newest_checkpoint() -> Path | None:
    directory = Path(os.environ.get("SLURMDIAG_SCENARIO_DIR") or tempfile.gettempdir())
    found = sorted((directory / "checkpoints").glob("step*.pt"))
    return found[-1] if found else None


def resume_state(info: harness.RankInfo) -> dict[str, Any]:
    """Rank 0 reads the checkpoint's training state and shares it with every rank."""
    if info.rank == 0:
        checkpoint = newest_checkpoint()
        if checkpoint is None:
            return {"step": 0, "seed": 1234}  # fresh run: nothing to share, or so it thinks
        state = [{"step": int(checkpoint.stem[4:]), "seed": 1234}]
    else:
        state = [None]
        harness.report_ready(info, "broadcast_object_list of the resume state", role="waiting")
    dist.broadcast_object_list(state, src=0)  # WAITING
    return dict(state[0])


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    state = resume_state(info)
    if info.rank == 0:
        harness.report_ready(info, "barrier before the first step", role="culprit")
    dist.barrier()  # CULPRIT
    harness.train_plainly(info, range(state["step"], STEPS))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
