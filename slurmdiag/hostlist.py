"""Integer ranges (``0-6,8,10-15``) and Slurm host lists (``node[001-004,007],login1``).

Both ways: the analysis, the views and the watchdog write ranks and nodes compactly
(``format_int_ranges``, ``compress_hostlist``); the Slurm parsers and the commands read Slurm's
host lists (``expand_hostlist``) and index ranges (``parse_int_ranges``). Pure functions, no Slurm
needed, the same rules as Slurm's ``hostlist.c`` (``scontrol show hostnames``).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence

from slurmdiag.errors import ParseError

__all__ = [
    "SlurmTextError",
    "compress_hostlist",
    "expand_hostlist",
    "format_int_ranges",
    "parse_int_ranges",
]


# Slurm refuses absurd ranges too; this keeps a typo like node[1-99999999] from eating memory.
_MAX_HOSTS = 1 << 20

_RANGE_ITEM_RE = re.compile(r"^([0-9]{1,18})(?:-([0-9]{1,18}))?$")


class SlurmTextError(ParseError, ValueError):
    """A host list, integer range or job id Slurm would not print (also a ValueError, as it was)."""


def parse_int_ranges(text: str) -> list[int]:
    """Expand ``"0-6,8"`` to ``[0, 1, 2, 3, 4, 5, 6, 8]``, keeping order and duplicates."""
    text = text.strip()
    if not text:
        return []
    out: list[int] = []
    for item in text.split(","):
        lo, hi = _parse_range_item(item.strip(), text)
        out.extend(range(lo, hi + 1))
    return out


def format_int_ranges(ints: Iterable[int]) -> str:
    """Render integers as Slurm-style ranges: ``[0..6, 8, 10..15]`` -> ``"0-6,8,10-15"``."""
    values = sorted(set(ints))
    if values and values[0] < 0:
        raise SlurmTextError(f"negative value {values[0]} cannot be written as a range")
    return ",".join(_format_runs(values, width=0))


def _parse_range_item(item: str, whole: str) -> tuple[int, int]:
    match = _RANGE_ITEM_RE.match(item)
    if not match:
        raise SlurmTextError(f"invalid range {item!r} in {whole!r}")
    lo = int(match.group(1))
    hi = int(match.group(2)) if match.group(2) is not None else lo
    if hi < lo:
        raise SlurmTextError(f"descending range {item!r} in {whole!r}")
    if hi - lo >= _MAX_HOSTS:
        raise SlurmTextError(f"range {item!r} in {whole!r} is too large")
    return lo, hi


def _format_runs(sorted_unique: Sequence[int], width: int) -> list[str]:
    """Group consecutive integers into ``lo-hi`` runs, zero-padded to ``width``."""
    runs: list[str] = []
    for _, group in itertools.groupby(enumerate(sorted_unique), key=lambda p: p[1] - p[0]):
        members = [value for _, value in group]
        lo, hi = str(members[0]).zfill(width), str(members[-1]).zfill(width)
        runs.append(lo if lo == hi else f"{lo}-{hi}")
    return runs


def expand_hostlist(expr: str) -> list[str]:
    """Expand a Slurm host list like ``scontrol show hostnames`` does (order and duplicates kept).

    ``node[1-3,7]``, ``node[001-003]`` (width kept), ``a[1-2],b[3-4],c``, ``r[1-2]n[1-2]``
    (cartesian product, first bracket varies slowest). ``(null)`` and empty give ``[]``.
    Raises ``ValueError`` on what Slurm itself rejects: unbalanced or nested brackets, bad ranges,
    text after the last bracket (``r[1-2]n[1-2]-bmc``).
    """
    expr = expr.strip()
    if not expr or expr == "(null)":
        return []
    hosts: list[str] = []
    for token in _split_hostlist(expr):
        hosts.extend(_expand_host_token(token, expr))
        if len(hosts) > _MAX_HOSTS:
            raise SlurmTextError(f"host list {expr!r} expands to more than {_MAX_HOSTS} names")
    return hosts


def _split_hostlist(expr: str) -> list[str]:
    """Split on commas/whitespace that are outside brackets."""
    tokens: list[str] = []
    current: list[str] = []
    inside = False
    for char in expr:
        if char == "[":
            if inside:
                raise SlurmTextError(f"Invalid hostlist: nested '[' in {expr!r}")
            inside = True
        elif char == "]":
            if not inside:
                raise SlurmTextError(f"Invalid hostlist: ']' without '[' in {expr!r}")
            inside = False
        elif not inside and (char == "," or char.isspace()):
            if current:
                tokens.append("".join(current))
                current = []
            continue
        current.append(char)
    if inside:
        raise SlurmTextError(f"Invalid hostlist: unbalanced '[' in {expr!r}")
    if current:
        tokens.append("".join(current))
    return tokens


_BRACKET_RE = re.compile(r"\[([^\[\]]*)\]")


def _expand_host_token(token: str, whole: str) -> list[str]:
    parts = _BRACKET_RE.split(token)  # literal, group, literal, group, ..., literal
    literals, groups = parts[0::2], parts[1::2]
    if not groups:
        return [token]
    if literals[-1]:
        # Slurm's hostlist.c only accepts a bracket at the very end of a token.
        raise SlurmTextError(f"Invalid hostlist: text after ']' in {whole!r}")
    choices: list[list[str]] = []
    for group in groups:
        if not group.strip():
            raise SlurmTextError(f"Invalid hostlist: empty brackets in {whole!r}")
        values: list[str] = []
        for item in group.split(","):
            item = item.strip()
            lo, hi = _parse_range_item(item, whole)
            width = len(item.split("-", 1)[0])
            values.extend(str(n).zfill(width) for n in range(lo, hi + 1))
        choices.append(values)
    names: list[str] = []
    for combo in itertools.product(*choices):
        names.append("".join(lit + num for lit, num in zip(literals, combo)) + literals[-1])
    return names


_NUMBERED_NAME_RE = re.compile(r"^(.*?)([0-9]+)$")


def compress_hostlist(names: Iterable[str]) -> str:
    """Compress host names to a Slurm host list: ``node001..node004,node007`` -> ``node[001-004,007]``.

    Names are grouped by prefix and number width (``node09``/``node10`` share width 2, ``node9`` and
    ``node10`` are both unpadded); groups keep the order of their first name, numbers inside a group
    are sorted and de-duplicated. Names without a trailing number are kept as they are.
    """
    names = [n.strip() for n in names if n.strip()]
    # A zero-padded number fixes the width of its group; unpadded numbers at least that long
    # print identically with that width, so they join the group (node[098-100]).
    padded_widths: dict[str, set[int]] = {}
    for name in names:
        match = _NUMBERED_NAME_RE.match(name)
        if match and len(match.group(2)) > 1 and match.group(2).startswith("0"):
            padded_widths.setdefault(match.group(1), set()).add(len(match.group(2)))

    groups: dict[tuple[str, int], list[int]] = {}
    order: list[tuple[str, int] | str] = []
    plain_seen: set[str] = set()
    for name in names:
        match = _NUMBERED_NAME_RE.match(name)
        if not match or "[" in name or "]" in name:
            if name not in plain_seen:
                plain_seen.add(name)
                order.append(name)
            continue
        prefix, digits = match.group(1), match.group(2)
        if len(digits) > 1 and digits.startswith("0"):
            width = len(digits)
        else:
            fitting = [w for w in padded_widths.get(prefix, ()) if w <= len(digits)]
            width = max(fitting, default=0)
        key = (prefix, width)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(int(digits))

    out: list[str] = []
    for entry in order:
        if isinstance(entry, str):
            out.append(entry)
            continue
        prefix, width = entry
        values = sorted(set(groups[entry]))
        runs = _format_runs(values, width)
        if len(values) == 1:
            out.append(prefix + runs[0])
        else:
            out.append(f"{prefix}[{','.join(runs)}]")
    return ",".join(out)

