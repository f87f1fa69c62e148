"""Scenario: ranks with many threads; rank 0's main thread waits on a busy helper thread.

Every rank decodes batches on a ThreadPoolExecutor of 16 workers, so each rank holds 16
idle pool threads (parked in the pool's queue) besides its main thread. Before saving its
checkpoint, rank 0 computes the checkpoint's checksum on a separate helper thread and waits
for the result; an off-by-one makes the chunk loop step past the end of the data and never
stop, so that helper thread spins at full CPU while the main thread waits in
Future.result(). The other ranks wait for rank 0 in step 4's gradient all_reduce.
"""

from __future__ import annotations

import struct
import threading
import zlib
from concurrent.futures import Future, ThreadPoolExecutor

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

DECODE_WORKERS = 16
CHECKPOINT_AT_STEP = 3
CHUNK = 4096
STEPS = 1000


def start_decoders() -> ThreadPoolExecutor:
    """A decode pool with every worker started (each task waits until all have started)."""
    pool = ThreadPoolExecutor(max_workers=DECODE_WORKERS, thread_name_prefix="decode")
    started = threading.Barrier(DECODE_WORKERS)
    for future in [pool.submit(started.wait) for _ in range(DECODE_WORKERS)]:
        future.result()
    return pool


def decode_batch(pool: ThreadPoolExecutor, rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    return pool.submit(training.synthetic_batch, rank, step).result()


def checksum(data: bytes) -> int:
    """CRC32 over CHUNK-sized chunks."""
    crc, offset = 0, 0
    while offset != len(data):  # steps past the end when len(data) is not a multiple of CHUNK
        crc = zlib.crc32(data[offset:offset + CHUNK], crc)
        offset += CHUNK
    return crc


def checksum_in_background(data: bytes) -> Future[int]:
    future: Future[int] = Future()
    thread = threading.Thread(target=lambda: future.set_result(checksum(data)),
                              name="checksum", daemon=True)
    thread.start()
    return future


def save_checkpoint(model: torch.nn.Module, info: harness.RankInfo, step: int) -> None:
    data = b"".join(struct.pack(f"{p.numel()}f", *p.detach().flatten().tolist())
                    for p in model.parameters())
    pending = checksum_in_background(data)
    harness.report_ready(info, f"step {step}: Future.result() of the checksum", role="culprit")
    crc = pending.result()  # CULPRIT
    harness.log(info, f"checkpoint crc {crc:08x}")


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    pool = start_decoders()
    model = training.build_model()
    for step in range(STEPS):
        if step == CHECKPOINT_AT_STEP + 1:
            harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
        loss = training.train_step(model, decode_batch(pool, info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
        if info.rank == 0 and step == CHECKPOINT_AT_STEP:
            save_checkpoint(model, info, step)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
