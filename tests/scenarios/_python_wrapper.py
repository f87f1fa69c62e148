"""Run a training command as a child and report how it ended (see run_training_py.sh).

What `conda run` and many projects' own launch scripts do: prepare the environment, start the
command with subprocess, wait for it, and exit with its status.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys


def main(command: list[str]) -> int:
    os.environ["TRAIN_WRAPPER"] = f"{socket.gethostname()}:{os.environ.get('SLURM_PROCID', '?')}"
    print(f"wrapper: starting {' '.join(command)}", flush=True)
    status = subprocess.run(command, check=False).returncode
    print(f"wrapper: training exited with status {status}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
