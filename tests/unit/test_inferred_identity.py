"""A rank that discovery numbered from its launcher's task (no RANK in its environment) is said
as such, not listed as an error (`mismatched_collectives_script_relaunch`, a real look: the
children of a script that runs itself again, numbered NODE_RANK x n + LOCAL_RANK)."""

from __future__ import annotations

from dataclasses import replace

from snapfactory import recorded

from slurmdiag.analysis import diagnose
from slurmdiag.report.render import node_problems
from slurmdiag.report.terminal import format_summary

LOOK = "mismatched_collectives_script_relaunch.default"


def test_an_inferred_rank_is_an_identity_note_not_an_error() -> None:
    snapshot = recorded(LOOK)
    problems = [p for node in snapshot.nodes for p in node_problems(node)]
    identities = [p for p in problems if p[1].endswith(" identity")]
    assert identities and all(level == "info" for level, _, _ in identities)
    assert all(" inferred as " in message for _, _, message in identities)
    assert not any(" inferred as " in message for level, what, message in problems
                   if what.endswith(" error"))
    lines = format_summary(snapshot, diagnose(snapshot), color=False, report_path=None)
    assert any(" identity on " in line for line in lines), lines
    assert not any("error on" in line and "inferred as" in line for line in lines), lines


def test_its_liar_another_rank_error_stays_an_error() -> None:
    snapshot = recorded(LOOK)
    node = snapshot.nodes[0]
    ranks = (replace(node.ranks[0], errors=("rank 9 was inferred as gone: py-spy failed",)),
             *node.ranks[1:])
    problems = node_problems(replace(node, ranks=ranks))
    assert ("warn", f"rank {node.ranks[0].rank} error", "rank 9 was inferred as gone: py-spy failed") in problems
