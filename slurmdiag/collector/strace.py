"""strace -c: tracing the ranks' system calls for a window, alongside the later stack rounds."""

import _signal
import posix as os
import time

from .procfs import read_stat, task_statuses
from .tools import Task, Tool, _one_line, pump_until


def trace_syscalls(strace, pid, window_s, clock, at_end=None):
    """Task: ``strace -c -f -p PID`` for ``window_s`` seconds, then SIGINT; the raw -c table.
    ``at_end(pid)``: called at the window's end, before strace lets go (which wakes every
    thread)."""
    stat = read_stat(pid)
    if stat is None:
        return {"status": "error", "message": "process exited", "window_s": 0.0, "text": ""}
    if stat["state"] in ("T", "t", "Z", "X"):
        # Attaching to a stopped process must not resume it, and it makes no syscalls anyway.
        return {
            "status": "skipped",
            "window_s": 0.0,
            "text": "",
            "message": "process is in state {}; not attached".format(stat["state"]),
        }
    try:
        # The kill timeout is a backstop: the task wakes at the end of the window first.
        tool = Tool([strace, "-c", "-f", "-p", str(pid)], window_s + 5.0, merge_stderr=True)
    except OSError as exc:
        return {
            "status": "error",
            "message": f"could not start strace: {exc}",
            "window_s": 0.0,
            "text": "",
        }
    begun = time.monotonic()
    tool.wake_at = begun + window_s
    yield tool
    if not tool.done:
        tool.wake_at = None
        if at_end is not None:
            at_end(pid)
        try:
            os.kill(tool.pid, _signal.SIGINT)  # strace prints the -c table when interrupted
        except OSError:
            pass
        tool.set_timeout(min(3.0, max(clock.left(), 0.5)))
        yield tool
    rc, out, _, note = tool.result()
    window = round(time.monotonic() - begun, 3)
    ok = "% time" in out or ("attached" in out and "detached" in out)
    if ok and not note:
        return {"status": "ok", "message": None, "window_s": window, "text": out}
    message = note or _one_line(out) or f"strace exit code {rc}"
    return {"status": "error", "message": message, "window_s": window, "text": out}


def _untraced_stat(pid, tries=20):
    """``read_stat`` of a process our own strace is attached to, past its syscall stops.

    strace stops the tracee at every syscall entry and exit (state ``t``, tracing stop); read
    at such an instant, a rank blocked in ``read`` or busy in a loop of calls would be shown as
    stopped. A state ``t`` that persists over ~20 ms is reported as it is.
    """
    stat = read_stat(pid)
    while stat is not None and stat["state"] == "t" and tries > 0:
        time.sleep(0.001)
        tries -= 1
        stat = read_stat(pid)
    return stat


def start_strace(ranks, strace, strace_s, clock, errors, at_end=None):
    """Start ``strace -c`` on every rank for ``strace_s`` s (shortened to fit the deadline) as
    background tasks; (ranks, tasks or None, message) for finish_strace. ``at_end``: see
    trace_syscalls."""
    window = strace_s
    left = clock.left() - 0.6  # attach, SIGINT, table
    message = None
    if not strace:
        window, message = 0.0, "strace not found"
    elif left < min(0.5, strace_s):
        window, message = 0.0, "skipped: deadline too close"
    elif round(left, 2) < strace_s:  # (a window cut by less than 5 ms is not shortened)
        window = round(left, 2)
        message = f"window shortened from {strace_s:.2f} s to {window:.2f} s: deadline"
    if message:
        errors.append("strace " + message)
    if window <= 0:
        return list(ranks), None, message
    return list(ranks), [Task(trace_syscalls(strace, e["pid"], window, clock, at_end))
                         for e in ranks], message


def _traced(pid):
    """Has every thread of ``pid`` a tracer (TracerPid) that let it go on (not in a tracing
    stop), or is the process gone?"""
    statuses = task_statuses(pid)
    if statuses is None:
        return True
    return not any("TracerPid:\t0\n" in status or "(tracing stop)" in status
                   for _, status in statuses)


def wait_attached(ranks, tasks, until):
    """Until strace holds every thread of ``ranks`` (or time ``until``): attaching wakes each
    thread once, and a rank whose threads then stay asleep keeps its first sample later on
    (see unchanged_sample) only if that sample was read after the attach. A rank whose strace
    ended (skipped, refused) is not waited for."""
    pending = list(zip(ranks, tasks))
    while pending and time.monotonic() < until:
        pending = [(e, t) for e, t in pending if not t.done and not _traced(e["pid"])]
        if pending:
            pump_until(lambda: False, min(until, time.monotonic() + 0.005))


def _finished(result):
    """A task that is done at once with ``result``."""
    return result
    yield  # a generator: Task runs it


def join_tracing(first, then):
    """Two start_strace results as one (mp.spawn's ranks, found after strace started); the
    message becomes one a rank, each rank's own."""
    tasks = []  # type: list
    messages = []  # type: list
    for ranks, started, message in (first, then):
        skipped = {"status": "skipped", "message": message, "window_s": 0.0, "text": ""}
        tasks += started if started is not None else [Task(_finished(skipped)) for _ in ranks]
        messages += message if isinstance(message, list) else [message] * len(ranks)
    return first[0] + then[0], tasks, messages


def finish_strace(ranks, tasks, message):
    """Wait for start_strace's tasks; each rank's ``strace`` result. ``message``: what to say
    of every rank's window, or a list of one a rank (join_tracing)."""
    messages = message if isinstance(message, list) else [message] * len(ranks)
    if tasks is None:
        for entry, said in zip(ranks, messages):
            entry["strace"] = {"status": "skipped", "message": said, "window_s": 0.0, "text": ""}
        return
    pump_until(lambda: all(task.done for task in tasks))
    for entry, task, said in zip(ranks, tasks, messages):
        result = task.result
        if isinstance(result, Exception) or result is None:
            result = {
                "status": "error",
                "message": f"collector bug: {result!r}",
                "window_s": 0.0,
                "text": "",
            }
        if said and result["status"] == "ok":
            result["message"] = said
        entry["strace"] = result
