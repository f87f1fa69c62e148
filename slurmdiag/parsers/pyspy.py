"""Parsers for py-spy dumps: ``py-spy dump --json`` and the human text form.

Stacks are returned innermost frame first, as py-spy prints them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from slurmdiag.errors import ParseError
from slurmdiag.snapshot import Frame, ThreadStack

__all__ = ["ProcessDump", "parse_pyspy_json", "parse_pyspy_text"]


@dataclass(frozen=True)
class ProcessDump:
    """One process of a text dump; pid and command are None when the paste dropped the header."""

    pid: int | None
    command: str | None
    threads: tuple[ThreadStack, ...] = ()


_PYTHON_SUFFIXES = (".py", ".pyw", ".pyx", ".pyi")


def _is_native(name: str, filename: str, line: int | None) -> bool:
    """True for frames of shared libraries: an address as name, or no line outside a .py file."""
    if name.startswith("0x"):
        return True
    if line:
        return False
    # "<frozen importlib._bootstrap>" and friends are Python frames without a real file.
    return not filename.endswith(_PYTHON_SUFFIXES) and not filename.startswith("<")


# ---------------------------------------------------------------------------------------------
# JSON


def parse_pyspy_json(text_or_obj: str | bytes | list[Any]) -> tuple[ThreadStack, ...]:
    """Parse ``py-spy dump --json`` output (or its already-loaded list, or a slimmed copy).

    A truncated JSON array yields the thread objects that were complete.
    """
    data: Any = text_or_obj
    if isinstance(data, bytes):
        data = data.decode("utf-8", errors="replace")
    if isinstance(data, str):
        if not data.strip():
            return ()
        try:
            data = json.loads(data)
        except json.JSONDecodeError as exc:
            data = _complete_thread_objects(data)
            if data is None:
                raise ParseError(f"py-spy JSON is not valid JSON: {exc}") from None
    if isinstance(data, dict) and "frames" in data:
        data = [data]
    if not isinstance(data, list):
        raise ParseError(f"py-spy JSON must be a list of threads, got {type(data).__name__}")
    threads = []
    for item in data:
        if not isinstance(item, dict) or "frames" not in item:
            raise ParseError("py-spy JSON item is not a thread object (no 'frames' key)")
        threads.append(_thread_from_json(item))
    return tuple(threads)


def _complete_thread_objects(text: str) -> list[Any] | None:
    """Decode the complete objects of a truncated ``[{...}, {...}, {..`` array, else None."""
    start = text.find("[")
    if start < 0 or text[:start].strip():
        return None
    decoder = json.JSONDecoder()
    items: list[Any] = []
    pos = start + 1
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            break
        try:
            item, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            break
        items.append(item)
    return items if items else None


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    try:
        return int(str(value), 0)
    except ValueError:
        return None


def _thread_from_json(item: dict[str, Any]) -> ThreadStack:
    frames = []
    for raw in item.get("frames") or ():
        if not isinstance(raw, dict):
            continue
        name = str(raw.get("name") or "?")
        filename = str(raw.get("filename") or raw.get("short_filename") or "")
        line = _int_or_none(raw.get("line")) or None  # py-spy writes 0 for "no line"
        module = raw.get("module")
        frames.append(
            Frame(
                function=name,
                file=filename,
                line=line,
                module=str(module) if module else None,
                native=_is_native(name, filename, line),
            )
        )
    thread_id = _int_or_none(item.get("thread_id"))
    os_thread_id = _int_or_none(item.get("os_thread_id"))
    thread_name = item.get("thread_name")
    return ThreadStack(
        name=str(thread_name) if thread_name is not None else None,
        thread_id=thread_id if thread_id is not None else (os_thread_id or 0),
        os_thread_id=os_thread_id,
        active=bool(item.get("active")),
        owns_gil=bool(item.get("owns_gil")),
        frames=tuple(frames),
    )


# ---------------------------------------------------------------------------------------------
# Text

_PROCESS_RE = re.compile(r"^Process (\d+): ?(.*)$")
_PYTHON_VERSION_RE = re.compile(r"^Python v\d")
# py-spy prints the OS thread id in decimal when it knows it, else the Python thread id in hex.
_THREAD_RE = re.compile(
    r"^\s*Thread (?P<id>0[xX][0-9A-Fa-f]+|\d+) \((?P<status>active\+gil|active|idle|gil)\)"
    r'(?::\s*"(?P<name>.*)")?\s*$'
)
_FRAME_RE = re.compile(
    r"^(?P<indent>\s*)(?P<name>\S.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)\s*$"
)
_BARE_NATIVE_RE = re.compile(r"^(?P<indent>\s+)(?P<name>0x[0-9A-Fa-f]+)\s*$")


class _TextDumpBuilder:
    """Collects threads of the text form; merged headers share the stack that follows them."""

    def __init__(self) -> None:
        self.dumps: list[ProcessDump] = []
        self.pid: int | None = None
        self.command: str | None = None
        self.threads: list[ThreadStack] = []
        self.headers: list[ThreadStack] = []
        self.frames: list[Frame] = []
        self.frame_indent: int | None = None
        self.seen_anything = False

    def flush_stack(self) -> None:
        for header in self.headers:
            self.threads.append(
                ThreadStack(
                    name=header.name,
                    thread_id=header.thread_id,
                    os_thread_id=header.os_thread_id,
                    active=header.active,
                    owns_gil=header.owns_gil,
                    frames=tuple(self.frames),
                )
            )
        self.headers = []
        self.frames = []
        self.frame_indent = None

    def flush_process(self) -> None:
        self.flush_stack()
        if self.threads or self.pid is not None:
            self.dumps.append(ProcessDump(self.pid, self.command, tuple(self.threads)))
        self.pid = None
        self.command = None
        self.threads = []


def parse_pyspy_text(text: str) -> list[ProcessDump]:
    """Parse human ``py-spy dump`` output, including hand-pasted, merged or annotated copies.

    Several ``Thread ...`` header lines directly followed by one stack (an aggregation some
    people do by hand) give one ThreadStack per header, all with that stack. Prose lines
    between stacks are skipped. Input without any py-spy header raises ParseError (a gdb
    backtrace, for instance); empty input gives an empty list.
    """
    builder = _TextDumpBuilder()
    for raw_line in text.splitlines():
        line = raw_line.rstrip()
        if not line.strip():
            # A blank line ends a stack, but merged headers may still wait for theirs.
            if builder.frames:
                builder.flush_stack()
            continue
        process = _PROCESS_RE.match(line)
        if process:
            builder.flush_process()
            builder.pid = int(process.group(1))
            builder.command = process.group(2).strip() or None
            builder.seen_anything = True
            continue
        if _PYTHON_VERSION_RE.match(line):
            builder.seen_anything = True
            continue
        header = _THREAD_RE.match(line)
        if header:
            if builder.frames:
                builder.flush_stack()
            builder.headers.append(_thread_header(header))
            builder.seen_anything = True
            continue
        if builder.headers:
            frame = _frame_from_text(line, builder)
            if frame is not None:
                builder.frames.append(frame)
                continue
            if line[0].isspace():
                continue  # locals ("Arguments:", "self: <...>") or other indented detail
        # Unindented prose between stacks ends the current stack.
        if builder.frames:
            builder.flush_stack()
    builder.flush_process()
    if not builder.seen_anything and text.strip():
        raise ParseError("not a py-spy dump: no 'Process N:' or 'Thread ... (state)' line found")
    return builder.dumps


def _thread_header(match: re.Match[str]) -> ThreadStack:
    raw_id = match.group("id")
    status = match.group("status")
    if raw_id.lower().startswith("0x"):
        thread_id, os_thread_id = int(raw_id, 16), None
    else:
        thread_id = os_thread_id = int(raw_id)
    return ThreadStack(
        name=match.group("name"),
        thread_id=thread_id,
        os_thread_id=os_thread_id,
        active=status.startswith("active"),
        owns_gil="gil" in status,
    )


def _frame_from_text(line: str, builder: _TextDumpBuilder) -> Frame | None:
    match = _FRAME_RE.match(line) or _BARE_NATIVE_RE.match(line)
    if match is None:
        return None
    indent = len(match.group("indent").expandtabs())
    if indent == 0 and not match.groupdict().get("line"):
        return None  # unindented "word (word)" is prose; a pasted frame keeps its ":line"
    if builder.frame_indent is None:
        builder.frame_indent = indent
    elif indent > builder.frame_indent:
        return None  # a local variable whose repr happens to end in "(...)"
    groups = match.groupdict()
    name = groups["name"]
    filename = groups.get("file") or ""
    line_no = int(groups["line"]) if groups.get("line") else None
    return Frame(
        function=name,
        file=filename,
        line=line_no,
        native=_is_native(name, filename, line_no),
    )
