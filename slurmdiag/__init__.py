"""slurmdiag: which rank of a hung multi-node PyTorch job on Slurm diverged, where, and why."""

from __future__ import annotations

from typing import Any

from slurmdiag._version import __version__

__all__ = ["Snapshot", "__version__", "attach", "postmortem"]


def __getattr__(name: str) -> Any:
    # Imported lazily so that `slurmdiag --version` and the collector stay light.
    if name == "attach":
        from slurmdiag.api import attach

        return attach
    if name == "postmortem":
        from slurmdiag.post_mortem import postmortem

        return postmortem
    if name == "Snapshot":
        from slurmdiag.snapshot import Snapshot

        return Snapshot
    raise AttributeError(name)
