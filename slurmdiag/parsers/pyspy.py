"""The parser of py-spy dumps the collector ships: ``py-spy dump --json``.

Stacks are returned innermost frame first, as py-spy prints them. (The human text form, in which
the public dumps of the field come, is read by tests/support/pyspy_text.py for tests and bench.)
"""

from __future__ import annotations

import json
from typing import Any

from slurmdiag.errors import ParseError
from slurmdiag.snapshot import Frame, ThreadStack

__all__ = ["is_native_frame", "parse_pyspy_json"]


_PYTHON_SUFFIXES = (".py", ".pyw", ".pyx", ".pyi")


def is_native_frame(name: str, filename: str, line: int | None) -> bool:
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
                native=is_native_frame(name, filename, line),
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
