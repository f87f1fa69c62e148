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
from slurmdiag.slurm.parse import format_int_ranges
from slurmdiag.snapshot import Verdict


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


def _load(data: str | bytes | Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(data, Mapping):
        return data
    text = data.decode(errors="replace") if isinstance(data, bytes) else data
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        try:
            obj = _tutorial_to_json(text)
        except (ValueError, SyntaxError) as exc:
            raise ParseError(f"not a Flight Recorder dump: {exc}") from None
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
    """One rank's dump (any version 2.5 to current) into aligned-ready entries."""
    obj = _load(data)
    if "error" in obj and "entries" not in obj:
        return FrDump(version=None, entries=(), error=str(obj["error"]))
    pg_ranks = {
        str(key): _ranks_list(cfg.get("ranks"))
        for key, cfg in (obj.get("pg_config") or {}).items()
        if isinstance(cfg, Mapping)
    }
    entries = []
    for raw in obj.get("entries") or ():
        group = raw.get("process_group") or (str(raw.get("pg_id", "")), "")
        pg_name, pg_desc = (str(group[0]), str(group[1]) if len(group) > 1 else "")
        is_p2p = bool(raw.get("is_p2p"))
        seq = raw.get("p2p_seq_id") if is_p2p else raw.get("collective_seq_id")
        frames = tuple(
            f"{f.get('name')} at {f.get('filename')}:{f.get('line')}"
            for f in raw.get("frames") or ()
            if isinstance(f, Mapping)
        )
        entries.append(
            FrEntry(
                pg=pg_name,
                pg_desc=pg_desc,
                seq=int(seq or 0),
                is_p2p=is_p2p,
                op=str(raw.get("profiling_name") or "?"),
                input_sizes=json.dumps(raw.get("input_sizes")),
                input_dtypes=json.dumps(raw.get("input_dtypes")),
                output_sizes=json.dumps(raw.get("output_sizes")),
                state=raw.get("state"),
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
        high = max(max(seqs) for seqs in by_rank_entries.values())
        for seq in range(low, high + 1):
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
    problems: list[str] = list(section.get("errors") or ())
    for rank_text, raw in (section.get("dumps") or {}).items():
        try:
            dump = parse_flight_recorder_dump(raw)
        except ParseError as exc:
            problems.append(f"rank {rank_text}: {exc.message}")
            continue
        if dump.error:
            problems.append(f"rank {rank_text}: {dump.error}")
            continue
        dumps[int(rank_text)] = dump
    missing = [int(r) for r in section.get("missing_ranks") or ()]
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
                kind="flight_recorder_mismatch" if finding.kind != "not_reached"
                else "flight_recorder_not_reached",
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
