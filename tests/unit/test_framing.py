"""Framing of collector output: round trips, srun's interleaving, and damage detection."""

from __future__ import annotations

import random

from slurmdiag.collector import framing
from slurmdiag.transport.framing import CHUNK_CHARS, FrameReader, decode_frames, encode_frames


def _big_doc(node: str, seed: int) -> dict:
    """A document whose compressed payload needs several chunks (random text compresses badly)."""
    rng = random.Random(seed)
    blob = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(4000))
    return {"format": 1, "node": node, "processes": [{"pid": seed, "cmdline": [blob]}]}


def _frame_lines(text: str, node: str) -> list[str]:
    return [line for line in text.splitlines(keepends=True) if line.startswith(f"@SDG1 {node} ")]


def test_round_trip_keeps_document_and_hello() -> None:
    # GIVEN a multi-chunk document framed with a hello line
    doc = _big_doc("node001", 1)
    text = encode_frames("node001", doc, pid=4242)
    assert len(_frame_lines(text, "node001")) > 2
    assert all(len(line) < CHUNK_CHARS + 60 for line in text.splitlines())
    # WHEN it is decoded
    result = decode_frames(text)
    # THEN the document, the hello and nothing else come back
    assert result.documents == {"node001": doc}
    assert result.hello == {"node001": 4242}
    assert result.damaged == {} and result.noise == []


def test_collector_encoder_matches_controller_decoder() -> None:
    # GIVEN the collector's own copy of the encoder
    doc = _big_doc("node007", 7)
    text = "".join(framing.frame_lines("node007", doc))
    # WHEN / THEN the controller decodes it, and both encoders agree byte for byte
    assert decode_frames(text).documents == {"node007": doc}
    assert text == encode_frames("node007", doc)


def test_interleaved_lines_from_three_nodes_in_random_order_decode() -> None:
    # GIVEN three nodes' frames shuffled together with srun noise
    docs = {f"node00{i}": _big_doc(f"node00{i}", i) for i in range(1, 4)}
    lines = []
    for name, doc in docs.items():
        lines += encode_frames(name, doc, pid=100).splitlines(keepends=True)
    lines += ["srun: warning: can't honor --ntasks-per-node set to 1\n", "hello from the job\n"]
    random.Random(3).shuffle(lines)
    # WHEN decoded
    result = decode_frames("".join(lines))
    # THEN every document is complete and the noise is kept aside
    assert result.documents == docs
    assert result.damaged == {}
    assert sorted(result.noise) == [
        "hello from the job",
        "srun: warning: can't honor --ntasks-per-node set to 1",
    ]


def test_srun_label_prefix_is_accepted() -> None:
    doc = _big_doc("n1", 5)
    text = "".join(f"  3: {line}" for line in encode_frames("n1", doc).splitlines(keepends=True))
    result = decode_frames(text)
    assert result.documents == {"n1": doc} and result.noise == []


