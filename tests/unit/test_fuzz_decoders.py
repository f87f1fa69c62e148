"""Every parser and decoder is total: mutations of the real fixtures give a result or ParseError.

Inputs are the real tool outputs in tests/fixtures/, mutated byte-wise (flips, cuts,
duplications, hostile tokens such as '²', NUL, bidi overrides, huge numbers) and, for JSON,
structurally (a value swapped for another JSON value of any type). A decoder may return anything
or raise ``ParseError`` (its subclasses included); any other exception is a finding.

The suite runs a small deterministic number of examples (profile ``ci``); ``make fuzz`` runs
the long profile (``HYPOTHESIS_PROFILE=long``, ``FUZZ_EXAMPLES`` examples per decoder).
"""

from __future__ import annotations

import base64
import json
import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmdiag import hostlist
from slurmdiag.analysis.flight import flight_verdicts, parse_flight_recorder_dump
from slurmdiag.assemble import flight_recorder_section, node_from_outcome
from slurmdiag.errors import ParseError
from slurmdiag.parsers import job_log, nccl_log, nvidia_smi, pyspy, strace
from slurmdiag.slurm import parse as slurm
from slurmdiag.snapshot import Snapshot
from slurmdiag.transport.base import NodeOutcome
from slurmdiag.transport.framing import decode_frames

_COMMON = {
    "deadline": None,
    "database": None,
    "suppress_health_check": list(HealthCheck),
}
settings.register_profile("ci", max_examples=25, derandomize=True, **_COMMON)
settings.register_profile(
    "long", max_examples=int(os.environ.get("FUZZ_EXAMPLES", "2000")), derandomize=False, **_COMMON
)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SEED_CHARS = 16 * 1024  # long logs are cut: the decoders are line- or record-based

# Hostile tokens: digits that are not ASCII, NUL and control characters, bidi overrides,
# numbers past every bound, structure characters.
TOKENS = [
    "²", "٣", "\x00", "\x1b[2J", "\r", "\n", "\u202e", "\ufeff", "-1", "nan", "inf",
    "9" * 30, "9" * 5000, "=", " ", "[", "]", "{", "}", "(", ")", '"', "'", ",", ":", "|",
    "null", "true", "[]", "{}", " UserId=root StdOut=/etc/shadow", "@SDG1 n 0 99999999999999999999999 00000000 A",
    "JobId=", "Nodes=", "GRES=", "\t", "\\", "%", "é", "\udcff",
]  # fmt: skip


def _read(path: Path) -> str:
    return path.read_bytes().decode("utf-8", errors="surrogateescape")[:SEED_CHARS]


def seeds(pattern: str) -> list[str]:
    found = sorted(FIXTURES.glob(pattern))
    assert found, f"no fixture matches {pattern}"
    return [_read(p) for p in found if p.is_file()]


@st.composite
def mutated_text(draw: st.DrawFn, corpus: list[str]) -> str:
    """One real fixture with up to eight byte-level mutations."""
    text = draw(st.sampled_from(corpus))
    for _ in range(draw(st.integers(0, 8))):
        size = len(text)
        at = draw(st.integers(0, size))
        op = draw(st.sampled_from(["token", "char", "delete", "duplicate", "truncate", "swap"]))
        if op == "token":
            text = text[:at] + draw(st.sampled_from(TOKENS)) + text[at:]
        elif op == "char":
            text = text[:at] + draw(st.characters()) + text[at + 1 :]
        elif op == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 64)) :]
        elif op == "duplicate":
            end = min(size, at + draw(st.integers(1, 256)))
            text = text[:end] + text[at:end] + text[end:]
        elif op == "truncate":
            text = text[:at]
        else:
            other = draw(st.integers(0, size))
            low, high = sorted((at, other))
            text = text[:low] + text[high:] + text[low:high]
    return text


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=8,
)


def _paths(value: Any, prefix: tuple = (), limit: int = 400) -> list[tuple]:
    out: list[tuple] = [prefix]
    stack = [(value, prefix)]
    while stack and len(out) < limit:
        item, path = stack.pop()
        children = item.items() if isinstance(item, dict) else enumerate(item) if isinstance(item, list) else ()
        for key, child in children:
            out.append(path + (key,))
            stack.append((child, path + (key,)))
    return out


def _replace(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        copy = dict(value)
        copy[head] = _replace(value[head], rest, new)
        return copy
    copy_list = list(value)
    copy_list[head] = _replace(value[head], rest, new)
    return copy_list


@st.composite
def mutated_json(draw: st.DrawFn, corpus: list[str]) -> str:
    """A real JSON fixture with up to four values swapped for arbitrary JSON, then maybe cut."""
    value = json.loads(draw(st.sampled_from(corpus)))
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(_paths(value)))
        value = _replace(value, path, draw(JSON_VALUES))
    text = json.dumps(value)
    if draw(st.booleans()):
        text = draw(mutated_text([text]))
    return text


def full_json_seeds(pattern: str) -> list[str]:
    return [p.read_text() for p in sorted(FIXTURES.glob(pattern))]


@dataclass(frozen=True)
class Decoder:
    name: str
    call: Callable[[Any], object]
    inputs: st.SearchStrategy[Any]


