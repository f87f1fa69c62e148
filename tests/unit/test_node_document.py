"""The node document's contract: declared once (slurmdiag/node_document.py), written down
(docs/node-document.md), checked before it is read (a document of another format is data: a
failed node with the reason, never a traceback)."""

from __future__ import annotations

import ast
import json
import re
import typing
from pathlib import Path
from typing import Any

import pytest

from slurmdiag import node_document as nd
from slurmdiag.assemble import node_from_outcome
from slurmdiag.node_document import NODE_DOCUMENT_FORMAT, NodeDocumentError, read_node_document
from slurmdiag.transport.base import NodeOutcome

REPO = Path(__file__).resolve().parents[2]
LIVE = REPO / "tests" / "fixtures" / "collector" / "local_one_rank_document.json"
OLDER = REPO / "tests" / "fixtures" / "collector" / "node001_simple_sleep.json"

# Where each nested object of the document is declared.
NESTED: dict[str, type] = {
    "processes": nd.Process, "samples": nd.Sample, "usage": nd.Usage, "strace": nd.Strace,
    "connections": nd.Connection, "flight_recorder": nd.FlightRecorder, "gpu": nd.Gpu,
    "query_gpu": nd.ToolResult, "compute_apps": nd.ToolResult, "qx": nd.ToolResult,
    "nics": nd.Nics, "interfaces": nd.Interface, "ib_ports": nd.IbPort,
    "recent_traffic": nd.RecentTraffic, "active": nd.RecentConnection,
    "stalled": nd.StalledConnection, "file_locks": nd.FileLock, "tracer": nd.Tracer,
    "blocked_calls": nd.BlockedCall, "aligned": nd.Aligned, "waited": nd.Waited,
}
FREE_FORM = {"tools", "timings", "env", "threads"}  # keyed by data (tool, phase, variable, TID)


def undeclared(value: Any, declared: type, where: str) -> list[str]:
    """Keys of ``value`` that ``declared`` (a TypedDict) does not list, recursively."""
    found = []
    keys = typing.get_type_hints(declared)
    for key, item in value.items():
        if key not in keys:
            found.append(f"{where}.{key}")
            continue
        if key in FREE_FORM or key not in NESTED:
            continue
        for element in item if isinstance(item, list) else [item]:
            if isinstance(element, dict):
                found += undeclared(element, NESTED[key], f"{where}.{key}")
    return found


@pytest.mark.parametrize("path", [LIVE, OLDER], ids=["live", "older"])
def test_every_key_a_real_collector_wrote_is_declared(path: Path) -> None:
    # GIVEN documents real collectors wrote (one rank with samples, strace and a TCP connection)
    document = json.loads(path.read_text())
    # THEN each of their keys, at every level, is declared on the controller side
    assert undeclared(document, nd.NodeDocument, "doc") == []
    assert document["format"] == NODE_DOCUMENT_FORMAT


def test_every_declared_key_is_written_down() -> None:
    # GIVEN the prose of the contract
    text = (REPO / "docs" / "node-document.md").read_text()
    quoted = set(re.findall(r"`([a-z_0-9]+)`", text)) | set(re.findall(r'"([a-z_0-9]+)"', text))
    # THEN every key the controller declares is named in it
    missing = [f"{cls.__name__}.{key}" for cls in {nd.NodeDocument, *NESTED.values()}
               for key in typing.get_type_hints(cls) if key not in quoted]
    assert missing == []


def test_assemble_reads_only_declared_keys() -> None:
    # GIVEN every key assemble.py reads with .get("...") or ["..."] from a document
    source = (REPO / "slurmdiag" / "assemble.py").read_text()
    read = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "get" and node.args:
            key: Any = node.args[0]
        elif isinstance(node, ast.Subscript):
            key = node.slice
        else:
            continue
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            read.add(key.value)
    declared = {key for cls in {nd.NodeDocument, *NESTED.values()} for key in typing.get_type_hints(cls)}
    # THEN none is a key the contract does not have (a typo reads None forever)
    assert read and read - declared == set()


@pytest.mark.parametrize("found", [2, 0, None, "1", True, 1.5])
def test_a_document_of_another_format_is_a_failed_node_with_the_reason(found: Any) -> None:
    # GIVEN the live document, labelled with another format (or none)
    document = dict(json.loads(LIVE.read_text()), format=found)
    if found is None:
        del document["format"]
    # WHEN it is assembled
    node = node_from_outcome(NodeOutcome("nodeX", "ok", document))
    # THEN the node failed, the message names both formats and what to do, nothing was guessed
    assert node.status == "error" and node.ranks == () and node.hostname is None
    assert f"format {found!r}" in node.message and f"reads format {NODE_DOCUMENT_FORMAT}" in node.message
    assert "node cache" in node.message


def test_the_live_document_assembles() -> None:
    node = node_from_outcome(NodeOutcome("nodeX", "ok", json.loads(LIVE.read_text())))
    assert node.status == "ok" and [r.rank for r in node.ranks] == [0]
    (rank,) = node.ranks
    assert rank.samples[0].threads[0].frames[0].function == "wait_for_peer"
    assert rank.connections[0].state == "ESTABLISHED" and rank.strace is not None


@pytest.mark.parametrize(
    ("key", "value"),
    [("processes", {"pid": 1}), ("errors", "boom"), ("nics", []), ("gpu", "absent"), ("tools", [])],
)
def test_a_top_level_value_of_the_wrong_kind_is_refused_by_name(key: str, value: Any) -> None:
    document = dict(json.loads(LIVE.read_text()), **{key: value})
    with pytest.raises(NodeDocumentError, match=repr(key)):
        read_node_document(document)
    node = node_from_outcome(NodeOutcome("nodeX", "ok", document))
    assert node.status == "error" and repr(key) in node.message


def test_not_an_object_is_refused() -> None:
    with pytest.raises(NodeDocumentError, match="not an object"):
        read_node_document([1, 2])  # type: ignore[arg-type]
