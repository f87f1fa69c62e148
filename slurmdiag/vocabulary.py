"""Words the snapshot, the analysis and every view share, defined once.

``str``-valued enums: a member compares equal to its string and serialises as it, so snapshots
written before these existed load unchanged and the JSON stays the same.
"""

from __future__ import annotations

from enum import Enum


class Severity(str, Enum):
    """How loud a verdict or finding is; the order is the order of this class."""

    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"


_RANK = {member.value: index for index, member in enumerate(Severity)}


def severity_rank(severity: str) -> int:
    """0 for the most severe; an unknown word (a newer snapshot's) sorts after every known one."""
    return _RANK.get(str(getattr(severity, "value", severity)), len(_RANK))


def known_severity(severity: str) -> str:
    """The severity as a known word, ``info`` for one this version does not know (for views)."""
    value = str(getattr(severity, "value", severity))
    return value if value in _RANK else Severity.INFO.value
