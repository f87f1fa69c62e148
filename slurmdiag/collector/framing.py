"""The document's way out: JSON without the json package, and the framed lines on stdout.

stdout carries only frames (see frame_lines): ``@SDG1-HELLO <node> <pid>``, then the document as
base64(zlib(json)) cut into ``@SDG1 <node> <seq> <total> <crc32> <chunk>`` lines, each written
with one os.write so that srun's merging of many nodes' stdout cannot cut a line. The Emitter
writes the document once, from the main code or from a signal handler, whichever comes first.
"""

import posix as os

try:
    import _json  # json's C accelerator: the json package itself imports re and enum
except ImportError:  # an interpreter built without it: see dumps() and loads()
    _json = None  # type: ignore[assignment]


FORMAT = 1
COLLECTOR_VERSION = "1"
CHUNK_CHARS = 600


# With the C accelerator _json directly, as json.dumps/json.loads would call it. The json package
# is imported only when _json is missing or refuses the call, and to word a decoding error.


def dumps(obj):
    """``json.dumps(obj, separators=(",", ":"), default=str)``: compact, ASCII, NaN allowed."""
    if _json is not None:
        try:
            # Arguments as json.encoder.JSONEncoder.iterencode passes them (3.8 to 3.13):
            # markers, default, encoder, indent, key and item separators, sort_keys, skipkeys,
            # allow_nan. The encoder returns the text in chunks.
            encode = _json.make_encoder(
                {}, str, _json.encode_basestring_ascii, None, ":", ",", False, False, True
            )
        except TypeError:  # another signature on a future Python
            encode = None
        if encode is not None:
            return "".join(encode(obj, 0))
    import json

    return json.dumps(obj, separators=(",", ":"), default=str)


_JSON_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": -float("inf")}


class _ScanContext:
    """The settings json.decoder.JSONDecoder hands _json.make_scanner (json.loads' defaults)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _JSON_CONSTANTS.__getitem__


def loads(text):
    """``json.loads(text)`` for a str; raises ValueError (json's own message) if it is not JSON."""
    if _json is not None:
        whitespace = " \t\n\r"  # json's WHITESPACE
        try:
            start = len(text) - len(text.lstrip(whitespace))
            scan = _json.make_scanner(_ScanContext)  # type: ignore[arg-type]
            value, end = scan(text, start)
            if not text[end:].strip(whitespace):
                return value
        except (StopIteration, ValueError):
            pass  # json.loads below says what is wrong, in its words
    import json

    return json.loads(text)


def frame_lines(node, doc):
    """The framed lines of ``doc``; the controller's slurmdiag/transport/framing.py decodes them."""
    import binascii
    import zlib

    data = dumps(doc).encode()
    payload = binascii.b2a_base64(zlib.compress(data, 6), newline=False).decode("ascii")
    crc = "{:08x}".format(zlib.crc32(payload.encode("ascii")) & 0xFFFFFFFF)
    chunks = [payload[i : i + CHUNK_CHARS] for i in range(0, len(payload), CHUNK_CHARS)] or [""]
    total = len(chunks)
    return [f"@SDG1 {node} {seq} {total} {crc} {chunk}\n" for seq, chunk in enumerate(chunks)]


def _write_line(line):
    data = line.encode("ascii", "replace")
    while data:  # one write for lines this short on a pipe; the loop covers odd outputs
        written = os.write(1, data)
        data = data[written:]


class Emitter:
    """Writes the document exactly once: from the main code, or from a signal handler.

    A handler runs on the main thread between any two bytecodes, also in the middle of an emit.
    Whoever takes the one token first writes (list.pop() is atomic); the others leave it be.
    """

    def __init__(self, node):
        self.node = node
        self.token = [True]
        self.done = False

    def claim(self):
        """True once: the caller is the one to write."""
        try:
            return self.token.pop()
        except IndexError:
            return False

    def write(self, doc):
        try:
            lines = frame_lines(self.node, doc)
        except (RuntimeError, ValueError, TypeError):  # a value that does not encode
            keep = (
                "format",
                "node",
                "hostname",
                "python",
                "collector_version",
                "started",
                "duration_s",
                "discovery",
                "tools",
            )
            minimal = {k: doc.get(k) for k in keep}
            minimal["errors"] = list(doc.get("errors") or []) + [
                "document could not be encoded while collection was still running"
            ]
            minimal["processes"] = []
            lines = frame_lines(self.node, minimal)
        for line in lines:
            _write_line(line)
        self.done = True