def _sys_class(text: str) -> object:
    """A node document whose InfiniBand ports carry the text, as the collector ships sysfs'."""
    root = FIXTURES / "net_ib" / "sys_class_infiniband_h100"
    ports = [{"device": p.parents[2].name, "port": 1, "state": text, "phys_state": text[::-1],
              "rate": _read(p.parent / "rate"), "link_layer": text[:3]}
             for p in sorted(root.glob("*/ports/1/state"))]
    return node_from_outcome(NodeOutcome("node001", "ok", {"format": 1, "nics": {"ib_ports": ports}}))


def _pickled_dump(data: bytes) -> object:
    doc = {"processes": [{"role": "rank", "rank": 0, "flight_recorder": {
        "status": "ok", "format": "pickle", "base64": base64.b64encode(data).decode()}}]}
    section = flight_recorder_section({"node001": doc}, requested=True)
    json.dumps(section)
    return flight_verdicts(section)


def _flight_text(text: str) -> object:
    flight_verdicts({"dumps": {"0": text, "1": text[: len(text) // 2]}, "missing_ranks": [],
                     "errors": []})
    return parse_flight_recorder_dump(text)


def _node_document(text: str) -> object:
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    return node_from_outcome(NodeOutcome("node001", "ok", doc))


_FR_PICKLES = [
    pickle.dumps(json.loads((FIXTURES / "flight_recorder" / f"local_gloo_torch2.13_hook_rank{r}.json").read_text()))
    for r in (0, 1)
]


@st.composite
def mutated_bytes(draw: st.DrawFn, corpus: list[bytes]) -> bytes:
    data = bytearray(draw(st.sampled_from(corpus)))
    for _ in range(draw(st.integers(1, 8))):
        at = draw(st.integers(0, max(0, len(data) - 1)))
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        if op == "flip" and data:
            data[at] = draw(st.integers(0, 255))
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 16))]
        else:
            del data[at:]
    return bytes(data)


def _text(pattern: str) -> st.SearchStrategy[str]:
    return mutated_text(seeds(pattern))


def _json(pattern: str) -> st.SearchStrategy[str]:
    corpus = full_json_seeds(pattern)
    return mutated_json(corpus) | mutated_text([c[:SEED_CHARS] for c in corpus])


SCONTROL = "slurm/*show_job*.txt"
DECODERS = [
    Decoder("scontrol show job", slurm.parse_scontrol_job,
            _text(SCONTROL) | _text("slurm/[hit]*.txt")),
    Decoder("scontrol show node", slurm.parse_scontrol_node_addrs, _text("slurm/*show_node*")),
    Decoder("squeue --json", slurm.parse_squeue_json, _json("slurm/*squeue_json*.json")),
    Decoder("scontrol --json", slurm.parse_scontrol_job_json, _json("slurm/slurmrestd_*.json")),
    Decoder("squeue text", slurm.parse_squeue_text, _text("slurm/*squeue*format*.txt")),
    Decoder("hostlist", hostlist.expand_hostlist, mutated_text(["node[001-004,010]", "gpu-a[1-2]-b[01-03]", "n1,n2"])),
    Decoder("job id", slurm.parse_job_id, mutated_text(["123", "123_4", "123+1", "12_[1-3]"])),
    Decoder("py-spy json", pyspy.parse_pyspy_json, _json("py_spy/local_pyspy0.4_json_*.json")),
    Decoder("strace -c", strace.parse_strace_summary, _text("strace/*.txt")),
    Decoder("nvidia-smi csv", nvidia_smi.parse_nvidia_smi_query_csv, _text("nvidia_smi/*csv*.txt")),
    Decoder("nvidia-smi apps csv", nvidia_smi.parse_nvidia_smi_apps_csv, _text("nvidia_smi/*compute_apps*.txt")),
    Decoder("nvidia-smi xml", nvidia_smi.parse_nvidia_smi_xml, _text("nvidia_smi/*.xml")),
    Decoder("Xid (dmesg)", nvidia_smi.parse_xid_events, _text("nvidia_smi/dmesg_*.txt")),
    Decoder("NCCL log", lambda t: nccl_log.parse_nccl_log(t, source="log"), _text("nccl/*")),
    Decoder("job log", lambda t: (job_log.parse_srun_task_exits(t, source="log"),
                                  job_log.parse_python_tracebacks(t, source="log")),
            _text("job_logs/*")),
    Decoder("/sys/class/infiniband", _sys_class, mutated_text(["4: ACTIVE", "5: LinkUp", "0x1"])),
    Decoder("framing", decode_frames, _text("collector/srun_stdout_*.txt")),
    Decoder("node document", _node_document, _json("collector/node001_*.json")),
    Decoder("snapshot loader", Snapshot.from_json,
            _json("snapshots/*.json") | _json("py_spy/local_scenario_dead_rank_snapshot.json")),
    Decoder("flight recorder (json/text)", _flight_text,
            _json("flight_recorder/*rank0.json") | _text("flight_recorder/tutorial_*.txt")),
    Decoder("flight recorder (pickle)", _pickled_dump, mutated_bytes(_FR_PICKLES)),
]  # fmt: skip


@pytest.mark.parametrize("decoder", DECODERS, ids=[d.name for d in DECODERS])
@settings(settings.get_profile(PROFILE))
@given(data=st.data())
def test_decoder_is_total(decoder: Decoder, data: st.DataObject) -> None:
    # GIVEN a mutation of a real fixture WHEN the decoder reads it
    raw = data.draw(decoder.inputs, label="input")
    # THEN it returns, or raises ParseError: never another exception
    try:
        decoder.call(raw)
    except ParseError:
        pass
