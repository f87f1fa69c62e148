"""Scenario (control): rank 0 shares a large Python object every epoch, which takes seconds.

Every epoch rank 0 plans the epoch's shards (a dict of ~2 million documents, built in Python)
and hands it to the others as codebases do by hand (fairseq's ``broadcast_object``, Megatron's
``broadcast_data``; torch's ``broadcast_object_list`` needs numpy): pickled into a byte tensor,
its size broadcast, then its bytes. Rank 0 builds and pickles for seconds (one core, the GIL
held) while the others wait in the size's broadcast; then ranks 1-3 unpickle for seconds while
rank 0, done, waits for them in the first step's gradient all_reduce: three ranks busy on one
line, one waiting in a collective, the shape of three ranks spinning. Every rank logs every
step: must never alarm.
"""

from __future__ import annotations

import pickle

import _harness as harness
import torch
import torch.distributed as dist

DOCUMENTS = 2_000_000
STEPS_PER_EPOCH = 3
#: ~30 minutes of epochs at a few seconds each, the job's time limit.
EPOCHS = 600


def plan_shards(epoch: int, world: int) -> dict[str, tuple[int, int]]:
    """Which rank reads which document this epoch, and at which offset."""
    return {f"doc-{epoch}-{i:08d}": ((i * 7 + epoch) % world, i * 4096) for i in range(DOCUMENTS)}


def share(plan: object | None, src: int = 0) -> object:
    """``plan`` on rank ``src``, a copy of it on every other rank."""
    if dist.get_rank() == src:
        buffer = bytearray(pickle.dumps(plan))
        size = torch.tensor([len(buffer)])
    else:
        size = torch.zeros(1, dtype=torch.int64)
    dist.broadcast(size, src=src)
    if dist.get_rank() != src:
        buffer = bytearray(int(size))
    dist.broadcast(torch.frombuffer(buffer, dtype=torch.uint8), src=src)  # the tensor shares the bytes
    if dist.get_rank() == src:
        return plan
    return pickle.loads(buffer)


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    def take_plan(epoch: int) -> None:
        plan = share(plan_shards(epoch, info.world_size) if info.rank == 0 else None)
        mine = sum(1 for owner, _ in plan.values() if owner == info.rank)
        harness.log(info, f"epoch {epoch}: {mine} documents")

    harness.train_in_epochs(info, EPOCHS, STEPS_PER_EPOCH, take_plan)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
