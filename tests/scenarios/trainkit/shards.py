"""Shard bookkeeping: one rank builds the shard index once the upstream export is done."""

from __future__ import annotations

import os
import time
from pathlib import Path

POLL_SECONDS = 0.5


def export_marker() -> Path:
    return Path(os.environ.get("SLURMDIAG_SCENARIO_DIR", "/tmp")) / "export" / "_SUCCESS"


def wait_for_export(marker: Path) -> None:  # CULPRIT
    """Poll for the upstream export's success marker (no timeout: it always came, until now)."""
    while not marker.exists():
        time.sleep(POLL_SECONDS)


def refresh_index(marker: Path) -> int:
    wait_for_export(marker)
    return len(list(marker.parent.glob("*.tar")))
