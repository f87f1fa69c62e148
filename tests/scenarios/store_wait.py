"""Scenario: ranks wait on a TCPStore key that one rank sets only when a file appears.

Rank 2 prepares the dataset index: it polls for the upstream marker file
(``while not exists: sleep``), then publishes the key ``dataset_ready`` on the job's store.
The marker never appears. Ranks 0, 1 and 3 block in ``store.wait`` for that key: a wait on a
peer, like a collective, outside any collective. Culprit: rank 2 only (issue 13 blamed
ranks 0-3 as stragglers).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import _harness as harness
from torch.distributed import distributed_c10d

INDEX_RANK = 2
KEY = "dataset_ready"


def upstream_marker() -> Path:
    return Path(os.environ.get("SLURMDIAG_SCENARIO_DIR", "/tmp")) / "upstream" / "_SUCCESS"


def wait_for_upstream(marker: Path) -> None:  # CULPRIT
    """Poll for the upstream job's success marker."""
    while not marker.exists():
        time.sleep(0.5)


def prepare_dataset(info: harness.RankInfo) -> None:
    store = distributed_c10d._get_default_store()
    if info.rank == INDEX_RANK:
        harness.report_ready(info, "polling for the upstream marker", role="culprit")
        wait_for_upstream(upstream_marker())
        store.set(KEY, "1")
    else:
        harness.report_ready(info, f"store.wait for {KEY}", role="waiting")
        store.wait([KEY])  # WAITING


def main() -> None:
    harness.run_then_barrier(prepare_dataset)


if __name__ == "__main__":
    main()
