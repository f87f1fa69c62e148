"""Scenario: a rank dies while the others wait for it in init_process_group.

Every rank opens its shard index before joining the process group. Rank 3's index is
missing, so rank 3 raises FileNotFoundError and exits (exit code 1); the traceback in the
job log names the line. The other ranks wait inside init_process_group for a peer that
will never register. srun runs with -K0 (--kill-on-bad-exit=0), so Slurm keeps them there.

With SLURMDIAG_DEAD_RANK_AFTER_INIT=1 rank 3 instead SIGKILLs itself at step 3 of training,
after the gloo mesh is up. gloo notices the closed sockets at once: the other ranks raise
RuntimeError ("Connection closed by peer" / "Connection reset by peer") from their
all_reduce within milliseconds and exit, so nothing hangs. That mode is kept to show why
the default mode dies before the mesh forms.
"""

from __future__ import annotations

import os
import signal
import time

import _harness as harness
import _training as training
import torch.distributed as dist

MISSING_SHARD_RANK = 3
#: A slow shared filesystem: the missing index is noticed after the others have moved on.
INDEX_LATENCY_SECONDS = 2.0
STEPS = 1000


def open_shard_index(rank: int) -> list[int]:
    """Read the list of record offsets of this rank's shard."""
    path = f"/datasets/toy/shard-{rank:05d}.idx"
    time.sleep(INDEX_LATENCY_SECONDS if rank == MISSING_SHARD_RANK else 0.1)
    if rank == MISSING_SHARD_RANK and not die_after_init():
        raise FileNotFoundError(f"[Errno 2] No such file or directory: '{path}'")  # CULPRIT
    return list(range(0, 64 * 576, 576))


def die_after_init() -> bool:
    return os.environ.get("SLURMDIAG_DEAD_RANK_AFTER_INIT") == "1"


def train(info: harness.RankInfo) -> None:
    model = training.build_model()
    for step in range(STEPS):
        if step == 3 and info.rank == MISSING_SHARD_RANK:
            harness.report_ready(info, f"step {step}: SIGKILL", role="dead")
            os.kill(os.getpid(), signal.SIGKILL)
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")


def main() -> None:
    info = harness.setup()
    if info.rank == MISSING_SHARD_RANK and not die_after_init():
        harness.report_ready(info, "open_shard_index: missing index", role="dead")
    open_shard_index(info.rank)
    harness.report_ready(info, "init_process_group", role="waiting")
    harness.init_distributed(info)  # WAITING
    train(info)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
