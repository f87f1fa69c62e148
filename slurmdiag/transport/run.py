"""The only place slurmdiag starts a subprocess.

Every external command gets an argv list (never a shell) and a timeout. The child runs in its own
session so that on timeout the whole process group (srun and anything it started) is ended.
Callers that need to be testable take a ``Runner`` and tests pass a fake one.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int | None  # None when the command could not be started
    stdout: str
    stderr: str
    timed_out: bool = False
    duration_s: float = 0.0
    start_error: str | None = None  # e.g. "No such file or directory: 'scontrol'"
    interrupted: bool = False  # Ctrl-C/SIGTERM reached us: the command was ended early

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


class Runner(Protocol):
    def __call__(
        self,
        argv: Sequence[str],
        timeout: float,
        *,
        env: Mapping[str, str] | None = None,
        input: str | None = None,
    ) -> CommandResult: ...


def _end_group(proc: subprocess.Popen[bytes], grace_s: float = 1.0) -> None:
    """SIGTERM the process group, then SIGKILL what is left after a grace period."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _drain(sel_streams: list, sinks: dict, limit_s: float) -> None:
    """Read what the ended process group left in its pipes, for at most ``limit_s``."""
    end = time.monotonic() + limit_s
    with selectors.DefaultSelector() as sel:
        for stream in sel_streams:
            sel.register(stream, selectors.EVENT_READ, sinks[stream])
        while sel.get_map() and time.monotonic() < end:
            for key, _ in sel.select(timeout=max(0.0, end - time.monotonic())):
                chunk = os.read(key.fd, 65536)
                if chunk:
                    key.data.extend(chunk)
                else:
                    sel.unregister(key.fileobj)


def _fed(proc: subprocess.Popen[bytes], feed: Callable[[], bytes | None]) -> bool:
    """Write what ``feed`` has for the child's stdin, if anything yet, and close it; True then."""
    data = feed()
    if data is None:
        return False
    assert proc.stdin is not None
    try:
        proc.stdin.write(data)
        proc.stdin.close()
    except (BrokenPipeError, ValueError):
        pass
    return True


def run_command(
    argv: Sequence[str],
    timeout: float,
    *,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    on_stdout_line: Callable[[str], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    interrupt_signal: int | None = None,
    interrupt_grace_s: float = 3.0,
    on_started: Callable[[], None] | None = None,
    feed: Callable[[], bytes | None] | None = None,
) -> CommandResult:
    """Run argv to completion or until ``timeout`` seconds, never raising for the child's failures.

    ``on_stdout_line`` is called for each complete stdout line as it arrives (used for progress);
    ``should_stop`` is polled and ends the command early when it returns True (e.g. every node
    has answered and only srun's own shutdown is left). ``on_started`` is called once the
    child runs (not when it could not be started). ``feed`` is polled as output arrives (and
    every 50 ms): the first bytes it returns are written to the child's stdin, which is then
    closed (srun ``--input=all`` passes them to every task: the collectors' go).

    A KeyboardInterrupt (Ctrl-C; the CLI turns SIGTERM into one) while the command runs ends its
    process group like a timeout and returns what came until then with ``interrupted`` set: the
    caller decides what to keep. The child runs in its own session, so nothing else would ever
    stop it. ``interrupt_signal`` is sent first, and the output read for ``interrupt_grace_s``
    more: srun forwards SIGUSR1 to its tasks (the collectors then send their partial documents)
    where SIGTERM would make it kill the step at once.
    """
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE if input is not None or feed is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env) if env is not None else None,
            start_new_session=True,
        )
    except OSError as exc:
        return CommandResult(tuple(argv), None, "", "", False, 0.0, start_error=str(exc))

    if input is not None and proc.stdin is not None:
        try:
            proc.stdin.write(input.encode())
            proc.stdin.close()
        except BrokenPipeError:
            pass
    if on_started is not None:
        on_started()

    out = bytearray()
    err = bytearray()
    pending = bytearray()
    timed_out = False
    interrupted = False
    sel = selectors.DefaultSelector()
    assert proc.stdout is not None and proc.stderr is not None
    sel.register(proc.stdout, selectors.EVENT_READ, out)
    sel.register(proc.stderr, selectors.EVENT_READ, err)
    open_streams = 2
    deadline = start + timeout
    try:
        while open_streams:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            if should_stop is not None and should_stop():
                break
            if feed is not None and _fed(proc, feed):
                feed = None
            for key, _ in sel.select(timeout=min(remaining, 0.2 if feed is None else 0.05)):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    open_streams -= 1
                    continue
                key.data.extend(chunk)
                if key.data is out and on_stdout_line is not None:
                    pending.extend(chunk)
                    while b"\n" in pending:
                        line, _, rest = pending.partition(b"\n")
                        pending[:] = rest
                        on_stdout_line(line.decode(errors="replace"))
    except KeyboardInterrupt:
        interrupted = True
    sel.close()
    if interrupted and interrupt_signal is not None and proc.poll() is None:
        try:
            os.killpg(proc.pid, interrupt_signal)
            _drain(sel_streams=[proc.stdout, proc.stderr], sinks={proc.stdout: out, proc.stderr: err},
                   limit_s=interrupt_grace_s)
        except (ProcessLookupError, KeyboardInterrupt):
            pass  # gone already, or a second Ctrl-C: end it now
    if open_streams or proc.poll() is None:
        if open_streams == 0 and not interrupted:
            # Streams closed but the process lingers: give it the rest of the time budget.
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
        if proc.poll() is None:
            _end_group(proc)
        _drain(sel_streams=[s for s in (proc.stdout, proc.stderr) if not s.closed],
               sinks={proc.stdout: out, proc.stderr: err}, limit_s=2.0 if interrupted else 0.5)
    for stream in (proc.stdout, proc.stderr, proc.stdin):
        if stream is not None and not stream.closed:
            try:
                stream.close()
            except BrokenPipeError:
                pass
    returncode = proc.wait()
    return CommandResult(
        tuple(argv),
        returncode,
        out.decode(errors="replace"),
        err.decode(errors="replace"),
        timed_out,
        time.monotonic() - start,
        interrupted=interrupted,
    )


def spawn_interactive(argv: Sequence[str], env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start a command whose stdin the caller writes while reading its output (srun's stdin is
    broadcast to every task: the probe's peer map). In its own session; end it with end_group."""
    return subprocess.Popen(
        list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=dict(env) if env is not None else None, start_new_session=True,
    )


end_group = _end_group
