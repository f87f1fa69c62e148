"""Lines of the job's own source, read on the node for one question each; only the place
("path:line") leaves the node, never the text.

A thread's target passed as its call, ``threading.Thread(target=server.serve_forever())``, runs
the target on the calling thread before any thread exists (for ever, for a server's loop) and
would hand the Thread its return value: the stacks show the main thread in the function, as
they show a service serving on its main thread by design; the line tells the two apart.
"""

import posix as os

from .stacks import _bare

#: A source file larger than this is not read.
MAX_SOURCE_BYTES = 1 << 20
_S_IFMT, _S_IFREG = 0o170000, 0o100000
_NAME = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_OPEN, _CLOSE = "([{", ")]}"


def _skip_spaces(text, at):
    while at < len(text) and text[at] in " \t":
        at += 1
    return at


def _call_ends(text, at):
    """The index after the bracket closing the one at ``at`` (quotes skipped), or None when the
    line ends first."""
    depth, quote, i = 0, None, at
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1  # the escaped character
            elif c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def passes_call_as_target(text, callee):
    """Whether a line of source passes a call of ``callee`` as a keyword ``target``, the whole
    value: ``target=loop()``, ``target = self.server.serve_forever(poll_interval=1)``, not
    ``target=loop``, ``target=make_server().serve_forever`` (a call's result's method, passed)
    nor ``target == loop()``. A line with no quote loses its ``# comment`` first."""
    code = text.split("#", 1)[0] if "'" not in text and '"' not in text else text
    start = 0
    while True:
        at = code.find("target", start)
        if at < 0:
            return False
        start = at + 6
        if at > 0 and code[at - 1] in _NAME or start < len(code) and code[start] in _NAME:
            continue
        eq = _skip_spaces(code, start)
        if code[eq:eq + 1] != "=" or code[eq + 1:eq + 2] == "=":
            continue
        name_at = _skip_spaces(code, eq + 1)
        end = name_at
        while end < len(code) and (code[end] in _NAME or code[end] == "."):
            end += 1
        name = code[name_at:end]
        paren = _skip_spaces(code, end)
        if not name or _bare(name) != callee or code[paren:paren + 1] != "(":
            continue
        closed = _call_ends(code, paren)
        after = _skip_spaces(code, closed) if closed is not None else len(code)
        if after >= len(code) or code[after] in ",)":
            return True


def _source_lines(pid, path, cache):
    """The lines of ``path`` as process ``pid`` sees it (its root, its working directory for a
    relative path), one read per file (by device and inode); None when it is not a regular
    file of at most MAX_SOURCE_BYTES."""
    where = f"/proc/{pid}/root{path}" if path.startswith("/") else f"/proc/{pid}/cwd/{path}"
    try:
        info = os.stat(where)
    except OSError:
        return None
    key = (info.st_dev, info.st_ino)
    if key in cache:
        return cache[key]
    lines = None
    if info.st_mode & _S_IFMT == _S_IFREG and info.st_size <= MAX_SOURCE_BYTES:
        try:
            fd = os.open(where, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            fd = None
        if fd is not None:
            try:
                data = os.read(fd, MAX_SOURCE_BYTES + 1)
                lines = data.decode("utf-8", "replace").splitlines()
            except OSError:
                lines = None
            finally:
                os.close(fd)
    cache[key] = lines
    return lines


def called_target(pid, threads, cache):
    """"path:line" of the frame of ``pid``'s main thread (in ``threads``, py-spy's, innermost
    frame first) whose line passes a call of the function just inside it as a thread's or a
    process' target: the call runs there, on the main thread; None when no frame does.
    A main thread in a torch.distributed call is not looked at (a waiting rank: most ranks of
    a hang; no file read). What makes it lie: a target factory, ``target=make_worker(cfg)``
    returning the function, while the main thread is still inside the factory: it is said of
    the factory too."""
    main = next((t for t in threads if t.get("os_thread_id") == pid), None)
    frames = (main or {}).get("frames") or ()
    if any("/torch/distributed/" in (f.get("filename") or "") for f in frames):
        return None  # in a collective: whatever called it, it runs where it should
    for i in range(1, len(frames)):  # no itertools.pairwise: the node's Python may be older
        inner, frame = frames[i - 1], frames[i]
        path, line = frame.get("filename"), frame.get("line")
        if frame.get("module") or inner.get("module") or not path or not line or line < 1:
            continue  # a native frame (--native) calls no Python function by name
        if _library(path):
            continue
        lines = _source_lines(pid, path, cache)
        if lines is not None and line <= len(lines) \
                and passes_call_as_target(lines[line - 1], _bare(inner.get("name"))):
            return f"{path}:{line}"
    return None


def _library(path):
    """A file of Python's own library or of an installed package, or no file (``<string>``):
    not read (the mistake is the job's; a job installed as a package is not looked at)."""
    return path.startswith("<") or "/site-packages/" in path or "/dist-packages/" in path \
        or "/lib/python3" in path
