"""InfiniBand port states as the collector ships them: the text of ``/sys/class/infiniband``.

The kernel prints a port's ``state`` and ``phys_state`` as ``<number>: <name>``
(drivers/infiniband/core/sysfs.c: ``4: ACTIVE``, ``5: LinkUp``). The number is the IB
specification's and is what the analysis compares; the name is what a reader sees. A bare name
(an older snapshot, a hand-written one) is read back to its number with the kernel's table.
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = [
    "IB_PHYS_LINK_UP",
    "IB_PHYS_STATES",
    "IB_PORT_ACTIVE",
    "IB_PORT_ACTIVE_STATES",
    "IB_PORT_STATES",
    "IbState",
    "parse_sysfs_ib_phys_state",
    "parse_sysfs_ib_state",
]

#: ``state`` (enum ib_port_state) as the kernel names it.
IB_PORT_STATES = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
#: ``phys_state`` (enum ib_port_phys_state) as the kernel names it.
IB_PHYS_STATES = {
    1: "Sleep",
    2: "Polling",
    3: "Disabled",
    4: "PortConfigurationTraining",
    5: "LinkUp",
    6: "LinkErrorRecovery",
    7: "Phy Test",
}
IB_PORT_ACTIVE = 4
#: A port that carries traffic: ACTIVE, and ACTIVE_DEFER (active, a state change deferred).
IB_PORT_ACTIVE_STATES = frozenset({4, 5})
IB_PHYS_LINK_UP = 5

_SYSFS_RE = re.compile(r"^\s*([0-9]{1,3})\s*:\s*(.*?)\s*$")


class IbState(NamedTuple):
    """A parsed port state: the specification's number (None if unknown) and its name."""

    code: int | None
    name: str | None


def _parse(text: str | None, table: dict[int, str]) -> IbState:
    if text is None or not text.strip():
        return IbState(None, None)
    match = _SYSFS_RE.match(text)
    if match:
        code = int(match.group(1))
        return IbState(code, match.group(2) or table.get(code))
    name = text.strip()
    by_name = {value.upper(): key for key, value in table.items()}
    return IbState(by_name.get(name.upper()), name)


def parse_sysfs_ib_state(text: str | None) -> IbState:
    """``"4: ACTIVE"`` -> ``IbState(4, "ACTIVE")``; ``"ACTIVE"`` alone -> the same; text that is
    neither keeps its words with no number; empty or missing -> ``IbState(None, None)``."""
    return _parse(text, IB_PORT_STATES)


def parse_sysfs_ib_phys_state(text: str | None) -> IbState:
    """``"5: LinkUp"`` -> ``IbState(5, "LinkUp")``, as ``parse_sysfs_ib_state``."""
    return _parse(text, IB_PHYS_STATES)
