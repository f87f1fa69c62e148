"""Running tools: the one-thread event loop, tasks, and the wall-time budget (Clock).

One thread and no subprocess module: tools are started with os.posix_spawn and watched by one
select.poll loop (_pump). Code that waits for tools is written as generators, "tasks", that
yield the Tool they wait for; the loop resumes a task when its tool has ended, or at the tool's
wake_at time. So py-spy runs for several ranks at once, strace for all ranks, and nvidia-smi on
the side, all from the one thread.
"""

import _signal
import posix as os
import select
import time

# Time kept back from the deadline for ending tools, encoding and writing the frames.
FINISH_RESERVE_S = 0.4
MARKER_ENV = "SLURMDIAG_COLLECTOR"
# Our own source, in the step's environment (see the loader): not passed on to the tools.
SOURCE_ENV = b"SLURMDIAG_COLLECTOR_SOURCE"
# Their handlers emit the document and exit (see main).
# SIGUSR1: what an interrupted controller sends through srun, which forwards it to the tasks
# (SIGTERM or SIGHUP would make srun kill the step before the collectors could answer).
HANDLED_SIGNALS = (_signal.SIGALRM, _signal.SIGTERM, _signal.SIGHUP, _signal.SIGUSR1)


class Clock:
    """Wall-time budget: ``left()`` is what remains before the deadline minus the finish reserve."""

    def __init__(self, deadline_s):
        self.started = time.time()
        self.t0 = time.monotonic()
        self.deadline = self.t0 + deadline_s

    def elapsed(self):
        return time.monotonic() - self.t0

    def left(self):
        return self.deadline - FINISH_RESERVE_S - time.monotonic()


#
# One thread and no subprocess module: tools are started with os.posix_spawn and watched by one
# select.poll loop (_pump). Code that waits for tools is written as generators, "tasks", that
# yield the Tool they wait for; the loop resumes a task when its tool has ended, or at the tool's
# wake_at time. So py-spy runs for several ranks at once, strace for all ranks, and nvidia-smi on
# the side, all from the one thread.

# pid -> Tool still running: the deadline alarm and SIGTERM end them (strace!)
_LIVE = {}  # type: dict
# tasks that have not returned yet, foreground and background ones
_TASKS = []  # type: list
# read end of a tool's pipe -> (Tool, list the chunks read go to)
_READERS = {}  # type: dict
_POLL = select.poll()
_ENV = {}  # type: dict[bytes, bytes]
_ENVIRON = {}  # type: dict[str, str]


def _child_env():
    if not _ENV:
        _ENV.update(os.environ)
        _ENV.pop(SOURCE_ENV, None)
        _ENV[b"LC_ALL"] = b"C"  # strace -c prints decimals with the locale's separator
        _ENV[MARKER_ENV.encode()] = b"1"  # our own tools are never mistaken for job processes
    return _ENV


def _environ():
    """Our own environment as text (posix.environ holds bytes)."""
    if not _ENVIRON:
        _ENVIRON.update(
            (k.decode("utf-8", "surrogateescape"), v.decode("utf-8", "surrogateescape"))
            for k, v in os.environ.items()
            if k != SOURCE_ENV
        )
    return _ENVIRON


def _file_type(path):
    """The S_IFMT bits of ``path`` (symlinks followed), None if it cannot be stat'ed."""
    try:
        return os.stat(path).st_mode & 0o170000
    except (OSError, ValueError):
        return None


def _isfile(path):
    return _file_type(path) == 0o100000


def _isdir(path):
    return _file_type(path) == 0o040000


def _basename(path):
    return path.rpartition("/")[2]


