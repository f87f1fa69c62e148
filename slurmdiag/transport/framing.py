"""Frames of the node collector's stdout: decode them (controller side), encode them (tests).

srun merges the stdout of all its tasks, so every node's document travels as short lines::

    @SDG1-HELLO <node> <pid>                              once, when the collector starts
    @SDG1-READY <node>                                    once its processes are found, when
                                                          it waits for the go (srun's stdin)
    @SDG1 <node> <seq> <total> <crc32-hex> <chunk>        payload = base64(zlib(json document))

Each chunk line is written with one ``os.write``. A node whose chunks are missing, repeated with
other content, or fail the CRC of the joined payload is *damaged* (with a message saying how);
the other nodes still decode. Lines that are not frames are kept as noise (srun warnings, prints
of the job). The collector (slurmdiag/collector/framing.py) carries its own copy of the encoder.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from slurmdiag.safeio import decimal_int

FRAME_TAG = "@SDG1 "
HELLO_TAG = "@SDG1-HELLO "
READY_TAG = "@SDG1-READY "
CHUNK_CHARS = 600
# Bounds on what one node may send: its document decompressed, and so its number of chunks
# (zlib shrinks JSON at most ~1000x; base64 adds a third). A claim beyond them is damage.
MAX_DOCUMENT_BYTES = 64 * 1024 * 1024
MAX_CHUNKS = MAX_DOCUMENT_BYTES // CHUNK_CHARS + 1
# srun --label prefixes each line with the task number ("  3: ").
_LABEL = re.compile(r"^\s*\d+:\s?$")


@dataclass
class FrameResult:
    documents: dict[str, dict[str, Any]] = field(default_factory=dict)
    hello: dict[str, int] = field(default_factory=dict)
    damaged: dict[str, str] = field(default_factory=dict)
    noise: list[str] = field(default_factory=list)


@dataclass
class _Group:
    """The chunks of one document (one node, one total, one CRC)."""

    total: int
    crc: str
    chunks: dict[int, str] = field(default_factory=dict)
    conflict: int | None = None
    bad_seq: int | None = None


def encode_frames(node: str, doc: dict[str, Any], pid: int | None = None) -> str:
    """The collector's framing of ``doc`` (with a hello line first when ``pid`` is given)."""
    data = json.dumps(doc, separators=(",", ":"), default=str).encode()
    payload = base64.b64encode(zlib.compress(data, 6)).decode("ascii")
    crc = f"{zlib.crc32(payload.encode('ascii')) & 0xFFFFFFFF:08x}"
    chunks = [payload[i : i + CHUNK_CHARS] for i in range(0, len(payload), CHUNK_CHARS)] or [""]
    lines = [f"{HELLO_TAG}{node} {pid}\n"] if pid is not None else []
    lines += [f"{FRAME_TAG}{node} {i} {len(chunks)} {crc} {c}\n" for i, c in enumerate(chunks)]
    return "".join(lines)


def answered_node(line: str) -> str | None:
    """The node whose document ends with this stdout line (its last chunk), else None.

    Read line by line as the step's output arrives, for the live progress of attach; decoding
    and checking the whole document is decode_frames' job at the end."""
    at = line.rfind(FRAME_TAG)
    if at < 0:
        return None
    parts = line[at:].split(" ", 5)
    if len(parts) != 6:
        return None
    seq, total = decimal_int(parts[2]), decimal_int(parts[3])
    return parts[1] if seq is not None and total is not None and seq == total - 1 else None


def decode_frames(text: str) -> FrameResult:
    """Sort merged collector output into complete documents, damaged nodes and noise."""
    reader = FrameReader()
    for raw in text.splitlines():
        reader.add(raw)
    return reader.result()


#: on_document(node, document): a node's document, as soon as it is whole and decoded.
DocumentSink = Callable[[str, dict[str, Any]], None]


