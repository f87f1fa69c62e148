"""Analysis: pure functions from a Snapshot to an Analysis (stack classes, tree, verdicts)."""

from __future__ import annotations

from slurmdiag.analysis.model import Analysis
from slurmdiag.analysis.verdicts import diagnose

__all__ = ["Analysis", "analyze", "diagnose"]

analyze = diagnose
