"""Results of the analysis stage: what the report and the terminal summary render.

``analyze(snapshot) -> Analysis`` (in slurmdiag.analysis) is a pure function; the verdicts it
produces are also stored back into the snapshot (``Snapshot.verdicts``).
"""

from __future__ import annotations

from collections.abc import Iterable
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
    site: str | None = None  # file:line of top_user_frame (file:function for a moving class)
    op: str | None = None  # the collective the class waits in, if any


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
    site: str | None = None  # file:line (file:function when moving) of the innermost user frame
    op: str | None = None  # the collective waited in, if any
    status: str | None = None  # waiting | blocked | busy | moving | dead | unsampled
    busy_threads: tuple[str, ...] = ()  # other threads seen active in user code


@dataclass(frozen=True)
class Analysis:
    classes: tuple[StackClass, ...] = ()
    tree: TreeNode | None = None
    ranks: tuple[RankView, ...] = ()
    missing_ranks: tuple[int, ...] = ()
    unknown_ranks: tuple[int, ...] = ()  # expected on nodes that failed to report
    world_size: int | None = None
    samples: int = 0  # most samples any rank yielded
    verdicts: tuple[Verdict, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)


def finding(
    kind: str,
    severity: str,
    summary: str,
    ranks: Iterable[int] = (),
    evidence: Iterable[str] = (),
    next_step: str | None = None,
) -> Verdict:
    """A NIC/GPU/log finding: a Verdict without a code site."""
    return Verdict(
        kind=kind,
        severity=severity,
        summary=summary,
        culprit_ranks=tuple(sorted(set(ranks))),
        sites=(),
        evidence=tuple(evidence),
        next_step=next_step,
    )