def test_chunk_split_in_the_middle_damages_only_that_node() -> None:
    # GIVEN node A's second chunk line cut in two with node B's lines between the halves
    doc_a, doc_b = _big_doc("nodeA", 1), _big_doc("nodeB", 2)
    lines_a = encode_frames("nodeA", doc_a).splitlines(keepends=True)
    lines_b = encode_frames("nodeB", doc_b).splitlines(keepends=True)
    cut = lines_a[1]
    head, tail = cut[: len(cut) // 2] + "\n", cut[len(cut) // 2 :]
    text = "".join([lines_a[0], head, *lines_b, tail, *lines_a[2:]])
    # WHEN decoded
    result = decode_frames(text)
    # THEN A is damaged (its joined payload fails the CRC), B decodes, the stray tail is noise
    assert result.documents == {"nodeB": doc_b}
    assert result.damaged == {"nodeA": "crc mismatch"}
    assert result.noise == [tail.rstrip("\n")]


def test_tail_glued_to_the_next_frame_still_lets_that_frame_decode() -> None:
    doc_a, doc_b = _big_doc("nodeA", 1), _big_doc("nodeB", 2)
    lines_a = encode_frames("nodeA", doc_a).splitlines(keepends=True)
    lines_b = encode_frames("nodeB", doc_b).splitlines(keepends=True)
    glued = lines_a[1][:100] + lines_b[0]  # A's line lost its end; B's line starts right after
    text = "".join([lines_a[0], glued, *lines_b[1:], *lines_a[2:]])
    result = decode_frames(text)
    assert result.documents == {"nodeB": doc_b}
    assert result.damaged["nodeA"].startswith("missing chunks 1/")
    assert result.noise == [lines_a[1][:100]]


def test_missing_chunk_is_reported_with_its_number() -> None:
    doc_a, doc_b = _big_doc("nodeA", 1), _big_doc("nodeB", 2)
    lines_a = encode_frames("nodeA", doc_a, pid=11).splitlines(keepends=True)
    total = len(lines_a) - 1  # minus the hello line
    del lines_a[3]  # chunk seq 2
    result = decode_frames("".join(lines_a) + encode_frames("nodeB", doc_b))
    assert result.damaged == {"nodeA": f"missing chunks 1/{total} (seq 2)"}
    assert result.documents == {"nodeB": doc_b}
    assert result.hello == {"nodeA": 11}


def test_corrupted_chunk_fails_the_crc() -> None:
    doc_a, doc_b = _big_doc("nodeA", 1), _big_doc("nodeB", 2)
    lines_a = encode_frames("nodeA", doc_a).splitlines(keepends=True)
    line = lines_a[1]
    pos = len(line) - 10
    lines_a[1] = line[:pos] + ("A" if line[pos] != "A" else "B") + line[pos + 1 :]
    result = decode_frames("".join(lines_a) + encode_frames("nodeB", doc_b))
    assert result.damaged == {"nodeA": "crc mismatch"}
    assert result.documents == {"nodeB": doc_b}


def test_duplicate_chunk_with_other_content_is_damage_but_exact_repeat_is_not() -> None:
    doc = _big_doc("nodeA", 1)
    lines = encode_frames("nodeA", doc).splitlines(keepends=True)
    assert decode_frames("".join(lines + [lines[1]])).documents == {"nodeA": doc}
    other = lines[1][:-5] + "QQQQ\n"
    result = decode_frames("".join(lines + [other]))
    assert result.damaged == {"nodeA": "duplicate chunk 1 with different content"}


def test_hello_without_document_is_a_start_not_damage() -> None:
    # a collector that started and then stopped (SIGSTOP, killed, its deadline) sent nothing
    # damaged: the transport tells a timeout from an exit (test_fanout_assemble)
    result = decode_frames("@SDG1-HELLO node009 777\n")
    assert result.hello == {"node009": 777}
    assert result.damaged == {} and result.documents == {}


def test_valid_crc_over_garbage_is_undecodable() -> None:
    import zlib

    payload = "bm90IHpsaWI="  # base64 of "not zlib"
    crc = f"{zlib.crc32(payload.encode()) & 0xFFFFFFFF:08x}"
    result = decode_frames(f"@SDG1 n 0 1 {crc} {payload}\n")
    assert result.damaged["n"].startswith("undecodable payload")


def test_answered_node_is_told_by_the_last_chunk_only():
    from slurmdiag.transport.framing import answered_node

    lines = encode_frames("node007", {"x": "y" * 3000}, pid=12).splitlines()
    assert [answered_node(line) for line in lines[:-1]] == [None] * (len(lines) - 1)
    assert answered_node(lines[-1]) == "node007"
    assert answered_node("  3: " + lines[-1]) == "node007"  # srun --label
    assert answered_node("plain output of the job") is None


def _fed(text: str, cut: int) -> tuple[FrameReader, list[str | None]]:
    """A reader fed ``text`` as run_command reads it: a line at a time up to the ``cut``-th
    newline (what was read as it came), then the whole text (the rest: a drain, a last line
    without its newline)."""
    reader = FrameReader()
    lines = text.split("\n")
    completed = []
    for line in lines[:cut]:
        before = set(reader.result().documents)
        reader.feed(line)
        completed.append(next(iter(set(reader.result().documents) - before), None))
    reader.feed_rest(text)
    return reader, completed


def test_a_reader_fed_as_the_output_arrives_decodes_each_document_at_its_last_chunk() -> None:
    # GIVEN two nodes' frames interleaved with noise, a label and a carriage return
    a, b = _big_doc("nodeA", 1), _big_doc("nodeB", 2)
    lines_a = encode_frames("nodeA", a, pid=1).splitlines(keepends=True)
    lines_b = encode_frames("nodeB", b, pid=2).splitlines(keepends=True)
    text = "".join([lines_a[0], "  0: " + lines_b[0], *lines_a[1:-1], "job says\r\n",
                    *lines_b[1:], lines_a[-1]])
    # WHEN it is fed line by line, each line's answer noted
    reader = FrameReader()
    done = [reader.add(raw) for raw in text.splitlines()]
    # THEN nodeB's document is decoded at its last chunk, nodeA's at its own, nothing else
    assert [(i, node) for i, node in enumerate(done) if node] == [
        (len(lines_a) + len(lines_b) - 1, "nodeB"), (len(lines_a) + len(lines_b), "nodeA")]
    assert reader.result().documents == {"nodeA": a, "nodeB": b}
    assert reader.result().noise == ["job says"]


def test_a_reader_fed_part_way_then_given_the_rest_answers_as_decode_frames() -> None:
    # GIVEN three nodes' output, one node's chunk damaged, noise with a carriage return inside,
    # and a last line without its newline
    docs = {f"n{i}": _big_doc(f"n{i}", i) for i in range(3)}
    lines = []
    for name, doc in docs.items():
        lines += encode_frames(name, doc, pid=7).splitlines(keepends=True)
    lines.insert(4, "warn\rmore\n")
    bad = next(i for i, line in enumerate(lines) if line.startswith("@SDG1 n1 1 "))
    lines[bad] = lines[bad][:-6] + "QQQQQ\n"
    text = "".join(lines).rstrip("\n")
    expected = decode_frames(text)
    assert set(expected.documents) == {"n0", "n2"} and expected.damaged == {"n1": "crc mismatch"}
    for cut in (0, 5, len(lines) - 1):
        # WHEN the lines up to ``cut`` are fed as they come and the whole output after
        reader, _ = _fed(text, cut)
        # THEN the answer is decode_frames' own
        assert reader.result() == expected


def test_a_chunk_that_contradicts_a_decoded_document_damages_it_as_in_decode_frames() -> None:
    # GIVEN a node's whole document, then one of its chunks again with other content
    doc = _big_doc("nodeA", 1)
    lines = encode_frames("nodeA", doc).splitlines(keepends=True)
    text = "".join(lines + [lines[1][:-5] + "QQQQ\n"])
    # WHEN it is fed a line at a time
    reader, completed = _fed(text, len(lines) + 1)
    # THEN the document was decoded at its last chunk, and the contradiction damages it after
    assert completed[len(lines) - 1] == "nodeA"
    assert reader.result().documents == {}
    assert reader.result().damaged == {"nodeA": "duplicate chunk 1 with different content"}


def test_a_reader_tells_each_document_as_it_is_decoded_the_one_kept() -> None:
    # GIVEN two nodes' frames and a third node's damaged ones, read with a document sink
    told: list[tuple[str, dict]] = []
    reader = FrameReader(lambda node, doc: told.append((node, doc)))
    a, b, c = _big_doc("nodeA", 1), _big_doc("nodeB", 2), _big_doc("nodeC", 3)
    broken = encode_frames("nodeC", c).splitlines()
    broken[0] = broken[0][:-4] + "QQQQ"
    for raw in [*encode_frames("nodeA", a).splitlines(), *broken,
                *encode_frames("nodeB", b).splitlines()]:
        reader.add(raw)
    # THEN the sink heard each whole document once, in the order completed, not the damaged
    # one, and each is the very object the result keeps
    assert [node for node, _ in told] == ["nodeA", "nodeB"]
    kept = reader.result().documents
    assert all(doc is kept[node] for node, doc in told) and told[0][1] == a
