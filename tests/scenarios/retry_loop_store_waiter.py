"""Scenario: most ranks retry a dead service for ever while one waits for them on the store.

`majority_retry_loop`'s job with a shard map built on the job's TCPStore: at step 3 ranks 0,
1 and 2 fetch their next shard's lease from a coordination service and publish it under
``lease/<rank>``; rank 3, whose lease came with a prefetch, gathers the others' leases with
``store.wait`` to build the step's shard map (a socket wait on the store: no collective). The
service went away: ranks 0-2 get "connection refused", sleep, back off and try again, for
ever. Three ranks asleep together in a loop of their own code, one rank stuck elsewhere with
no rank in a collective: the shape the poll rule (async_poll_wait) reads as three pollers
waiting on the fourth. Rank 3 waits on them through the store; the culprits are ranks 0-2.
"""

from __future__ import annotations

import _harness as harness
import _training as training
import torch.distributed as dist
from majority_retry_loop import LEASE_STEP, PREFETCHED_RANK, STEPS, lease_with_retries
from torch.distributed import distributed_c10d


def shard_map(info: harness.RankInfo, step: int) -> list[str]:
    """Each rank's lease for ``step``, through the job's store."""
    store = distributed_c10d._get_default_store()
    keys = [f"lease/{r}" for r in range(info.world_size) if r != PREFETCHED_RANK]
    if info.rank == PREFETCHED_RANK:
        harness.report_ready(info, "store.wait for the others' leases", role="waiting")
        store.wait(keys)  # WAITING
        return [store.get(k).decode() for k in keys]
    harness.report_ready(info, "lease", role="culprit")
    store.set(f"lease/{info.rank}", lease_with_retries(info.rank, step))
    return []


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = training.build_model()
    for step in range(STEPS):
        if step == LEASE_STEP:
            shard_map(info, step)
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
