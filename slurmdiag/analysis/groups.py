"""Process groups read from the ranks' locals: which group each collective runs on, who is in it.

py-spy prints a ``ProcessGroup`` only as ``<torch._C._distributed_c10d.ProcessGroup at 0x..>``:
its ranks are not readable from a dump, and the ``ranks=[...]`` list given to ``new_group`` is
gone by the time the job hangs. What IS readable (the collector keeps it: ``group_locals``):

- the c10d wrapper's ``args``/``kwargs``: no ProcessGroup among them, the call runs on the
  default (world) group;
- the address of the collective's ``group`` in the ``distributed_c10d`` frame;
- the job's own locals holding ``new_group`` results, as variables, dict entries or list items
  (a list of groups and -100s only): a member holds a ProcessGroup there, a non-member torch's
  ``-100`` (``GroupMember.NON_GROUP_MEMBER``).

A name (function and variable, or dict key) is a *membership record* when some ranks hold a
ProcessGroup in it and others ``-100``: it holds the result of one ``new_group`` call, made by
every rank, so its members are the ranks holding a group. A name that holds a group on every
rank (``half = evens if even else odds``) tells nothing and is not used. A collective's group
is named by the first record whose address is the collective's own on that rank.

A name that holds a group on every rank is used only when no record names a rank's collective,
and only when the job's names are consistent: every rank holds a ProcessGroup under it (not
-100), and it aliases the other such names the same way on every rank (two names that hold
one group on one rank and two groups on another are no one ``new_group`` call each). Such a
name is a group of every rank (``{task: dist.new_group(all ranks) for task in tasks}``:
metric_group_order, where ranks wait at one line on two of them); ``half = evens if even else
odds`` is named by its records first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from slurmdiag.analysis.stacks import is_user_file
from slurmdiag.snapshot import Frame, Sample

__all__ = ["WORLD", "GroupView", "read_groups"]

WORLD = "the world (default group)"
NON_MEMBER = "-100"
_PG = r"<torch\._C\._distributed_c10d\.ProcessGroup at (0x[0-9a-fA-F]+)>"
_PG_RE = re.compile(_PG)
_ITEM_RE = re.compile(r'"([^"]{1,80})": (?:' + _PG + r"|(-100)\b)")
# a list of new_group results (``[dist.new_group(r) for r in layout]``): groups and -100s only
_ENTRY = r"(?:<torch\._C\._distributed_c10d\.ProcessGroup at 0x[0-9a-fA-F]+>|-100)"
# (py-spy shows a list's or dict's first items only, then ``...``: ``[<group>, ...]``; the items
# shown keep their positions)
_LIST_RE = re.compile(r"\[" + _ENTRY + r"(?:, " + _ENTRY + r")*(?:, \.\.\.)?\]")
_ENTRY_RE = re.compile(_PG + r"|(-100)")


@dataclass(frozen=True)
class GroupView:
    """What the locals say, for the ranks whose first sample was read with --locals."""

    collective: Mapping[int, str]  # rank -> WORLD or a record's name; absent: not known
    members: Mapping[str, tuple[int, ...]]  # record name -> member ranks (complete records only)
    read: tuple[int, ...]  # ranks whose locals were read


def _values(sample: Sample, frames: tuple[Frame, ...]) -> tuple[dict[str, str], str | None, bool]:
    """(name -> address or NON_MEMBER over the job's own frames, the collective's group address,
    whether a c10d wrapper passed no group at all)."""
    names: dict[str, str] = {}
    address: str | None = None
    passed: bool | None = None
    for index, local, text in sample.groups:
        frame = frames[index] if 0 <= index < len(frames) else None
        if frame is None:
            continue
        if frame.file.endswith("distributed/c10d_logger.py"):
            if local in ("args", "kwargs"):
                passed = bool(passed) or bool(_PG_RE.search(text))
            continue
        if frame.file.endswith("distributed_c10d.py"):
            found = _PG_RE.fullmatch(text)
            if local == "group" and found and address is None:
                address = found.group(1)
            continue
        if not is_user_file(frame.file):
            continue
        owner = frame.function.rsplit(".", 1)[-1]
        whole = _PG_RE.fullmatch(text)
        if whole or text == NON_MEMBER:
            names.setdefault(f"{owner}'s {local}", whole.group(1) if whole else NON_MEMBER)
            continue
        if _LIST_RE.fullmatch(text):
            for position, (pg, minus) in enumerate(_ENTRY_RE.findall(text)):
                names.setdefault(f"{owner}'s {local}[{position}]", pg or minus)
            continue
        for key, pg, minus in _ITEM_RE.findall(text):
            names.setdefault(f"{owner}'s {local}[{key!r}]", pg or minus)
    return names, address, passed is False


def read_groups(ranks: Iterable[tuple[int, Sample | None, tuple[Frame, ...]]],
                world: int | None) -> GroupView:
    """``ranks``: (rank, its sample read with --locals or None, that sample's main-thread
    frames). ``world``: the world size, for a record to be complete."""
    per_rank: dict[int, tuple[dict[str, str], str | None, bool]] = {}
    for rank, sample, frames in ranks:
        if sample is not None and sample.groups:
            per_rank[rank] = _values(sample, frames)
    holders: dict[str, dict[int, str]] = {}
    for rank, (names, _, _) in per_rank.items():
        for name, value in names.items():
            holders.setdefault(name, {})[rank] = value
    members: dict[str, tuple[int, ...]] = {}
    for name, values in holders.items():
        kinds = {v == NON_MEMBER for v in values.values()}
        complete = world is not None and set(values) == set(range(world))
        if kinds == {True, False} and complete:
            members[name] = tuple(sorted(r for r, v in values.items() if v != NON_MEMBER))
    everyone = _everyones_names(holders, per_rank, world)
    collective: dict[int, str] = {}
    unnamed: list[int] = []
    for rank, (names, address, default) in per_rank.items():
        if default:
            collective[rank] = WORLD
        elif address is not None:
            named = next((n for n in members if names.get(n) == address), None)
            if named is None:
                named = next((n for n in everyone if names.get(n) == address), None)
                if named is not None and world is not None:
                    members[named] = tuple(range(world))
            if named is not None:
                collective[rank] = named
            else:
                unnamed.append(rank)
    # py-spy shows a dict's first items only ({"qa": <group>, ...}): a rank whose collective is
    # not the group that name holds on it, where other ranks' collectives are, is on another
    # group, unnamed
    used = [n for n in everyone if n in collective.values()]
    for rank in unnamed:
        if len(used) == 1:
            collective[rank] = f"a group other than {used[0]}"
    return GroupView(collective, members, tuple(sorted(per_rank)))


def _everyones_names(holders: Mapping[str, Mapping[int, str]],
                     per_rank: Mapping[int, tuple[dict[str, str], str | None, bool]],
                     world: int | None) -> list[str]:
    """Names that hold a ProcessGroup on every rank and alias each other alike on every rank
    (one name for one group on every rank), in the order the ranks' frames show them."""
    if world is None:
        return []
    held = [name for name, values in holders.items()  # innermost frame's first
            if set(values) == set(range(world)) and NON_MEMBER not in values.values()]

    def alike(a: str, b: str) -> bool:
        return len({per_rank[r][0][a] == per_rank[r][0][b] for r in range(world)}) == 1

    return [name for name in held if all(alike(name, other) for other in held if other != name)]
