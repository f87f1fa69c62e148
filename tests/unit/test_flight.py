"""Flight Recorder dumps: parse every version we have, align by collective_seq_id."""

from __future__ import annotations

import json
from pathlib import Path

from slurmdiag.analysis.flight import (
    first_disagreement,
    flight_verdicts,
    parse_flight_recorder_dump,
)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "flight_recorder"


def load_local_dumps():
    return {r: (FIXTURES / f"local_gloo_torch2.13_hook_rank{r}.json").read_text() for r in range(3)}


def test_tutorial_v25_unpickled_print_parses():
    # GIVEN the tutorial's printed dump (Python tuples, '...' elisions, version 2.5)
    dump = parse_flight_recorder_dump((FIXTURES / "tutorial_unpickled_dump_v2.5.txt").read_text())
    # THEN its entry and process group are read
    assert dump.version == "2.5"
    assert dump.pg_ranks == {"0": (0, 1)}
    entry = dump.entries[0]
    assert (entry.pg, entry.pg_desc, entry.seq, entry.op) == ("0", "default_pg", 1, "nccl:all_reduce")
    assert entry.input_sizes == "[[3, 4]]"
    assert entry.frames[0] == "test_short_pickle at pytorch/test/distributed/test_c10d_nccl.py:3647"


def test_real_gloo_dumps_keep_pg_config_keyed_by_empty_string():
    # GIVEN real dumps written by slurmdiag.torch's hook from a hung gloo job (torch 2.13)
    dump = parse_flight_recorder_dump(load_local_dumps()[0])
    # THEN gloo's '' key is accepted and entries are named from their own process_group
    assert dump.pg_ranks == {"": (0, 1, 2)}
    assert [e.seq for e in dump.entries] == [1, 2, 3, 4, 5]
    assert {e.pg for e in dump.entries} == {"0"}
    assert all(e.state == "scheduled" for e in dump.entries)  # gloo never moves them on


def test_first_mismatch_is_found_by_sequence_number_not_state():
    # GIVEN rank 1 called all_gather where ranks 0 and 2 called all_reduce (collective #5)
    dumps = {r: parse_flight_recorder_dump(t) for r, t in load_local_dumps().items()}
    # WHEN aligned
    findings = first_disagreement(dumps)
    # THEN collective 5 is named, with rank 1 as the odd one and its user call site
    assert len(findings) == 1
    finding = findings[0]
    assert (finding.seq, finding.kind, finding.culprit_ranks) == (5, "op", (1,))
    assert finding.by_rank == {0: "gloo:all_reduce", 1: "gloo:all_gather", 2: "gloo:all_reduce"}
    verdicts = flight_verdicts({"dumps": load_local_dumps()})
    assert verdicts[0].kind == "flight_recorder_mismatch"
    assert verdicts[0].culprit_ranks == (1,)
    assert verdicts[0].sites == ("/tmp/fr_cap.py:11",)
    assert "#5" in verdicts[0].summary


def test_rank_that_has_not_reached_a_collective_is_named():
    # GIVEN rank 2's dump stops one collective earlier than the others
    texts = load_local_dumps()
    short = json.loads(texts[2])
    short["entries"] = short["entries"][:-1]
    texts = {0: texts[0], 2: json.dumps(short)}
    dumps = {r: parse_flight_recorder_dump(t) for r, t in texts.items()}
    # WHEN aligned
    finding = first_disagreement(dumps)[0]
    # THEN rank 2 is the one that has not reached collective 5
    assert (finding.seq, finding.kind, finding.culprit_ranks) == (5, "not_reached", (2,))


def test_missing_and_broken_dumps_lower_confidence_but_do_not_abort():
    # GIVEN rank 2's dump is missing and rank 3's is garbage, while 0 and 1 disagree
    texts = load_local_dumps()
    section = {"dumps": {"0": texts[0], "1": texts[1], "3": "not a dump"}, "missing_ranks": [2]}
    # WHEN verdicts are made
    verdicts = flight_verdicts(section)
    # THEN the mismatch is still reported, and its evidence says what is missing or unreadable
    assert len(verdicts) == 1
    evidence = " | ".join(verdicts[0].evidence)
    assert "no Flight Recorder dump from ranks 2" in evidence
    assert "rank 3:" in evidence
