"""The shared words: severities, verdict kinds and node statuses, one order, one spelling."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from slurmdiag.snapshot import NODE_STATUSES, Node, Snapshot, Verdict, to_jsonable
from slurmdiag.vocabulary import (
    HANG_KINDS,
    NodeStatus,
    Severity,
    VerdictKind,
    known_severity,
    severity_rank,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "snapshots"


def test_severities_sort_most_severe_first_and_unknown_last() -> None:
    words = ["info", "someday", "warning", "critical"]
    assert sorted(words, key=severity_rank) == ["critical", "warning", "info", "someday"]
    assert severity_rank(Severity.WARNING) == severity_rank("warning")


def test_an_unknown_severity_is_shown_as_info() -> None:
    assert known_severity("someday") == "info"
    assert known_severity(Severity.CRITICAL) == "critical"


def test_the_enum_is_its_json_word() -> None:
    # GIVEN a saved snapshot WHEN its severities are read THEN each is one of the shared words
    seen = set()
    for path in FIXTURES.glob("*.json"):
        snapshot = Snapshot.from_dict(json.loads(path.read_text()))
        seen.update(verdict.severity for verdict in snapshot.verdicts)
    assert seen and seen <= {s.value for s in Severity}
    assert json.dumps(Severity.INFO) == '"info"'


# --- verdict kinds and node statuses ---------------------------------------------------------

PACKAGE = Path(__file__).resolve().parents[2] / "slurmdiag"
SAVED = Path(__file__).resolve().parents[1] / "fixtures"


def test_every_kind_in_the_saved_snapshots_is_a_word_of_the_vocabulary() -> None:
    # GIVEN every snapshot slurmdiag wrote that the tests keep (accuracy runs, issue 13, probes);
    # synthetic_rank_gated.json is hand-made and names kinds no slurmdiag writes, on purpose: the
    # views show a kind they do not know as it is
    kinds, statuses = set(), set()
    for path in [*SAVED.glob("snapshots/probe_*.json"), *SAVED.glob("accuracy/*.json"),
                 *SAVED.glob("issue13/snapshot_*.json")]:
        data = json.loads(path.read_text())
        snapshot = Snapshot.from_dict(data)
        kinds.update(v.kind for v in snapshot.verdicts)
        statuses.update(n.status for n in snapshot.nodes)
    # THEN each kind and node status written is one of the shared words
    assert len(kinds) > 5 and kinds <= {k.value for k in VerdictKind}
    assert statuses and statuses <= set(NODE_STATUSES)


def test_no_verdict_is_made_with_a_kind_spelled_out() -> None:
    # GIVEN every Verdict built in the package (directly, or through the analyses' helpers)
    spelled = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", getattr(node.func, "attr", ""))
            args = [kw.value for kw in node.keywords if kw.arg == "kind" and name == "Verdict"]
            args += node.args[:1] if name in ("_verdict", "finding") else []
            for arg in args:
                for value in (arg.body, arg.orelse) if isinstance(arg, ast.IfExp) else (arg,):
                    if isinstance(value, ast.Constant):
                        spelled.append(f"{path.name}:{node.lineno} {value.value!r}")
    # THEN each kind comes from VerdictKind, never a string a typo could change
    assert spelled == []


def test_node_statuses_are_the_vocabularys() -> None:
    assert NODE_STATUSES == ("ok", "timeout", "error", "unreachable")
    assert tuple(NodeStatus) == NODE_STATUSES
    assert set(HANG_KINDS) <= set(VerdictKind)


def test_members_are_their_words_in_json_text_and_sets() -> None:
    # GIVEN a verdict and a node made with the enums, and the same made with plain strings
    made = (Verdict(VerdictKind.STRAGGLER, Severity.CRITICAL, "s"), Node("n1", NodeStatus.TIMEOUT))
    plain = (Verdict("straggler", "critical", "s"), Node("n1", "timeout"))
    # THEN they are equal, hash alike, and print and serialise byte-identically
    assert made == plain and hash(made[0]) == hash(plain[0])
    assert VerdictKind.STRAGGLER in {"straggler"} and "timeout" in {NodeStatus.TIMEOUT}
    assert f"{VerdictKind.STRAGGLER}|{NodeStatus.OK:>4}|%s" % Severity.INFO == "straggler|  ok|info"
    assert json.dumps(to_jsonable(made)) == json.dumps(to_jsonable(plain))


def test_the_schema_leaves_kinds_and_statuses_open() -> None:
    # The snapshot schema does not list the words (a newer slurmdiag's verdict kind must still
    # validate and load: views show an unknown kind as is). If it ever lists them, the lists
    # must be the vocabulary's.
    from slurmdiag.schema import snapshot_json_schema

    schema = snapshot_json_schema()["$defs"]
    for definition, key, words in (("Verdict", "kind", VerdictKind), ("Node", "status", NodeStatus),
                                   ("Verdict", "severity", Severity)):
        listed = schema[definition]["properties"][key].get("enum")
        assert listed is None or listed == [w.value for w in words]
