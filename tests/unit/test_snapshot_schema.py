"""The checked-in JSON Schema of the snapshot is the one the dataclasses generate, and real
snapshots (recorded from real jobs on the local cluster) validate against it."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest

from slurmdiag.schema import schema_text, snapshot_json_schema

REPO = Path(__file__).resolve().parents[2]
CHECKED_IN = REPO / "docs" / "snapshot.schema.json"
SNAPSHOTS = sorted(
    p for p in (REPO / "tests" / "fixtures").rglob("*.json")
    if p.name.endswith("snapshot.json") or p.parent.name == "snapshots"
)


def test_checked_in_schema_is_the_generated_one():
    # A failure here means snapshot.py changed: python -m slurmdiag.schema > docs/snapshot.schema.json
    assert CHECKED_IN.read_text() == schema_text()
    jsonschema.Draft202012Validator.check_schema(json.loads(CHECKED_IN.read_text()))


@pytest.fixture(scope="module")
def validator():
    return jsonschema.Draft202012Validator(snapshot_json_schema())


@pytest.mark.parametrize("path", SNAPSHOTS, ids=lambda p: p.name)
def test_real_snapshots_validate(path, validator):
    errors = [e.message for e in validator.iter_errors(json.loads(path.read_text()))]
    assert errors == []


def test_a_wrong_snapshot_does_not_validate(validator):
    assert len(SNAPSHOTS) >= 5
    data = json.loads(SNAPSHOTS[0].read_text())
    broken = copy.deepcopy(data)
    del broken["job"]["id"]
    assert not validator.is_valid(broken)
    node = next(n for n in data["nodes"] if n.get("ranks"))
    node["ranks"][0]["pid"] = "1234"
    assert not validator.is_valid(data)
