"""Scenario (control): one rank builds the dataset index, the others wait for its store key.

`store_wait`'s healthy twin: rank 2 builds the index in pure Python for about BUILD_SECONDS
(its line moving, the GIL held), then publishes `dataset_ready` on the job's TCPStore; ranks 0,
1, 3 wait in `store.wait` for the key all that time (a wait on a peer outside any collective;
nobody logs). Then every rank trains and logs each step. It must never get a hang verdict: a
rank computing while the others wait for its key is a slow preparation (or, endless, a hang a
short look cannot tell), like rank 0's preparation before a barrier.
"""

from __future__ import annotations

import _harness as harness
import rank0_prepare_barrier as prepare
import store_wait
import torch.distributed as dist
from torch.distributed import distributed_c10d

BUILD_SECONDS = 90.0
STEPS = 1200


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    store = distributed_c10d._get_default_store()
    index_rank = store_wait.INDEX_RANK
    harness.report_ready(info, "building the index" if info.rank == index_rank else "store.wait",
                         role="healthy")
    if info.rank == index_rank:
        index = prepare.build_vocabulary(BUILD_SECONDS)
        harness.log(info, f"index of {len(index)} tokens built")
        store.set(store_wait.KEY, "1")
    else:
        store.wait([store_wait.KEY])
    harness.train_plainly(info, range(STEPS))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
