"""The one place slurmdiag opens a path a job named, and writes its own output files.

Everything a job controls is hostile input: the file names of its frames, its StdOut/StdErr
paths, files in shared directories. The controller may run as an operator or as root, and its
reports are published to a team, so a job must not make it read (or block on, or exhaust memory
on) anything its own user could not have shown us. The rule (docs/reliability.md):

* a job-named path is opened only when it is outside /proc, /sys and /dev (before and after
  resolving it), with ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO never blocks, a final symlink is
  refused), and only when ``fstat`` of the open descriptor says it is a regular file owned by the
  job's user;
* it is read with a byte bound (and a line bound for source text), never more than a size limit:
  a sparse 1 GiB file costs what the bound costs;
* output files are written through ``mkstemp`` in the target directory + ``fchmod`` + ``fsync`` +
  ``os.replace``: a planted symlink or file is never followed, opened or re-moded.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import re
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

# The kernel's pseudo file systems: a regular-looking file there is the controller's own
# environment, memory or a device; the controller never reads one a job named.
FORBIDDEN_ROOTS = ("/proc", "/sys", "/dev")
_OPEN_FLAGS = (
    os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
)
_CHUNK = 1 << 16


class RefusedPath(OSError):
    """A job-named path the controller will not open, with the reason (a sentence)."""


def job_uid(user: str | int | None) -> int | None:
    """The uid of a job's user (a name, ``name(uid)`` or a number); None when unknown here."""
    if user is None:
        return None
    if isinstance(user, int):
        return user if user >= 0 else None
    text = user.strip()
    if text.endswith(")") and "(" in text:  # scontrol's "alice(1000)"
        inner = decimal_int(text[text.rindex("(") + 1 : -1], 10)
        if inner is not None:
            return inner
        text = text[: text.rindex("(")]
    number = decimal_int(text, 10)
    if number is not None:
        return number
    try:
        return pwd.getpwnam(text).pw_uid
    except (KeyError, ValueError):
        return None


def _under_forbidden_root(path: str) -> bool:
    return any(path == root or path.startswith(root + "/") for root in FORBIDDEN_ROOTS)


