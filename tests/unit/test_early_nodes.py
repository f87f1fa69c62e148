"""The snapshot's nodes made as the documents arrive (api.EarlyNodes, the transports'
``on_document``), not all after the fan-out: the same nodes, whichever way they are made."""

from __future__ import annotations

import json
from pathlib import Path

from slurmdiag import api
from slurmdiag.assemble import node_from_outcome
from slurmdiag.transport.base import NodeOutcome
from slurmdiag.transport.memory import InMemoryTransport

FIXTURES = Path(__file__).parent.parent / "fixtures" / "collector"
REAL_DOC = json.loads((FIXTURES / "node001_simple_sleep.json").read_text())


def test_a_node_made_early_is_the_one_made_after_for_the_same_document() -> None:
    # GIVEN a node's document told as it arrived
    early = api.EarlyNodes()
    doc = json.loads(json.dumps(REAL_DOC))
    early.add("node001", doc)
    outcome = NodeOutcome("node001", "ok", doc)
    # THEN the node of its outcome is the one made then, equal to one made afresh
    made = early.node(outcome)
    assert made is early.node(outcome) and made == node_from_outcome(outcome)
    assert made.ranks, "the fixture's node holds ranks: the comparison is not of empty nodes"


def test_an_outcome_with_another_document_or_status_is_made_afresh() -> None:
    early = api.EarlyNodes()
    told = json.loads(json.dumps(REAL_DOC))
    early.add("node001", told)
    # GIVEN the kept document is another object (a later, better group of the same node)
    other = json.loads(json.dumps(REAL_DOC))
    other["hostname"] = "elsewhere"
    # THEN the node is made from the kept one
    assert early.node(NodeOutcome("node001", "ok", other)).hostname == "elsewhere"
    # AND a node that failed after all is its failure, not the early node
    failed = early.node(NodeOutcome("node001", "error", None, "output damaged in transit"))
    assert failed.status == "error" and failed.message == "output damaged in transit"


def test_a_document_that_cannot_be_made_early_never_stops_the_reading(monkeypatch) -> None:
    # GIVEN the assembly failing in a way node_from_outcome does not turn into an error node
    from slurmdiag import assemble

    def broken(outcome: NodeOutcome):
        raise RuntimeError("assembly bug")

    early = api.EarlyNodes()
    doc = json.loads(json.dumps(REAL_DOC))
    with monkeypatch.context() as patched:
        patched.setattr(assemble, "node_from_outcome", broken)
        early.add("node001", doc)  # THEN no exception reaches the transport's reading
    # AND the node is made after the fan-out, as if it had not been told early
    outcome = NodeOutcome("node001", "ok", doc)
    assert early.node(outcome) == node_from_outcome(outcome)
    assert early.node(outcome) is not early.node(outcome)  # made afresh each time: not kept


def test_collect_snapshot_uses_the_nodes_the_transport_told_of(monkeypatch) -> None:
    # GIVEN a transport that tells each document as it comes, and a count of the nodes made
    # after the fan-out
    from test_api import ONE_SAMPLE, _fake_slurm

    transport = InMemoryTransport({"node001": REAL_DOC, "node002": None})
    _fake_slurm(monkeypatch, transport)
    afterwards: list[str] = []
    real = api.EarlyNodes.node

    def counting(self, outcome):
        if outcome.name not in self._made:
            afterwards.append(outcome.name)
        return real(self, outcome)

    monkeypatch.setattr(api.EarlyNodes, "node", counting)
    snapshot, _ = api.collect_snapshot("42", ONE_SAMPLE, transport=transport)
    # THEN node001 was made as it came, only node002 (no document) after, and both are there
    assert afterwards == ["node002"]
    assert [n.name for n in snapshot.nodes] == ["node001", "node002"]
    assert snapshot.nodes[0].ranks and snapshot.nodes[1].status == "unreachable"
