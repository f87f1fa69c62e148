"""torchrun agents that wait in their rendezvous for more nodes than the job has (a recorded
2-node job whose agents were given --nnodes=3): the verdict says how many nodes they wait for
and that the missing ones can never join."""

from __future__ import annotations

from dataclasses import replace

import pytest
from snapfactory import recorded

from slurmdiag.analysis import diagnose
from slurmdiag.analysis.verdicts import _nnodes
from slurmdiag.snapshot import Snapshot


def _with_nnodes(snapshot: Snapshot, given: str | None) -> Snapshot:
    def argv(cmdline: tuple[str, ...]) -> tuple[str, ...]:
        kept = tuple(a for a in cmdline if not a.startswith("--nnodes"))
        return kept if given is None else (*kept[:2], f"--nnodes={given}", *kept[2:])
    return replace(snapshot, nodes=tuple(replace(n, other_processes=tuple(
        replace(p, cmdline=argv(p.cmdline)) for p in n.other_processes)) for n in snapshot.nodes))


def test_agents_asking_for_more_nodes_than_the_job_has_are_told() -> None:
    verdict = diagnose(recorded("torchrun_nnodes_overcount")).verdicts[0]
    assert verdict.kind == "no_ranks"
    assert "for 3 nodes (their --nnodes=3) in a job of 2: 1 of them can never join" in verdict.summary


@pytest.mark.parametrize("given", ["2", "1:3", None])
def test_agents_whose_nnodes_the_job_can_meet_wait_for_nodes_that_never_join(given: str | None) -> None:
    # GIVEN the liars: --nnodes as many as the job's nodes, an elastic range the job meets, or
    # no --nnodes read
    verdict = diagnose(_with_nnodes(recorded("torchrun_nnodes_overcount"), given)).verdicts[0]
    # THEN the verdict stays the generic one
    assert verdict.kind == "no_ranks" and "can never join" not in verdict.summary
    assert "for nodes that never join" in verdict.summary


def test_nnodes_forms() -> None:
    assert _nnodes(["torchrun", "--nnodes=4", "x.py"]) == (4, "4")
    assert _nnodes(["torchrun", "--nnodes", "2:8", "x.py"]) == (2, "2:8")
    assert _nnodes(["torchrun", "--nnodes=auto"]) is None
    assert _nnodes(["torchrun", "x.py"]) is None
