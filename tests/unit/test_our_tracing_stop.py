"""A rank's wait channel read as our own strace stopped it (`store_wait`, the full `make
accuracy` run of 924898c, defaults): rank 0 waits in its store wait like ranks 1 and 3, its
state read S, its wchan `ptrace_stop` (strace attaching or leaving at that moment). It was
taken as "blocked in I/O" and blamed with rank 2, the culprit."""

from __future__ import annotations

from dataclasses import replace

from snapfactory import map_rank, recorded

from slurmdiag.analysis import diagnose
from slurmdiag.analysis.verdicts import _without_our_stops

NAME = "store_wait.default.ptrace_stop"


def test_our_strace_stop_is_no_wait_and_the_culprit_stands_alone() -> None:
    snapshot = recorded(NAME)
    rank0 = next(r for n in snapshot.nodes for r in n.ranks if r.rank == 0)
    assert (rank0.state, rank0.wchan, rank0.tracer) == ("S", "ptrace_stop", None)
    v = diagnose(snapshot).verdicts[0]
    assert (v.kind, v.culprit_ranks) == ("straggler", (2,)), v
    assert v.sites[0].endswith("store_wait.py:30")


def test_a_debuggers_stop_keeps_its_wait_channel() -> None:
    # a rank in a tracing stop (state t), or held by another tool's tracer: its wchan says so
    stopped = map_rank(recorded(NAME), 0, lambda r: replace(r, state="t"))
    kept = _without_our_stops(stopped)
    assert next(r for n in kept.nodes for r in n.ranks if r.rank == 0).wchan == "ptrace_stop"
