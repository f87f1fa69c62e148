"""Flight Recorder: parse per-rank dumps and find the first collective the ranks disagree on.

Dumps come as JSON (``_dump_fr_trace_json``, or the pickle converted to JSON inside the job) or as
the pretty-printed unpickled form of the PyTorch tutorial (version 2.5). Entries are aligned per
process group by ``collective_seq_id`` — never by ``state``: gloo leaves every entry
``scheduled``. gloo keys ``pg_config`` by ``''``, so process groups are named from the entries'
own ``process_group`` field. A missing rank's dump lowers confidence; it never aborts.
"""

from __future__ import annotations

import ast
import json
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from slurmdiag.analysis.stacks import is_user_file
from slurmdiag.errors import ParseError
from slurmdiag.hostlist import format_int_ranges
from slurmdiag.safeio import decimal_int
from slurmdiag.snapshot import Verdict
from slurmdiag.vocabulary import VerdictKind


@dataclass(frozen=True)
class FrEntry:
    pg: str  # process group name (entries' process_group[0], else pg_id)
    pg_desc: str
    seq: int  # collective_seq_id (p2p_seq_id for p2p entries)
    is_p2p: bool
    op: str  # profiling_name, e.g. "gloo:all_reduce"
    input_sizes: str
    input_dtypes: str
    output_sizes: str
    state: str | None
    frames: tuple[str, ...] = ()  # "function at file:line", innermost first


@dataclass(frozen=True)
class FrDump:
    version: str | None
    entries: tuple[FrEntry, ...]
    pg_ranks: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True)
class FrDisagreement:
    pg: str
    seq: int
    kind: str  # "op" | "sizes" | "dtypes" | "not_reached"
    by_rank: Mapping[int, str]  # what each rank has at that seq ("-" = not reached)
    culprit_ranks: tuple[int, ...]
    frames: Mapping[int, tuple[str, ...]] = field(default_factory=dict)


def _tutorial_to_json(text: str) -> Any:
    """The tutorial's unpickled print: tuples in parentheses, '...' elisions, Python literals."""
    lines = [ln for ln in text.splitlines() if ln.strip() not in ("...", "...,")]
    body = "\n".join(lines)
    body = re.sub(r",(\s*[\]}])", r"\1", body)  # trailing commas left by the elisions
    body = body.replace(": null", ": None").replace(": true", ": True").replace(": false", ": False")
    return ast.literal_eval(body)


# A dump larger than this is not read (a real torch dump is a few MB).
MAX_DUMP_CHARS = 64 * 1024 * 1024


def _load(data: str | bytes | Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(data, Mapping):
        return data
    if not isinstance(data, (str, bytes)):
        raise ParseError(f"not a Flight Recorder dump: a {type(data).__name__}")
    if len(data) > MAX_DUMP_CHARS:
        raise ParseError(f"Flight Recorder dump larger than {MAX_DUMP_CHARS} characters")
    text = data.decode(errors="replace") if isinstance(data, bytes) else data
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        try:
            obj = _tutorial_to_json(text)
        except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError) as exc:
            raise ParseError(f"not a Flight Recorder dump: {type(exc).__name__}") from None
    if not isinstance(obj, Mapping) or "entries" not in obj and "error" not in obj:
        raise ParseError("not a Flight Recorder dump (no 'entries')")
    return obj


def _ranks_list(value: Any) -> tuple[int, ...]:
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return ()
    try:
        return tuple(int(v) for v in value)
    except (TypeError, ValueError):
        return ()


def parse_flight_recorder_dump(data: str | bytes | Mapping[str, Any]) -> FrDump:
    """One rank's dump (any version 2.5 to current) into aligned-ready entries.

    Total: a dump of any shape gives an ``FrDump`` or raises ``ParseError``; entries that are
    not records are skipped.
    """
    obj = _load(data)
    try:
        return _parse_dump(obj)
    except (TypeError, AttributeError, ValueError, KeyError, IndexError, OverflowError,
            RecursionError) as exc:
        raise ParseError(f"malformed Flight Recorder dump: {type(exc).__name__}: {exc}"[:300])


