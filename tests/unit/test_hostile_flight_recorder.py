"""Flight Recorder dumps from a hostile rank: bounded loads, malformed dumps as data (issue 12 p. 6)."""

from __future__ import annotations

import base64
import json
import pickle
import time
from pathlib import Path

import pytest

from slurmdiag.analysis.flight import flight_verdicts, parse_flight_recorder_dump
from slurmdiag.assemble import flight_recorder_section
from slurmdiag.errors import ParseError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "flight_recorder"


def _shared_reference_bomb(depth: int) -> bytes:
    """A few hundred bytes that unpickle to 2**depth leaves: each level is [prev, prev]."""
    level: list = ["x"]
    for _ in range(depth):
        level = [level, level]
    return pickle.dumps({"version": "2.5", "entries": level}, protocol=4)


def _section(payloads: dict[int, bytes]) -> dict:
    doc = {"processes": [
        {"role": "rank", "rank": rank, "flight_recorder": {
            "status": "ok", "format": "pickle", "base64": base64.b64encode(data).decode()}}
        for rank, data in payloads.items()
    ]}
    section = flight_recorder_section({"node001": doc}, requested=True)
    assert section is not None
    return section


def test_a_shared_reference_bomb_is_refused_quickly() -> None:
    # GIVEN a ~300-byte pickle whose shared references expand to 2**40 nodes
    bomb = _shared_reference_bomb(40)
    assert len(bomb) < 400
    # WHEN the controller gathers it
    started = time.monotonic()
    section = _section({0: bomb})
    # THEN it is refused as data, fast (the old loader took 2.9 s at depth 22, doubling per level)
    assert time.monotonic() - started < 10
    assert section["dumps"] == {} and section["missing_ranks"] == [0]
    assert "unreadable dump" in section["errors"][0]
    json.dumps(section)  # and the snapshot stays serialisable


def test_a_deeply_nested_pickle_is_refused() -> None:
    # GIVEN a pickle nested 10,000 deep (MARK x n, then LIST x n: [[[...]]])
    nested = b"\x80\x02" + b"(" * 10_000 + b"l" * 10_000 + b"."
    section = _section({3: nested})
    # THEN refused as data
    assert section["missing_ranks"] == [3] and "unreadable dump" in section["errors"][0]


@pytest.mark.parametrize("payload", [
    b"", b"\x80\x04", b"garbage", b"\x80\x04K\x01.", pickle.dumps(b"\xff" * 10),
    pickle.dumps({1: {2, 3}, (4, 5): b"\xff", "entries": [1, "x", None]}),
])
def test_malformed_pickles_become_data(payload: bytes) -> None:
    # WHEN any malformed or odd pickle is gathered and analysed
    section = _section({1: payload})
    json.dumps(section)
    # THEN the analysis runs through: no exception out of it
    verdicts = flight_verdicts(section)
    assert isinstance(verdicts, list)


@pytest.mark.parametrize("dump", [
    {"entries": [1, 2, 3]},
    {"entries": [{"process_group": 7, "collective_seq_id": "x"}]},
    {"entries": [{"process_group": [None], "collective_seq_id": [1], "frames": [1, {"line": 2}]}]},
    {"entries": "abc", "pg_config": [1, 2]},
    {"entries": [{"collective_seq_id": 10**30}], "pg_config": {"0": {"ranks": "[[[["}}},
    {"entries": {"a": 1}},
    "[" * 100_000,
    "{'entries': " + "(" * 5000 + ")" * 5000 + "}",
])
def test_malformed_dumps_raise_only_parse_error(dump) -> None:
    # GIVEN a malformed dump (as JSON text or already loaded)
    # WHEN it is parsed THEN a FrDump or a ParseError, never TypeError/AttributeError
    try:
        parse_flight_recorder_dump(dump)
    except ParseError:
        pass
    section = {"dumps": {"0": dump, "x": {"entries": []}}, "missing_ranks": ["y", 1],
               "errors": []}
    assert isinstance(flight_verdicts(section), list)


def test_real_dumps_still_load_through_the_bounded_loader() -> None:
    # GIVEN the real torch 2.13 hook dumps, as pickles of their JSON objects
    payloads = {
        rank: pickle.dumps(json.loads((FIXTURES / f"local_gloo_torch2.13_hook_rank{rank}.json")
                                      .read_text()))
        for rank in (0, 1, 2)
    }
    # THEN they load unchanged
    section = _section(payloads)
    assert sorted(section["dumps"]) == ["0", "1", "2"] and section["errors"] == []
    assert section["dumps"]["0"] == json.loads(
        (FIXTURES / "local_gloo_torch2.13_hook_rank0.json").read_text())
