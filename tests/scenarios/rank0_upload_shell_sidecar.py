"""Scenario: rank 0's copy tool, run through a shell, stalls while its metrics sidecar keeps
talking, and the others wait in a barrier.

`rank0_upload_shell_stalled` with one more child of rank 0's, started first: a metrics sidecar
(wandb's service process is one) that sends a small record on a local connection every 100 ms.
Rank 0 waits in `wait4` for sh, sh for the copy tool, whose connection is quiet. The sidecar's
traffic is no transfer of the tool's: the job that makes "a child of the rank moves data, so
the rank works through it" lie, when the child waited for is a shell.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import rank0_upload_tool_barrier as tool

if __name__ == "__main__":
    if os.environ.get("SLURM_PROCID") == "0":
        subprocess.Popen([sys.executable, str(Path(__file__).with_name("_sidecar.py"))])
    tool.main(stalled=True, shell=True)
