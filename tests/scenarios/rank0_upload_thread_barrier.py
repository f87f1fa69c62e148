"""Scenario (control): rank 0 uploads the checkpoint on a worker thread and waits for it while
the others wait in a barrier.

`rank0_upload_barrier` with the upload handed to a thread pool (`executor.submit(upload,
...).result()`, the shape of checkpoint libraries that upload in the background and wait
before the next save): rank 0's main thread waits on the future, idle; its `ckpt-upload`
thread sits in one blocking send to a gateway reading 128 KiB/s, for minutes, on a connection
that carries data; ranks 1-3 wait in `dist.barrier()`; nobody logs. It must never get a hang
verdict.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import _harness as harness
import _training as training
import rank0_upload_barrier as upload
import torch.distributed as dist

CYCLES = 4


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    port = upload.start_gateway(stalled=False) if info.rank == 0 else None
    uploader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ckpt-upload")
    model = training.build_model()
    step = 0
    for cycle in range(CYCLES):
        for _ in range(upload.EVERY):
            loss = training.train_step(model, training.synthetic_batch(info.rank, step))
            harness.log(info, f"step {step} loss {loss:.4f}")
            step += 1
        if cycle == 0:
            harness.report_ready(info, "upload thread" if port else "barrier", role="healthy")
        if port is not None:
            url = f"http://127.0.0.1:{port}/ckpt/{cycle}.pt"
            uploader.submit(upload.upload_checkpoint, url, bytes(upload.UPLOAD_BYTES)).result()
            harness.log(info, f"checkpoint {cycle} uploaded")
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
