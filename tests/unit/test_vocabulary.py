"""The shared words: one severity order for analysis, views and the watchdog."""

from __future__ import annotations

import json
from pathlib import Path

from slurmdiag.snapshot import Snapshot
from slurmdiag.vocabulary import Severity, known_severity, severity_rank

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
