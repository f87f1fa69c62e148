"""Python tracebacks and srun task exits in a job's log: how a rank that is gone went away.

A rank that died leaves no process to sample; its last words are in the job's output. srun
reports which task exited (``srun: error: node002: task 3: Exited with exit code 1``) and the
rank's traceback says where. Launcher prefixes (``3: `` from ``srun --label``, ``[rank3]:`` from
torchrun) are honoured; unprefixed tracebacks of several ranks may interleave, so a traceback is
attributed to a rank only through its prefix, and the caller decides what a lone one means.
"""

from __future__ import annotations

import re
from dataclasses import replace

from slurmdiag.safeio import decimal_int
from slurmdiag.snapshot import LogFinding

_PREFIX = re.compile(r"^(?:\[rank(?P<rank>\d+)\]:|(?P<label>\d+): )?(?P<rest>.*)$")
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$')
_EXCEPTION = re.compile(r"^(?P<name>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Fault)\b|[A-Za-z_][\w.]*Error)(?::\s?(?P<message>.*))?$")
_TASK_EXIT = re.compile(
    r"srun: error: (?P<node>\S+): tasks? (?P<tasks>[\d,\-]+): (?P<what>.+)$"
)
MAX_FRAMES = 64


def _expand(tasks: str) -> list[int]:
    out: list[int] = []
    for part in tasks.split(","):
        if "-" in part:
            low, _, high = part.partition("-")
            first, last = decimal_int(low), decimal_int(high)
            if first is not None and last is not None and last - first < 100000:
                out.extend(range(first, last + 1))
        elif (number := decimal_int(part)) is not None:
            out.append(number)
    return out


def parse_srun_task_exits(text: str, source: str) -> tuple[LogFinding, ...]:
    """``srun: error: NODE: task N: Exited with exit code X`` (also Killed, signals)."""
    findings = []
    for number, line in enumerate(text.splitlines(), start=1):
        if "srun: error:" not in line:
            continue
        match = _TASK_EXIT.search(line)
        if not match or "Terminated" in match.group("what"):
            continue  # Terminated = ended by srun itself after another task failed
        for task in _expand(match.group("tasks")):
            findings.append(
                LogFinding(
                    source=source,
                    line_no=number,
                    kind="task_exit",
                    text=line.strip()[:500],
                    rank=task,
                    host=match.group("node"),
                    fields={"exit": match.group("what").strip()[:200]},
                )
            )
    return tuple(findings)


def parse_python_tracebacks(text: str, source: str) -> tuple[LogFinding, ...]:
    """Each ``Traceback (most recent call last):`` block, its frames and its exception line."""
    findings = []
    ends: list[int] = []  # each finding's count of non-blank lines up to its exception line
    open_blocks: dict[str, dict] = {}  # by prefix key: blocks of different ranks interleave
    written = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        written += bool(raw.strip())
        match = _PREFIX.match(raw)
        assert match is not None  # the pattern accepts any line
        rank_text = match.group("rank") or match.group("label")
        key = rank_text or ""
        line = match.group("rest")
        if line.startswith("Traceback (most recent call last):"):
            open_blocks[key] = {"start": number, "frames": [], "rank": rank_text}
            continue
        block = open_blocks.get(key)
        if block is None:
            continue
        frame = _FRAME.match(line)
        if frame:
            if len(block["frames"]) < MAX_FRAMES:
                block["frames"].append(
                    (frame.group("file"), frame.group("line"), frame.group("func").strip())
                )
            continue
        if line.startswith((" ", "\t")) or not line.strip():
            continue  # source lines, carets, chained-exception blank lines
        exception = _EXCEPTION.match(line.strip())
        if exception is None:
            continue
        del open_blocks[key]
        if not block["frames"]:
            continue
        file, line_no, func = block["frames"][-1]
        findings.append(
            LogFinding(
                source=source,
                line_no=block["start"],
                kind="traceback",
                text=line.strip()[:500],
                rank=int(block["rank"]) if block["rank"] is not None else None,
                fields={
                    "exception": exception.group("name"),
                    "site": f"{file}:{line_no}",
                    "function": func,
                    # innermost last, as Python prints them
                    "frames": "\n".join(f"{f}:{n}:{fn}" for f, n, fn in block["frames"]),
                },
            )
        )
        ends.append(written)
    # how much the job wrote after each one (non-blank lines to the end of what was read: a
    # log's head and tail): an error followed by the job's going on is not where it stopped
    return tuple(replace(f, fields={**f.fields, "lines_after": str(written - end)})
                 for f, end in zip(findings, ends, strict=True))
