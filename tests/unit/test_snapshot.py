"""The snapshot contract: JSON round trip, forward compatibility, frame interning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurmdiag.errors import ParseError
from slurmdiag.snapshot import SCHEMA_VERSION, Snapshot

FIXTURE = Path(__file__).parent.parent / "fixtures" / "snapshots" / "synthetic_rank_gated.json"


def test_round_trip_is_lossless():
    snapshot = Snapshot.from_json(FIXTURE.read_text())
    again = Snapshot.from_json(snapshot.to_json())
    assert again == snapshot
    assert again.schema == SCHEMA_VERSION


def test_unknown_keys_are_ignored_for_forward_compatibility():
    data = json.loads(FIXTURE.read_text())
    data["future_key"] = {"x": 1}
    data["nodes"][0]["future_node_key"] = [1, 2]
    assert Snapshot.from_dict(data).job.id == data["job"]["id"]


def test_equal_frames_are_one_object_after_loading():
    snapshot = Snapshot.from_json(FIXTURE.read_text())
    frames = [f for _, r in snapshot.all_ranks() for s in r.samples for t in s.threads for f in t.frames]
    assert len(frames) > len({id(f) for f in frames})  # shared
    assert len({id(f) for f in frames}) == len(set(frames))  # one object per distinct frame


@pytest.mark.parametrize("text", ["[]", '{"nodes": []}', "not json", '{"schema": "1", "job": {}}'])
def test_not_a_snapshot_is_a_parse_error(text):
    with pytest.raises(ParseError):
        Snapshot.from_json(text)
