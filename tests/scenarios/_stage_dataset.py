"""The staging step of run_with_python_staging.sh: wait until the node's dataset copy is
complete (its marker file exists). The first node's copy is there already; the second node's
marker never appears (its copy service stalled)."""

from __future__ import annotations

import os
import time
from pathlib import Path


def wait_for_dataset(marker: Path, poll_s: float = 2.0) -> None:
    while not marker.exists():
        time.sleep(poll_s)  # CULPRIT


def main() -> None:
    state = Path(os.environ.get("SLURMDIAG_SCENARIO_DIR", "/tmp"))
    node = int(os.environ.get("SLURM_NODEID", "0"))
    marker = state if node == 0 else state / f"dataset-node{node}" / ".complete"
    print(f"node {node}: waiting for {marker}", flush=True)
    wait_for_dataset(marker)


if __name__ == "__main__":
    main()
