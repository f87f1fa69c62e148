"""Results of the analysis stage: what the report and the terminal summary render.

``analyze(snapshot) -> Analysis`` (in slurmdiag.analysis) is a pure function; the verdicts it
produces are also stored back into the snapshot (``Snapshot.verdicts``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slurmdiag.snapshot import Frame, Verdict

# Frame kinds, innermost meaningful frame of a stack decides the kind of the stack.
FRAME_KINDS = ("collective", "data_loading", "io", "sleep", "lock", "user", "library", "native")


@dataclass(frozen=True)
class ClassifiedFrame:
    frame: Frame
    kind: str  # one of FRAME_KINDS
    is_user: bool  # not site-packages / stdlib / frozen / native


@dataclass(frozen=True)
class StackClass:
    """An equivalence class: ranks whose main-thread stacks are identical (STAT's 2D view)."""

    ranks: tuple[int, ...]
    frames: tuple[ClassifiedFrame, ...]  # innermost first, of the representative stack
    kind: str  # kind of the stack: collective | data_loading | io | sleep | lock | user | ...
    top_user_frame: Frame | None
    top_frame: Frame | None
    stationary: bool  # same stack in every sample, for every rank of the class
    label: str  # compact rank set, e.g. "0-6,8"


@dataclass(frozen=True)
class TreeNode:
    """A node of the merged prefix tree (outermost frame at the root)."""

    frame: Frame | None  # None for the root
    ranks: tuple[int, ...]
    children: tuple[TreeNode, ...] = ()
    is_user: bool = False
    kind: str = "library"


@dataclass(frozen=True)
class RankView:
    """Per-rank digest the report and terminal use (one per rank present in the snapshot)."""

    rank: int
    node: str
    pid: int
    state: str | None
    cpu_percent: float | None
    top_user_frame: Frame | None
    top_frame: Frame | None
    kind: str
    stationary: bool
    class_index: int | None  # index into Analysis.classes


@dataclass(frozen=True)
class Analysis:
    classes: tuple[StackClass, ...] = ()
    tree: TreeNode | None = None
    ranks: tuple[RankView, ...] = ()
    missing_ranks: tuple[int, ...] = ()
    verdicts: tuple[Verdict, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
