"""py-spy's human text dumps (``py-spy dump``), read for tests and benchmarks.

The collector ships ``py-spy dump --json`` (slurmdiag/parsers/pyspy.py reads it); the public hang
dumps of the field (tests/fixtures/py_spy/bigscience_*, pasted into issues) exist only in this
text form, so tests and bench/bench_analysis.py read them with this parser to feed the analysis
real stacks. It is not part of the wheel: nothing in slurmdiag calls it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from slurmdiag.errors import ParseError
from slurmdiag.parsers.pyspy import is_native_frame
from slurmdiag.snapshot import Frame, ThreadStack

__all__ = ["ProcessDump", "parse_pyspy_text"]


@dataclass(frozen=True)
class ProcessDump:
    """One process of a text dump; pid and command are None when the paste dropped the header."""

    pid: int | None
    command: str | None
    threads: tuple[ThreadStack, ...] = ()


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
        native=is_native_frame(name, filename, line_no),
    )