def open_job_file(path: str | os.PathLike[str], *, owner_uid: int | None) -> int:
    """Open a job-named file for reading under the rule above; the caller closes the descriptor.

    Raises ``RefusedPath`` (an ``OSError``) with the reason when the rule says no, and the usual
    ``OSError`` when the file cannot be opened at all.
    """
    text = os.fspath(path)
    if not isinstance(text, str) or not text or "\0" in text:
        raise RefusedPath(f"not a usable path: {text!r}")
    if owner_uid is None:
        raise RefusedPath("the job's user is unknown here: no file it names is opened")
    absolute = os.path.abspath(text)
    if _under_forbidden_root(absolute) or _under_forbidden_root(os.path.realpath(absolute)):
        raise RefusedPath(f"{text} is under /proc, /sys or /dev")
    try:
        fd = os.open(absolute, _OPEN_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RefusedPath(f"{text} is a symbolic link") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RefusedPath(f"{text} is not a regular file")
        if info.st_uid != owner_uid:
            raise RefusedPath(f"{text} is not owned by the job's user (uid {owner_uid})")
        # A directory on the way may have been swapped for a link since the check above: the
        # descriptor itself says where it really is.
        with contextlib.suppress(OSError):
            if _under_forbidden_root(os.readlink(f"/proc/self/fd/{fd}")):
                raise RefusedPath(f"{text} resolves under /proc, /sys or /dev")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_at_most(fd: int, limit: int, offset: int | None = None) -> bytes:
    """Read up to ``limit`` bytes (from ``offset``, else the current position)."""
    parts: list[bytes] = []
    left = max(0, limit)
    position = offset
    while left > 0:
        if position is None:
            data = os.read(fd, min(_CHUNK, left))
        else:
            data = os.pread(fd, min(_CHUNK, left), position)
            position += len(data)
        if not data:
            break
        parts.append(data)
        left -= len(data)
    return b"".join(parts)


def read_job_head_and_tail(
    path: str | os.PathLike[str], *, owner_uid: int | None, head: int, tail: int
) -> bytes:
    """The first ``head`` and last ``tail`` bytes of a job-named file (never more in all)."""
    fd = open_job_file(path, owner_uid=owner_uid)
    try:
        size = os.fstat(fd).st_size
        if size <= head + tail:
            return read_at_most(fd, head + tail, 0)
        first = read_at_most(fd, head, 0)
        last = read_at_most(fd, tail, size - tail)
        # Cut the partial first line of the tail so no line is parsed half.
        return first + b"\n" + last.split(b"\n", 1)[-1]
    finally:
        os.close(fd)


def iter_job_lines(
    path: str | os.PathLike[str], *, owner_uid: int | None, max_bytes: int, max_lines: int
) -> Iterator[str]:
    """Lines (decoded, newline removed) of a job-named file, at most ``max_lines`` lines and
    ``max_bytes`` bytes read: the file is opened and checked before the first line is yielded."""
    fd = open_job_file(path, owner_uid=owner_uid)
    return _lines(fd, max_bytes, max_lines)


def _lines(fd: int, max_bytes: int, max_lines: int) -> Iterator[str]:
    try:
        pending = b""
        read = 0
        count = 0
        while read < max_bytes and count < max_lines:
            data = os.read(fd, min(_CHUNK, max_bytes - read))
            if not data:
                break
            read += len(data)
            pending += data
            *complete, pending = pending.split(b"\n")
            for raw in complete:
                count += 1
                yield raw.rstrip(b"\r").decode("utf-8", errors="replace")
                if count >= max_lines:
                    return
        if pending and count < max_lines and read < max_bytes:
            yield pending.rstrip(b"\r").decode("utf-8", errors="replace")
    finally:
        os.close(fd)


# --------------------------------------------------------------------------------------------
# Output files
# --------------------------------------------------------------------------------------------


def atomic_write(path: str | os.PathLike[str], data: str | bytes, mode: int = 0o640) -> Path:
    """Write ``path`` atomically: ``mkstemp`` beside it, ``fchmod``, ``fsync``, ``os.replace``.

    ``mkstemp`` creates a new file with ``O_EXCL`` (never through a planted link or over a
    planted file), the mode is set on the descriptor (never by path) and the rename replaces
    the directory entry, not a file a link points to. On any failure the temporary file is
    removed and the error raised (a full disk leaves the old file as it was).
    """
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(payload)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp_name, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    return target


def open_private_file(path: str | os.PathLike[str], flags: int = os.O_RDWR) -> int:
    """Open (creating with mode 0600) a file of our own, never through a symlink.

    An existing file must be a regular file owned by this user; a link or anyone else's file
    planted there raises ``RefusedPath``.
    """
    target = os.fspath(path)
    base = flags | os.O_NOFOLLOW | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(target, base | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        fd = os.open(target, base | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            raise RefusedPath(f"{target} is not a regular file of this user")
    except BaseException:
        os.close(fd)
        raise
    return fd


# --------------------------------------------------------------------------------------------
# Job-controlled text on a terminal
# --------------------------------------------------------------------------------------------

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def one_line(text: object) -> str:
    """Job-controlled text made inert for a terminal or a log line: control characters (escape
    sequences, newlines, carriage returns, bidi overrides) shown as ``\\xNN``/``\\uNNNN``."""

    def escape(match: re.Match[str]) -> str:
        code = ord(match.group())
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"

    return _CONTROL.sub(escape, str(text))


def decimal_int(text: str | None, max_digits: int = 18) -> int | None:
    """``int(text)`` for plain ASCII digits (at most ``max_digits``), else None — never raises.

    ``str.isdigit()`` admits ``'²'`` and ``int()`` refuses it; ``int()`` also refuses strings of
    more than 4,300 digits. Every count, pid, port or id read from text goes through here.
    """
    if not text or len(text) > max_digits or not (text.isascii() and text.isdigit()):
        return None
    return int(text)
