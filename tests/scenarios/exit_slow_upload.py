"""Scenario (control): training is over and every rank's last upload is slow, not stuck.

`exit_waits_uploader`'s healthy twin. Every rank uploads its final checkpoint (64 MB) in a
non-daemon "uploader" thread and returns from main, so Python's exit waits for the upload.
The storage gateway (a child process of the rank, standing in for a remote service; the one
rank0_upload_barrier runs) reads 32 KiB every 0.25 s (128 KiB/s): the upload takes several minutes, and the
uploader sits in one blocking send all along while its connection keeps carrying data. Then
the gateway answers and every rank exits with code 0.

Any look inside those minutes sees what exit_waits_uploader shows (every main thread in
threading._shutdown, the uploader idle in a socket call): must never alarm.
"""

from __future__ import annotations

import threading
import urllib.request

import _harness as harness
import _training as training
import torch.distributed as dist
from rank0_upload_barrier import start_gateway

STEPS = 4
UPLOAD_BYTES = 64 << 20
#: urlopen without a timeout; no proxy, so the request goes where the URL says.
CLIENT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def upload_checkpoint(url: str, data: bytes) -> None:
    request = urllib.request.Request(url, data=data, method="PUT")
    with CLIENT.open(request) as response:
        response.read()


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    port = start_gateway(stalled=False)
    model = training.build_model()
    for step in range(STEPS):
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
    url = f"http://127.0.0.1:{port}/checkpoints/final/rank{info.rank}.pt"
    checkpoint = bytes(UPLOAD_BYTES)
    threading.Thread(target=upload_checkpoint, args=(url, checkpoint), name="uploader").start()
    dist.destroy_process_group()
    harness.log(info, "training done")
    harness.report_ready(info, "interpreter exit: joins the uploader (slow, moving)",
                         role="healthy")


if __name__ == "__main__":
    main()