class FrameReader:
    """decode_frames as the output arrives, a line at a time: a node's document is checked and
    decoded once its last chunk is in (zlib and JSON, ~1 ms a node), while the other nodes are
    still at work, not all at once after the step ends. ``result()`` is decode_frames' answer
    for every line added (a decoded group changed afterwards is decoded again there).
    ``on_document(node, document)`` is told of each document as soon as it is decoded."""

    def __init__(self, on_document: DocumentSink | None = None) -> None:
        self.on_document = on_document
        self.hello: dict[str, int] = {}
        self.noise: list[str] = []
        self.chars = 0  # of the output read through ``feed``: each line with its newline
        self._groups: dict[str, dict[tuple[int, str], _Group]] = {}
        self._decoded: dict[int, tuple[dict[str, Any] | None, str]] = {}  # id(group): its answer

    def feed(self, line: str) -> None:
        """A line of the output as it arrives, without its newline (run_command's
        ``on_stdout_line``)."""
        self.chars += len(line) + 1
        for raw in line.splitlines():  # as decode_frames splits: a "\r" inside ends a line too
            self.add(raw)

    def feed_rest(self, text: str) -> None:
        """The lines of ``text``, the whole output, after those ``feed`` read: what came after
        the last newline, or after srun was ended (run_command's drain)."""
        for raw in text[self.chars:].splitlines():
            self.add(raw)

    def add(self, raw: str) -> str | None:
        """One line (of ``str.splitlines``); the node whose document it completed, if any."""
        line = raw.rstrip("\r")
        at = line.rfind("@SDG1")  # a cut line may run into the next frame: the last one counts
        if at < 0:
            if line.strip():
                self.noise.append(line)
            return None
        prefix, line = line[:at], line[at:]
        if prefix.strip() and not _LABEL.match(prefix):
            self.noise.append(prefix)  # the head of a line that another node's line cut
        if line.startswith(READY_TAG) and len(line.split()) == 2:
            return None  # for StartGate (transport/srun.py), as the output arrives
        if line.startswith(HELLO_TAG):
            parts = line.split()
            hello_pid = decimal_int(parts[2]) if len(parts) == 3 else None
            if hello_pid is not None:
                self.hello[parts[1]] = hello_pid
            else:
                self.noise.append(line)
            return None
        parts = line.split(" ")
        seq_or_none = decimal_int(parts[2], 30) if len(parts) == 6 else None
        total_or_none = decimal_int(parts[3], 30) if len(parts) == 6 else None
        if (
            not line.startswith(FRAME_TAG)
            or seq_or_none is None
            or total_or_none is None
            or len(parts[4]) != 8
        ):
            self.noise.append(line)
            return None
        node, seq, total, crc, chunk = parts[1], seq_or_none, total_or_none, parts[4], parts[5]
        group = self._groups.setdefault(node, {}).setdefault((total, crc), _Group(total, crc))
        self._decoded.pop(id(group), None)
        if seq >= total:
            group.bad_seq = seq
        elif seq in group.chunks and group.chunks[seq] != chunk:
            group.conflict = seq
        else:
            group.chunks[seq] = chunk
        if len(group.chunks) < group.total or group.total > MAX_CHUNKS:
            return None
        answer = self._decoded[id(group)] = _assemble(group)
        if answer[0] is None:
            return None
        if self.on_document is not None:
            self.on_document(node, answer[0])
        return node

    def result(self) -> FrameResult:
        result = FrameResult(hello=dict(self.hello), noise=list(self.noise))
        for node, by_key in self._groups.items():
            problems: list[str] = []
            for group in sorted(by_key.values(), key=lambda g: len(g.chunks), reverse=True):
                doc, problem = self._decoded.get(id(group)) or _assemble(group)
                if doc is not None:
                    result.documents[node] = doc
                    break
                problems.append(problem)
            if node not in result.documents:
                result.damaged[node] = problems[0]
        # a node that said hello and sent no frame is not damaged: its collector stopped or ran
        # out of time (the transport knows which: srun's outcomes_from_output, ssh's run_node)
        return result


def _assemble(group: _Group) -> tuple[dict[str, Any] | None, str]:
    if group.conflict is not None:
        return None, f"duplicate chunk {group.conflict} with different content"
    if group.bad_seq is not None:
        return None, f"chunk number {group.bad_seq} out of range for {group.total} chunks"
    if group.total > MAX_CHUNKS:
        return None, f"claims {group.total} chunks, more than a document can have ({MAX_CHUNKS})"
    if len(group.chunks) < group.total:
        shown = []
        for i in range(group.total):  # bounded by MAX_CHUNKS
            if i not in group.chunks:
                shown.append(str(i))
                if len(shown) > 10:
                    break
        listed = ",".join(shown[:10]) + ("..." if len(shown) > 10 else "")
        count = group.total - len(group.chunks)
        return None, f"missing chunks {count}/{group.total} (seq {listed})"
    payload = "".join(group.chunks[i] for i in range(group.total))
    if f"{zlib.crc32(payload.encode('ascii', 'replace')) & 0xFFFFFFFF:08x}" != group.crc:
        return None, "crc mismatch"
    try:
        inflater = zlib.decompressobj()
        data = inflater.decompress(base64.b64decode(payload, validate=True), MAX_DOCUMENT_BYTES)
        if inflater.unconsumed_tail:
            return None, f"document larger than {MAX_DOCUMENT_BYTES} bytes once decompressed"
        doc = json.loads(data)
    except (binascii.Error, zlib.error, ValueError, RecursionError) as exc:
        return None, f"undecodable payload: {exc}"
    if not isinstance(doc, dict):
        return None, "undecodable payload: not a JSON object"
    return doc, ""