def _parse_dump(obj: Mapping[str, Any]) -> FrDump:
    if "error" in obj and "entries" not in obj:
        return FrDump(version=None, entries=(), error=str(obj["error"])[:500])
    pg_config = obj.get("pg_config")
    pg_ranks = {
        str(key): _ranks_list(cfg.get("ranks"))
        for key, cfg in (pg_config.items() if isinstance(pg_config, Mapping) else ())
        if isinstance(cfg, Mapping)
    }
    raw_entries = obj.get("entries") or ()
    if not isinstance(raw_entries, (list, tuple)):
        raise ParseError("malformed Flight Recorder dump: 'entries' is not a list")
    entries = []
    for raw in raw_entries:
        if not isinstance(raw, Mapping):
            continue
        group = raw.get("process_group") or (str(raw.get("pg_id", "")), "")
        if isinstance(group, str) or not isinstance(group, (list, tuple)) or not group:
            group = (str(group), "")
        pg_name, pg_desc = (str(group[0]), str(group[1]) if len(group) > 1 else "")
        is_p2p = bool(raw.get("is_p2p"))
        seq = raw.get("p2p_seq_id") if is_p2p else raw.get("collective_seq_id")
        raw_frames = raw.get("frames") or ()
        frames = tuple(
            f"{f.get('name')} at {f.get('filename')}:{f.get('line')}"
            for f in (raw_frames if isinstance(raw_frames, (list, tuple)) else ())
            if isinstance(f, Mapping)
        )
        state = raw.get("state")
        entries.append(
            FrEntry(
                pg=pg_name,
                pg_desc=pg_desc,
                seq=int(seq or 0),
                is_p2p=is_p2p,
                op=str(raw.get("profiling_name") or "?"),
                input_sizes=json.dumps(raw.get("input_sizes"), default=str),
                input_dtypes=json.dumps(raw.get("input_dtypes"), default=str),
                output_sizes=json.dumps(raw.get("output_sizes"), default=str),
                state=state if isinstance(state, str) or state is None else str(state),
                frames=frames,
            )
        )
    return FrDump(version=str(obj.get("version")), entries=tuple(entries), pg_ranks=pg_ranks)


def _minority(by_rank: Mapping[int, str]) -> tuple[int, ...]:
    """Ranks outside the most common value; on a tie, every rank that differs from the rest."""
    counts = Counter(by_rank.values())
    if len(counts) < 2:
        return ()
    top = counts.most_common()
    if top[0][1] == top[1][1]:
        # No majority: name the ranks holding the least common values, deterministically.
        least = min(counts.values())
        return tuple(sorted(r for r, v in by_rank.items() if counts[v] == least))
    return tuple(sorted(r for r, v in by_rank.items() if v != top[0][0]))


def first_disagreement(dumps: Mapping[int, FrDump]) -> list[FrDisagreement]:
    """Per process group, the first collective sequence number where the ranks disagree."""
    per_pg: dict[str, dict[int, dict[int, FrEntry]]] = {}
    for rank, dump in dumps.items():
        for entry in dump.entries:
            if entry.is_p2p:
                continue  # p2p sequence numbers are per pair, not comparable across a group
            per_pg.setdefault(entry.pg, {}).setdefault(rank, {})[entry.seq] = entry
    findings = []
    for pg in sorted(per_pg):
        by_rank_entries = per_pg[pg]
        ranks = sorted(by_rank_entries)
        # The ring buffer may have dropped old entries: compare over the common window only.
        low = max(min(seqs) for seqs in by_rank_entries.values())
        # Only the numbers some rank holds: a claimed seq of 10**30 must not mean 10**30 steps.
        held = sorted({seq for seqs in by_rank_entries.values() for seq in seqs if seq >= low})
        for seq in held:
            present = {r: by_rank_entries[r].get(seq) for r in ranks}
            reached = {r: e for r, e in present.items() if e is not None}
            frames = {r: e.frames[:6] for r, e in reached.items()}
            for kind, key in (("op", "op"), ("sizes", "input_sizes"), ("dtypes", "input_dtypes")):
                values = {r: getattr(e, key) for r, e in reached.items()}
                if len(set(values.values())) > 1:
                    findings.append(
                        FrDisagreement(pg, seq, kind, values, _minority(values), frames)
                    )
                    break
            else:
                if len(reached) < len(ranks):
                    by_rank = {r: (e.op if e else "-") for r, e in present.items()}
                    missing = tuple(sorted(r for r, e in present.items() if e is None))
                    findings.append(FrDisagreement(pg, seq, "not_reached", by_rank, missing, frames))
                else:
                    continue
            break
    return findings