def _spawn(argv, out_fd, err_fd):
    """Start ``argv`` with stdin /dev/null, stdout/stderr on the given pipe ends; its pid."""
    actions = [
        (os.POSIX_SPAWN_DUP2, out_fd, 1),  # the targets of dup2 are inheritable, pipes are not
        (os.POSIX_SPAWN_DUP2, err_fd, 2),
        (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
    ]
    # Python ignores SIGPIPE and SIGXFSZ, and exec keeps that: give tools the defaults back (as
    # subprocess does), and SIGINT too, which is what stops strace.
    # Nothing blocked in the tool either (the caller blocks our handled signals meanwhile).
    signals = {  # type: dict
        "setsigdef": (_signal.SIGPIPE, _signal.SIGXFSZ, _signal.SIGINT), "setsigmask": ()}
    env = _child_env()
    try:  # a session of its own: a timeout kills the tool's whole process group
        return os.posix_spawnp(argv[0], argv, env, file_actions=actions, setsid=True, **signals)
    except NotImplementedError:  # glibc < 2.26 has no POSIX_SPAWN_SETSID: a group will do
        return os.posix_spawnp(argv[0], argv, env, file_actions=actions, setpgroup=0, **signals)


class Tool:
    """A started tool: what it wrote so far, when it gets killed, when its task wants to resume."""

    def __init__(self, argv, timeout, merge_stderr=False):
        self.argv = argv
        self.out, self.err = [], []  # type: list, list
        self.rc = self.note = self.wake_at = None
        self.done = self.killed = False
        out_r, out_w = os.pipe()
        err_r, err_w = (out_r, out_w) if merge_stderr else os.pipe()
        readers = {err_r: self.err, out_r: self.out}  # merged: one pipe, into out
        # No handler may run between the spawn and _LIVE: it would not end this tool (strace!).
        mask = _signal.pthread_sigmask(_signal.SIG_BLOCK, HANDLED_SIGNALS)
        try:
            self.pid = _spawn(argv, out_w, err_w)
            _LIVE[self.pid] = self
        except BaseException:
            for fd in readers:
                os.close(fd)
            raise
        finally:
            _signal.pthread_sigmask(_signal.SIG_SETMASK, mask)
            for fd in {out_w, err_w}:
                os.close(fd)
        self.set_timeout(timeout)
        self.open = len(readers)
        for fd, chunks in readers.items():
            _READERS[fd] = (self, chunks)
            _POLL.register(fd, select.POLLIN)

    def set_timeout(self, timeout):
        """Kill the tool's process group if it still runs ``timeout`` s from now."""
        self.timeout = timeout
        self.kill_at = time.monotonic() + max(timeout, 0.01)

    def result(self):
        """(returncode, stdout, stderr, note); the note says why the tool was killed, else None."""
        return self.rc, _text(b"".join(self.out)), _text(b"".join(self.err)), self.note


def _end(tool, rc):
    tool.rc, tool.done = rc, True
    _LIVE.pop(tool.pid, None)
    for fd in [fd for fd, (owner, _) in _READERS.items() if owner is tool]:
        _close_reader(fd)


def _close_reader(fd):
    _POLL.unregister(fd)
    owner = _READERS.pop(fd)[0]
    owner.open -= 1
    if not isinstance(owner, _Input):  # our stdin stays open: no pipe may take fd 0
        os.close(fd)


def _reaped(tool):
    """Take the exit status of a tool whose pipes are closed; False while it still runs."""
    try:
        pid, status = os.waitpid(tool.pid, os.WNOHANG)
    except ChildProcessError:  # reaped elsewhere: what subprocess reports then
        pid, status = tool.pid, 0
    if pid == 0:
        return False
    _end(tool, -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
    return True


def _overdue(tool, now):
    """SIGKILL a late tool's group; one that has not gone 1 s later is left behind."""
    if not tool.killed:
        tool.killed = True
        tool.note = f"timed out after {tool.timeout:.1f} s"
        _kill_group(tool.pid)
        tool.kill_at = now + 1.0
    else:  # stuck in D state: never block the document on it
        tool.note += " and did not exit after SIGKILL"
        del tool.out[:], tool.err[:]
        _end(tool, None)


def _pump(until):
    """One turn of the tool loop: read output, reap and kill tools; wait at most until ``until``."""
    now = time.monotonic()
    wait_until = now + 3600.0 if until is None else until
    for tool in list(_LIVE.values()):
        if tool.open == 0 and _reaped(tool):
            wait_until = now  # a task may go on now
            continue
        if now >= tool.kill_at:
            _overdue(tool, now)
            if tool.done:
                wait_until = now
                continue
        wait_until = min(wait_until, tool.kill_at, tool.wake_at or wait_until)
        if tool.open == 0:  # pipes closed: it is exiting; look again very soon
            wait_until = min(wait_until, now + 0.001)
    for fd, _ in _POLL.poll(max(0.0, (wait_until - now) * 1000.0)):
        data = os.read(fd, 65536)
        if data:
            _READERS[fd][1].append(data)
        else:
            _close_reader(fd)


class Task:
    """A generator run by the tool loop. It yields the Tool it waits for; what it returns (or
    raises) becomes ``result``. Tasks never call pump_until themselves."""

    def __init__(self, gen):
        self.gen, self.tool, self.done, self.result = gen, None, False, None
        _TASKS.append(self)
        self.step()

    def ready(self, now):
        tool = self.tool
        return tool is None or tool.done or (tool.wake_at is not None and now >= tool.wake_at)

    def step(self):
        try:
            self.tool = self.gen.send(None)
        except StopIteration as stop:
            self.done, self.result = True, stop.value
        except Exception as exc:  # noqa: BLE001 - a bug for one process must not lose the others
            self.done, self.result = True, exc
        if self.done:
            _TASKS.remove(self)


def pump_until(condition, until=None):
    """Run the tool loop, and every task, until ``condition()`` holds or time ``until`` comes."""
    while True:
        now = time.monotonic()
        for task in _TASKS.copy():  # a task that returns leaves _TASKS
            if task.ready(now):
                task.step()
        if condition() or (until is not None and now >= until) or not (_LIVE or until):
            return
        _pump(until)


class _Input:
    """The controller's side of our stdin, read by the tool loop like a tool's pipe."""

    def __init__(self):
        self.open = 1
        self.chunks = []  # type: list


def wait_for_go(until, fd=0):
    """Wait until the controller writes a line on ``fd`` (our stdin), it closes it, or ``until``.

    The tool loop runs meanwhile (the side task's nvidia-smi, ...). Returns "go", "closed"
    (end of input: a transport that sends nothing) or "timeout"; "unreadable" when ``fd`` cannot
    be watched. Used to start every node's look at one moment (see sample_stacks)."""
    watched = _Input()
    try:
        _POLL.register(fd, select.POLLIN)
    except (OSError, ValueError):
        return "unreadable"
    _READERS[fd] = (watched, watched.chunks)
    try:
        pump_until(lambda: b"\n" in b"".join(watched.chunks) or not watched.open, until)
    finally:
        if fd in _READERS:
            _POLL.unregister(fd)
            _READERS.pop(fd)
    if b"\n" in b"".join(watched.chunks):
        return "go"
    return "closed" if not watched.open else "timeout"


def tool_run(argv, timeout, merge_stderr=False):
    """Task step: ``rc, out, err, note = yield from tool_run(...)``, killed after ``timeout``."""
    try:
        tool = Tool(argv, timeout, merge_stderr)
    except OSError as exc:
        return None, "", "", f"could not start {argv[0]}: {exc.strerror or exc}"
    yield tool
    return tool.result()


def run_tasks(gens, concurrency, meanwhile=None):
    """Run the task generators, at most ``concurrency`` at once; their results, in order.
    ``meanwhile()`` (collector work of its own) runs once, after the first tasks have started."""
    waiting = list(gens)
    waiting.reverse()
    tasks, running = [], []  # type: list, list
    while waiting or running:
        while waiting and len(running) < concurrency:
            tasks.append(Task(waiting.pop()))
            running.append(tasks[-1])
        if meanwhile is not None:
            meanwhile()
            meanwhile = None
        pump_until(lambda tasks=running: any(task.done for task in tasks))
        running = [task for task in running if not task.done]
    return [task.result for task in tasks]


def _kill_group(pid, sig=_signal.SIGKILL):
    try:
        os.killpg(pid, sig)
    except OSError:
        pass


def _kill_live_tools():
    for tool in list(_LIVE.values()):
        _kill_group(tool.pid)


def _end_live_tools(wait_s):
    """SIGKILL the tools still running and reap them, waiting at most ``wait_s``."""
    _kill_live_tools()
    until = time.monotonic() + wait_s
    while _LIVE and time.monotonic() < until:
        _pump(until)  # not pump_until: no task may start another tool now


def _text(data):
    if data is None:
        return ""
    return data.decode("utf-8", "replace")


def _one_line(text, limit=300):
    """The informative part of a tool's error output, as one line."""
    lines = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("Stack backtrace:"):  # py-spy appends a Rust backtrace
            break
        if line:
            lines.append(line)
    joined = "; ".join(lines[-3:])
    return joined[:limit] if joined else ""


def find_tool(name, candidates):
    """The first candidate that is an executable file, else ``name`` on PATH, else None."""
    for path in candidates or ():
        if isinstance(path, str) and _isfile(path) and os.access(path, os.X_OK):
            return path
    for directory in _environ().get("PATH", "/usr/bin:/bin").split(":"):
        path = (directory or ".") + "/" + name
        if _isfile(path) and os.access(path, os.X_OK):
            return path
    return None
