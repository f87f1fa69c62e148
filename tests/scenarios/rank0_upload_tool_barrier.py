"""Scenario (control): rank 0 uploads the checkpoint with a command-line tool while the others
wait in a barrier.

`rank0_upload_barrier` the way many jobs do it: rank 0 runs the storage vendor's copy tool
(`subprocess.run([...cp, file, url])`, here a small Python client standing in for `aws s3 cp`
or `gsutil cp`) and waits for it; the tool sends 64 MB to a gateway that reads 128 KiB/s, for
minutes, idle in one blocking send on a connection that carries data. Rank 0 sits in
`waitpid`, idle; ranks 1-3 wait in `dist.barrier()`; nobody logs. It must never get a hang
verdict: the child moves data (`rank0_archive_barrier`'s child computes; this one transfers).
`rank0_upload_tool_stalled` runs it with a gateway that stops reading: its hung twin.
`rank0_upload_shell_barrier` and `rank0_upload_shell_stalled` run the tool through a shell
(`shell=True`, as `os.system` does): rank 0's child is sh, the tool sh's child.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import _harness as harness
import _training as training
import rank0_upload_barrier as upload
import torch.distributed as dist

CYCLES = 4


#: The vendor's copy tool: a stdlib-only program of its own (tests/scenarios/_copy_tool.py).
COPY_TOOL = str(Path(__file__).with_name("_copy_tool.py"))


def main(stalled: bool = False, shell: bool = False) -> None:
    info = harness.setup()
    harness.init_distributed(info)
    port = upload.start_gateway(stalled) if info.rank == 0 else None
    model = training.build_model()
    step = 0
    for cycle in range(CYCLES):
        for _ in range(upload.EVERY):
            loss = training.train_step(model, training.synthetic_batch(info.rank, step))
            harness.log(info, f"step {step} loss {loss:.4f}")
            step += 1
        if cycle == 0:
            role = ("culprit" if port else "waiting") if stalled else "healthy"
            harness.report_ready(info, "copy tool" if port else "barrier", role=role)
        if port is not None:
            url = f"http://127.0.0.1:{port}/ckpt/{cycle}.pt"
            command = [sys.executable, COPY_TOOL, "--copy", url, str(upload.UPLOAD_BYTES)]
            if shell:  # os.system's way: sh runs the tool and more, rank 0 waits for sh
                line = shlex.join(command) + " && echo uploaded"
                subprocess.run(line, shell=True, check=True)  # CULPRIT
            else:
                subprocess.run(command, check=True)  # CULPRIT
            harness.log(info, f"checkpoint {cycle} uploaded")
        dist.barrier()  # WAITING
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