def _rank_number(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return decimal_int(str(value), 9)


def _user_site(frames: tuple[str, ...]) -> str | None:
    """The innermost frame outside torch and the standard library, as ``file:line``."""
    for text in frames:
        _, _, location = text.partition(" at ")
        if location and is_user_file(location.rpartition(":")[0]):
            return location
    return None


def flight_verdicts(section: Mapping[str, Any] | None) -> list[Verdict]:
    """Verdicts from the snapshot's ``flight_recorder`` section (dumps keyed by global rank)."""
    if not section:
        return []
    dumps: dict[int, FrDump] = {}
    errors = section.get("errors") or ()
    problems: list[str] = [str(e) for e in (errors if isinstance(errors, list) else ())]
    raw_dumps = section.get("dumps")
    for rank_text, raw in (raw_dumps.items() if isinstance(raw_dumps, Mapping) else ()):
        rank = _rank_number(rank_text)
        if rank is None:
            problems.append(f"a dump under {str(rank_text)[:40]!r}, not a rank number")
            continue
        try:
            dump = parse_flight_recorder_dump(raw)
        except ParseError as exc:
            problems.append(f"rank {rank}: {exc.message}")
            continue
        if dump.error:
            problems.append(f"rank {rank}: {dump.error}")
            continue
        dumps[rank] = dump
    missing_raw = section.get("missing_ranks") or ()
    missing = [
        r for r in map(_rank_number, missing_raw if isinstance(missing_raw, list) else ())
        if r is not None
    ]
    verdicts = []
    for finding in first_disagreement(dumps):
        groups: dict[str, list[int]] = {}
        for rank, value in finding.by_rank.items():
            groups.setdefault(value, []).append(rank)
        described = "; ".join(
            f"ranks {format_int_ranges(ranks)}: {value}" for value, ranks in sorted(groups.items())
        )
        sites = sorted(
            {s for r in finding.culprit_ranks if (s := _user_site(finding.frames.get(r, ())))}
        )
        what = {
            "op": "call different collectives",
            "sizes": "pass different tensor sizes",
            "dtypes": "pass different dtypes",
            "not_reached": "have not all reached it",
        }[finding.kind]
        evidence = [described]
        if missing:
            evidence.append(
                f"no Flight Recorder dump from ranks {format_int_ranges(missing)}: lower confidence"
            )
        evidence.extend(problems[:5])
        verdicts.append(
            Verdict(
                kind=VerdictKind.FLIGHT_RECORDER_MISMATCH if finding.kind != "not_reached"
                else VerdictKind.FLIGHT_RECORDER_NOT_REACHED,
                severity="critical" if finding.kind != "not_reached" else "warning",
                summary=(
                    f"Flight Recorder: at collective #{finding.seq} of process group "
                    f"{finding.pg or '0'} the ranks {what} "
                    f"(ranks {format_int_ranges(finding.culprit_ranks)} differ)"
                ),
                culprit_ranks=finding.culprit_ranks,
                sites=tuple(sites),
                evidence=tuple(evidence),
                next_step=(
                    "make every rank issue the same collectives in the same order with the same "
                    "shapes; look at the culprit ranks' call site for a rank-dependent branch"
                ),
            )
        )
    return verdicts
