"""Parser for the ``strace -c`` / ``strace -c -f`` syscall summary table."""

from __future__ import annotations

import re

from slurmdiag.snapshot import StraceSummary, SyscallCount

__all__ = ["parse_strace_summary"]

_HEADER_RE = re.compile(r"^\s*%\s*time\s+seconds\s+usecs/call\s+calls\s+(?:errors\s+)?syscall")
_NUMBER = r"\d+(?:[.,]\d+)?"
# percent, seconds, usecs/call, calls, [errors], syscall; decimals may use a locale comma.
_ROW_RE = re.compile(
    rf"^\s*(?P<percent>{_NUMBER})\s+(?P<seconds>{_NUMBER})\s+(?P<usecs>\d+)\s+"
    r"(?P<calls>\d+)\s+(?:(?P<errors>\d+)\s+)?(?P<syscall>[A-Za-z_][\w]*)\s*$"
)
_STRACE_NOTE_RE = re.compile(r"strace: (?!Process \d+ (?:attached|detached))(.+)$")
# strace names itself as started: "strace: ..." or "/usr/bin/strace: ..."
_ATTACHED_RE = re.compile(r"^(?:\S*/)?strace: Process \d+ attached", re.MULTILINE)
_DETACHED_RE = re.compile(r"^(?:\S*/)?strace: Process \d+ detached", re.MULTILINE)


def _decimal(text: str) -> float:
    return float(text.replace(",", "."))


def parse_strace_summary(text: str) -> StraceSummary:
    """Parse an ``strace -c`` table; lines that are not table rows are skipped.

    ``status`` is "ok" when the table header was found (even without rows or the ``total``
    line of an interrupted run), else "error" with strace's own complaint when it printed one.
    A later table replaces an earlier one. ``window_s`` is left for the caller, who knows it.
    """
    syscalls: list[SyscallCount] = []
    total_seconds: float | None = None
    header_seen = False
    strace_note: str | None = None
    for line in text.splitlines():
        if _HEADER_RE.match(line):
            header_seen = True
            syscalls = []
            total_seconds = None
            continue
        if not header_seen:
            note = _STRACE_NOTE_RE.search(line)
            if note and strace_note is None:
                strace_note = note.group(1).strip()
            continue
        row = _ROW_RE.match(line)
        if row is None:
            continue  # dashes, "...", "strace: Process N detached", program output
        seconds = _decimal(row.group("seconds"))
        if row.group("syscall") == "total":
            total_seconds = seconds
            continue
        syscalls.append(
            SyscallCount(
                syscall=row.group("syscall"),
                calls=int(row.group("calls")),
                errors=int(row.group("errors") or 0),
                seconds=seconds,
                percent=_decimal(row.group("percent")),
            )
        )
    if not header_seen:
        if strace_note is None and _ATTACHED_RE.search(text) and _DETACHED_RE.search(text):
            # strace -c prints no table at all when no call completed in the window
            return StraceSummary(
                status="ok",
                message="no system call completed in the window: every thread stayed blocked "
                "in the call it was in",
            )
        error = strace_note or "no 'strace -c' summary table in the output"
        return StraceSummary(status="error", message=error)
    return StraceSummary(
        status="ok",
        message=None if total_seconds is not None else "no total row: the table may be cut short",
        syscalls=tuple(syscalls),
        total_seconds=total_seconds,
    )
