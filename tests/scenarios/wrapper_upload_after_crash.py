"""Scenario: the second node's ranks crashed at start; their wrapper outlives them.

Each srun task runs run_with_log_upload.sh, which starts python and, when it fails, copies the
task's logs to a slow archive before it exits. The second node's shard indexes are missing:
ranks 2 and 3 raise FileNotFoundError before init_process_group (their tracebacks in the job's
output), and their wrappers go on copying for ever, so srun sees no task end. Ranks 0 and 1
wait in init_process_group for them. On the second node the job's step holds only bash and its
copy, as when a wrapper's data staging stalls before the ranks start (staging_stalled): here
the ranks did start, and died.
"""

from __future__ import annotations

import _harness as harness
import torch.distributed as dist

MISSING_NODE = 1


def open_shard_index(info: harness.RankInfo) -> list[int]:
    """Read the list of record offsets of this rank's shard, on the node's local disk."""
    path = f"/local/datasets/toy/shard-{info.rank:05d}.idx"
    if info.node_rank == MISSING_NODE:
        raise FileNotFoundError(f"[Errno 2] No such file or directory: '{path}'")  # CULPRIT
    return list(range(0, 64 * 576, 576))


def main() -> None:
    info = harness.setup()
    if info.node_rank == MISSING_NODE:
        harness.report_ready(info, "open_shard_index: missing index", role="dead")
    open_shard_index(info)
    harness.report_ready(info, "init_process_group", role="waiting")
    harness.init_distributed(info)  # WAITING
    harness.train_plainly(info, range(1000))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
