"""slurmdiag node collector: one framed JSON document about a Slurm job's processes on this node.

Stdlib only, python3.8+, never imports slurmdiag. The controller runs it as
``python3 -I -S -c <this source> <args-json>`` in one ``srun --overlap`` step (or over ssh), one
task per node. Every node pays its start-up, and on an emulated cluster all nodes share one host,
so the normal path imports only C modules: not json, subprocess, threading or signal (each pulls
in re, enum, locale or more, ~5-10 ms per node). One thread runs everything (see "running tools").

Phases: find the job's processes (below the job's slurmstepd in /proc, else scontrol listpids,
else /proc environ) -> rank identity from environ -> K rounds of ``py-spy dump --json`` (ranks in
parallel; the TCP sockets read from netlink during the first round) with ``strace -c`` tracing
the ranks from the end of the first round on (the later rounds read with --nonblocking: a
blocking py-spy and strace cannot trace one process at once) -> GPUs and NICs (gathered on the
side from the start). Nothing blocks past ``deadline_s``: phases shrink or are
skipped and say so in "errors", and a SIGALRM just before the deadline emits whatever exists.

stdout carries only frames (see frame_lines): ``@SDG1-HELLO <node> <pid>``, then the document as
base64(zlib(json)) cut into ``@SDG1 <node> <seq> <total> <crc32> <chunk>`` lines, each written with
one os.write so that srun's merging of many nodes' stdout cannot cut a line.
"""

import _signal  # the C module; signal.py imports enum
import posix as os  # the C module: os.py imports _collections_abc for os.environ (~1 ms a node)
import select
import sys
import time

try:
    import _json  # json's C accelerator: the json package itself imports re and enum
except ImportError:  # an interpreter built without it: see dumps() and loads()
    _json = None  # type: ignore[assignment]

FORMAT = 1
COLLECTOR_VERSION = "1"
CHUNK_CHARS = 600
# Time kept back from the deadline for ending tools, encoding and writing the frames.
FINISH_RESERVE_S = 0.4
# The watchdog (SIGALRM) fires this long before the deadline if the document is not out yet.
WATCHDOG_MARGIN_S = 0.15
MARKER_ENV = "SLURMDIAG_COLLECTOR"
# Our own source, in the step's environment (see the loader): not passed on to the tools.
SOURCE_ENV = b"SLURMDIAG_COLLECTOR_SOURCE"
# The sibling walk (sibling_stepd_descendants) compares its cost with a /proc walk's past this.
CHILDREN_READS_BEFORE_BUDGET = 256
# Their handlers emit the document and exit (see main).
# SIGUSR1: what an interrupted controller sends through srun, which forwards it to the tasks
# (SIGTERM or SIGHUP would make srun kill the step before the collectors could answer).
HANDLED_SIGNALS = (_signal.SIGALRM, _signal.SIGTERM, _signal.SIGHUP, _signal.SIGUSR1)

SKIP_COMMS = frozenset(
    [
        "slurmstepd",
        "srun",
        "salloc",
        "sbatch",
        "bash",
        "sh",
        "zsh",
        "dash",
        "ksh",
        "tcsh",
        "csh",
        "fish",
        "sleep",
        "py-spy",
        "strace",
        "scontrol",
        "nvidia-smi",
        "dmesg",
        "ip",
    ]
)
# Secrets never leave a node. The environment: only ALLOW_ENV_NAMES, and names under
# ALLOW_ENV_PREFIXES that contain none of DENY_ENV_WORDS (compared case-insensitively, so
# NCCL_IB_Token is dropped too). Everything else stays: PWD (the working directory), HOME, PATH...
# Values that do leave, and every command-line argument, go through mask_secrets below.
ALLOW_ENV_PREFIXES = ("NCCL_", "GLOO_", "TORCH_")
DENY_ENV_WORDS = ("TOKEN", "KEY", "SECRET", "PASS", "PWD", "CRED", "AUTH", "COOKIE", "SESSION",
                  "PRIVATE", "SIGNATURE")
# Command-line options (and NAME=value arguments) whose value is masked: any word of the name,
# split at -, _, . and camelCase, in SECRET_WORDS (--wandb-api-key, --hf_token, hfToken, --db-pass).
SECRET_WORDS = frozenset(["token", "password", "passwd", "pass", "pwd", "passphrase", "secret",
                          "key", "apikey", "credential", "credentials", "cred", "creds", "auth",
                          "cookie", "session", "private", "signature"])
MASK = "***"
ALLOW_ENV_NAMES = frozenset(
    [
        "CUDA_VISIBLE_DEVICES",
        "MASTER_ADDR",
        "MASTER_PORT",
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "TORCHELASTIC_RUN_ID",
        "OMP_NUM_THREADS",
        "SLURM_JOB_ID",
        "SLURM_STEP_ID",
        "SLURM_PROCID",
        "SLURM_LOCALID",
        "SLURM_NTASKS",
        "SLURM_NODEID",
        "SLURMD_NODENAME",
        "SLURM_JOB_NODELIST",
        "SLURM_CPUS_ON_NODE",
    ]
)
RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")
LOCAL_RANK_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID")
WORLD_SIZE_VARS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS")
TCP_STATES = {
    "01": "ESTABLISHED",
    "02": "SYN_SENT",
    "03": "SYN_RECV",
    "04": "FIN_WAIT1",
    "05": "FIN_WAIT2",
    "06": "TIME_WAIT",
    "07": "CLOSE",
    "08": "CLOSE_WAIT",
    "09": "LAST_ACK",
    "0A": "LISTEN",
    "0B": "CLOSING",
    "0C": "NEW_SYN_RECV",
}
MAX_ARG_CHARS = 2000
MAX_CONNECTIONS = 300


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


def _ascii_digits(text):
    """True for plain ASCII digits: ``str.isdigit()`` admits ``'²'``, which ``int()`` refuses."""
    return bool(text) and len(text) <= 18 and text.isascii() and text.isdigit()


# ---------------------------------------------------------------- JSON
# With the C accelerator _json directly, as json.dumps/json.loads would call it. The json package
# is imported only when _json is missing or refuses the call, and to word a decoding error.


def dumps(obj):
    """``json.dumps(obj, separators=(",", ":"), default=str)``: compact, ASCII, NaN allowed."""
    if _json is not None:
        try:
            # Arguments as json.encoder.JSONEncoder.iterencode passes them (3.8 to 3.13):
            # markers, default, encoder, indent, key and item separators, sort_keys, skipkeys,
            # allow_nan. The encoder returns the text in chunks.
            encode = _json.make_encoder(
                {}, str, _json.encode_basestring_ascii, None, ":", ",", False, False, True
            )
        except TypeError:  # another signature on a future Python
            encode = None
        if encode is not None:
            return "".join(encode(obj, 0))
    import json

    return json.dumps(obj, separators=(",", ":"), default=str)


_JSON_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": -float("inf")}


class _ScanContext:
    """The settings json.decoder.JSONDecoder hands _json.make_scanner (json.loads' defaults)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _JSON_CONSTANTS.__getitem__


def loads(text):
    """``json.loads(text)`` for a str; raises ValueError (json's own message) if it is not JSON."""
    if _json is not None:
        whitespace = " \t\n\r"  # json's WHITESPACE
        try:
            start = len(text) - len(text.lstrip(whitespace))
            value, end = _json.make_scanner(_ScanContext)(text, start)
            if not text[end:].strip(whitespace):
                return value
        except (StopIteration, ValueError):
            pass  # json.loads below says what is wrong, in its words
    import json

    return json.loads(text)


# ---------------------------------------------------------------- running tools
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
    signals = {"setsigdef": (_signal.SIGPIPE, _signal.SIGXFSZ, _signal.SIGINT), "setsigmask": ()}
    env = _child_env()
    try:  # a session of its own: a timeout kills the tool's whole process group
        return os.posix_spawnp(argv[0], argv, env, file_actions=actions, setsid=True, **signals)
    except NotImplementedError:  # glibc < 2.26 has no POSIX_SPAWN_SETSID: a group will do
        return os.posix_spawnp(argv[0], argv, env, file_actions=actions, setpgroup=0, **signals)


class Tool:
    """A started tool: what it wrote so far, when it gets killed, when its task wants to resume."""

    def __init__(self, argv, timeout, merge_stderr=False):
        self.argv = argv
        self.out, self.err = [], []
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
    os.close(fd)
    _READERS.pop(fd)[0].open -= 1


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
    tasks, running = [], []
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


# ---------------------------------------------------------------- /proc readers


def _read(path, binary=False, one_show=False):
    """A whole file as text (or bytes), None if it cannot be read.

    os-level: a /proc walk reads hundreds of small files, and io.open's buffered object costs a
    third of each read. ``one_show``: a /proc file the kernel writes in one piece (stat, comm,
    cmdline, environ, wchan), so a read that does not fill the buffer got all of it; files of
    records (/proc/net/tcp) come a page of whole records at a time and are read to the end.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    chunks = []
    try:
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            if one_show and len(chunk) < 65536:
                break
    except OSError:
        return None
    finally:
        os.close(fd)
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    return data if binary else data.decode("utf-8", "replace")


def _read_int(path):
    text = _read(path)
    try:
        return int(text.strip())
    except (AttributeError, ValueError):
        return None


def read_stat(pid):
    """Fields of /proc/PID/stat we use, or None if the process is gone."""
    data = _read(f"/proc/{pid}/stat", one_show=True)
    if not data:
        return None
    close = data.rfind(")")
    fields = data[close + 2 :].split()
    try:
        return {
            "comm": data[data.find("(") + 1 : close],
            "state": fields[0],
            "ppid": int(fields[1]),
            "ticks": int(fields[11]) + int(fields[12]),
            "num_threads": int(fields[17]),
            "starttime": int(fields[19]),
            "rss_pages": int(fields[21]),
        }
    except (IndexError, ValueError):
        return None


def parse_environ(data):
    """Raw /proc/PID/environ bytes -> {name: value}."""
    text = data.decode("utf-8", "replace")  # one decode: NUL and "=" never sit inside a character
    env = {}
    for item in text.split("\0"):
        name, sep, value = item.partition("=")
        if sep and name:
            env[name] = value
    return env


def _name_words(name):
    """'--wandb-api-key' -> ['wandb', 'api', 'key']; 'hfToken' -> ['hf', 'token']."""
    words, word, lower_before = [], "", False
    for ch in name:
        if not ch.isalnum():
            if word:
                words.append(word)
            word, lower_before = "", False
            continue
        if ch.isupper() and lower_before and word:
            words.append(word)
            word = ""
        word += ch.lower()
        lower_before = ch.islower() or ch.isdigit()
    if word:
        words.append(word)
    return words


def secret_name(name):
    """True for an option or variable name that says its value is a secret."""
    return any(word in SECRET_WORDS for word in _name_words(name))


def mask_url_credentials(text):
    """``scheme://user:pw@host`` -> ``scheme://user:***@host``, anywhere in ``text``."""
    if "://" not in text or "@" not in text:
        return text
    out, pos = [], 0
    while True:
        found = text.find("://", pos)
        if found < 0:
            break
        start = end = found + 3
        while end < len(text) and text[end] not in "/?# \t\n\"'<>":
            end += 1
        authority = text[start:end]
        at = authority.rfind("@")
        user, colon, _ = authority[:max(at, 0)].partition(":")
        if at > 0 and colon:
            out.append(text[pos:start] + user + ":" + MASK)
            pos = start + at
        else:
            out.append(text[pos:start])
            pos = start
    out.append(text[pos:])
    return "".join(out)


def _is_setting(name, value):
    """``NAME=value`` as env(1) or hydra take it; not a piece of code (``-c "key='a'; ..."``)."""
    return (bool(name) and name.replace("_", "a").replace(".", "a").replace("-", "a").isalnum()
            and not any(ch.isspace() or ch in ";()'\"" for ch in value))


def mask_secrets(args):
    """A command line with the values of secret-looking options and URL credentials masked.

    ``--token=V`` and ``--token V`` (the next argument, unless it is an option), ``NAME=V``
    arguments (``env HF_TOKEN=V cmd``, hydra's ``wandb.api_key=V``), ``https://u:V@host``.
    Short options (``-p``: a port as often as a password) are left alone.
    """
    out, hide_next = [], False
    for arg in args:
        if hide_next and not arg.startswith("-"):
            out.append(MASK)
            hide_next = False
            continue
        hide_next = False
        name, sep, value = arg.partition("=")
        if arg.startswith("--") and secret_name(name):
            if not sep:
                hide_next = True
            elif value:
                arg = name + "=" + MASK
        elif sep and value and not arg.startswith("-") and _is_setting(name, value) \
                and secret_name(name):
            arg = name + "=" + MASK
        out.append(mask_url_credentials(arg))
    return out


def read_cmdline(pid):
    data = _read(f"/proc/{pid}/cmdline", binary=True, one_show=True)
    if data is None:
        return []
    args = data.split(b"\0")
    if args and args[-1] == b"":
        args.pop()
    out = []
    for arg in args:
        text = arg.decode("utf-8", "replace")
        if len(text) > MAX_ARG_CHARS:
            text = text[:MAX_ARG_CHARS] + f"...[{len(text) - MAX_ARG_CHARS} chars cut]"
        out.append(text)
    return mask_secrets(out)


def allowed_env(env):
    """The environment variables that may leave the node (allowlist; secrets never)."""
    out = {}
    for name in sorted(env):
        if name in ALLOW_ENV_NAMES or (
            name.startswith(ALLOW_ENV_PREFIXES)
            and not any(w in name.upper() for w in DENY_ENV_WORDS)
        ):
            out[name] = mask_url_credentials(env[name])
    return out


# ---------------------------------------------------------------- discovery


def parse_listpids(text):
    """Rows of ``scontrol listpids``: [(pid, step_id or None)]; pids of -1 are dropped."""
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 3 or not _ascii_digits(parts[0].lstrip("-")):
            continue  # the header, or noise
        pid = int(parts[0])
        if pid > 0:
            rows.append((pid, None if parts[2] == "-" else parts[2]))
    return rows


def _own_lineage():
    """Our pid and every ancestor (srun task, slurmstepd, ssh shell): never inspected."""
    pids = set()
    pid = os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        stat = read_stat(pid)
        if stat is None:
            break
        pid = stat["ppid"]
    return pids


def _node_needle(node, cluster=None):
    """What _environ_node looks for: this node's SLURMD_NODENAME and, when known, the cluster's
    SLURM_CLUSTER_NAME (ours, from the step's environment, when not given)."""
    if cluster is None:
        cluster = _environ().get("SLURM_CLUSTER_NAME")
    return tuple(
        None if value is None else ("\0" + var + "=" + value + "\0").encode("utf-8", "surrogateescape")
        for var, value in (("SLURMD_NODENAME", node), ("SLURM_CLUSTER_NAME", cluster or None))
    )


def _environ_node(data, needle):
    """Whose node raw environ bytes name: "ours", "foreign", or None (they name no node).

    Another cluster's process is foreign too: two emulated clusters on one host can share job
    ids and node names. No dict is built."""
    node, cluster = needle
    padded = b"\0" + data
    if cluster is not None and cluster not in padded and b"\0SLURM_CLUSTER_NAME=" in padded:
        return "foreign"
    if node in padded:
        return "ours"
    return "foreign" if b"\0SLURMD_NODENAME=" in padded else None


def _stepd_node(tasks, needle):
    """What the first readable of a stepd's tasks says of its node (see _environ_node)."""
    for task in tasks:
        data = _read(f"/proc/{task}/environ", binary=True, one_show=True)
        if data is not None:
            return _environ_node(data, needle)
    return None


def _is_foreign(step, tasks, needle, claimed):
    """True for a stepd of another node sharing this host (multiple slurmd, the emulated cluster).

    A node runs one stepd per step: once a task's environment has named this node for ``step``,
    it joins ``claimed``, and the walks skip the other stepds of that step unread. A stepd whose
    tasks name no node counts as ours and claims nothing.
    """
    whose = _stepd_node(tasks, needle)
    if whose == "ours":
        claimed.add(step)
    return whose == "foreign"


def _children(pid, main_only=False, counter=None):
    """Child pids of ``pid`` from /proc/PID/task/TID/children, None if that cannot be read.

    A child is listed under the thread that forked it, so all threads are read, unless
    ``main_only``. ``counter`` (a one-item list) counts the files read.
    """
    if main_only:
        tids = [str(pid)]
    else:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return None
    found = []
    for tid in tids:
        data = _read(f"/proc/{pid}/task/{tid}/children", binary=True, one_show=True)
        if data is None:
            if main_only or _isdir(f"/proc/{pid}/task/{tid}"):
                return None  # gone, or no children files (a kernel without CONFIG_PROC_CHILDREN)
            continue  # that thread has just ended
        found.extend(int(child) for child in data.split())
    if counter is not None:
        counter[0] += len(tids)
    return found


def _proc_entries():
    return sum(1 for name in os.listdir("/proc") if name.isdigit())


def sibling_stepd_descendants(job_id, node, skip_step=None):
    """{pid: step} below this job's slurmstepd processes, from our own stepd's siblings.

    The collector is a task of our own step, so its parent is a slurmstepd; slurmd double-forks
    every stepd, so all stepds of this node share one parent, init or a subreaper. Its
    children (the host's daemons, a hundred or so), then each job stepd's and each task's
    children, are far fewer files than a walk of all /proc (kernel threads, every other
    process), the more so on a large node. A stepd's tasks are forked by its main thread, so one
    file tells whether a stepd is another (emulated) node's. None when this does not apply (no
    stepd parent: ssh, a wrapper), when no stepd of the job is there, or when the job's threads
    would cost more files than /proc has entries: the full walk then decides.
    """
    own = read_stat(os.getppid())
    if own is None or own["comm"] != "slurmstepd" or own["ppid"] < 1:
        return None
    counter = [0]
    candidates = _children(own["ppid"], counter=counter)
    if not candidates:
        return None
    prefix = f"slurmstepd: [{job_id}.".encode()
    needle = _node_needle(node)
    budget = None
    found = {}
    claimed = set()
    seen_stepd = False
    for stepd in candidates:
        title = _read(f"/proc/{stepd}/cmdline", binary=True, one_show=True)
        if not title or not title.startswith(prefix):
            continue
        step = title[len(prefix) :].split(b"]", 1)[0].decode("utf-8", "replace")
        if step == skip_step:
            continue
        seen_stepd = True
        if step in claimed:
            continue  # this node's stepd of that step is found: another node's (see _is_foreign)
        tasks = _children(stepd, main_only=True, counter=counter) or _children(stepd, counter=counter)
        if tasks is None:
            return None
        if _is_foreign(step, tasks, needle, claimed):
            continue
        stack = [stepd]
        while stack:
            kids = _children(stack.pop(), counter=counter)
            if kids is None:
                return None
            for pid in kids:
                if pid not in found:
                    found[pid] = step
                    stack.append(pid)
            if counter[0] > CHILDREN_READS_BEFORE_BUDGET:
                if budget is None:
                    budget = _proc_entries()
                if counter[0] > budget:
                    return None  # many threads: one pass over /proc is cheaper
    return found if seen_stepd else None


def stepd_descendants(job_id, node, skip_step=None):
    """{pid: step} below this job's slurmstepd processes on ``node``, from /proc alone; None if none.

    slurmstepd titles itself ``slurmstepd: [JOB.STEP]``; every process of a step descends from
    its stepd. One pass over /proc/*/stat costs 2-3 ms here, where ``scontrol listpids`` costs
    ~17 ms of CPU (libslurm, slurm.conf, a slurmd round trip): a cost paid on every node.
    Where several slurmd share a host (multiple-slurmd setups, the emulated test cluster) the
    other nodes' stepds are visible too: the environ of one task of each stepd says its node,
    and a foreign stepd's subtree is dropped without reading any of its processes. So is
    ``skip_step``, our own step.
    """
    prefix = f"slurmstepd: [{job_id}."
    parent = {}
    stepds = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        data = _read(f"/proc/{name}/stat", one_show=True)
        if not data:
            continue
        close = data.rfind(")")
        fields = data[close + 2 :].split(None, 2)
        if len(fields) < 2 or not _ascii_digits(fields[1]):
            continue
        pid = int(name)
        parent[pid] = int(fields[1])
        if data[data.find("(") + 1 : close] == "slurmstepd":
            title = _read(f"/proc/{name}/cmdline", one_show=True) or ""
            if title.startswith(prefix):
                step = title[len(prefix) :].split("]", 1)[0]
                if step != skip_step:
                    stepds[pid] = step
    if not stepds:
        return None
    children = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    needle = _node_needle(node)
    found = {}
    claimed = set()
    for stepd, step in stepds.items():
        if step in claimed:
            continue  # this node's stepd of that step is found: another node's (see _is_foreign)
        tasks = children.get(stepd, ())
        if _is_foreign(step, tasks, needle, claimed):
            continue
        stack = list(tasks)
        while stack:
            pid = stack.pop()
            if pid not in found:
                found[pid] = step
                stack.extend(children.get(pid, ()))
    return found


def discover(job_id, node, listing, exclude, errors, walked=None):
    """Job processes on this node: ({pid: info}, method).

    ``listing`` is what ``scontrol listpids`` gave, (rc, out, err, note), or None without scontrol.
    """
    own_env = _environ()
    own_job = own_env.get("SLURM_JOB_ID") or own_env.get("SLURM_JOBID")
    own_step = own_env.get("SLURM_STEP_ID") or own_env.get("SLURM_STEPID")
    exclude = set(exclude)
    exclude.add(os.getpid())

    listed = None
    if walked is not None:
        listed = {pid: step for pid, step in walked.items() if not (
            own_step and own_job == job_id and step == own_step)}
    elif listing is not None:
        rc, out, err, note = listing
        rows = parse_listpids(out) if rc == 0 else []
        if rc == 0 and rows:
            listed = {}
            for pid, step in rows:
                if step is not None and own_step and own_job == job_id and step == own_step:
                    continue  # our own srun step
                listed[pid] = step
        else:
            why = note or _one_line(err or out) or "no processes listed"
            errors.append(f"scontrol listpids failed ({why}); scanned /proc instead")
    else:
        errors.append("scontrol not found; scanned /proc instead")

    method = "stepd" if walked is not None else "listpids" if listed is not None else "proc"
    if listed is not None:
        pids = listed
    else:
        # Over ssh, our shell and its parents carry the job's environment too (adopted sessions).
        exclude |= _own_lineage()
        pids = {}
        needles = [f"\0{var}={job_id}\0".encode() for var in ("SLURM_JOB_ID", "SLURM_JOBID")]
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            data = _read(f"/proc/{name}/environ", binary=True, one_show=True)
            # A cheap byte test; the parsed environ is checked again below.
            if data and any(needle in b"\0" + data for needle in needles):
                pids[int(name)] = None

    procs = {}
    needle = _node_needle(node)
    for pid in pids:
        if pid in exclude:
            continue
        raw = _read(f"/proc/{pid}/environ", binary=True, one_show=True)
        if raw is None or _environ_node(raw, needle) == "foreign":
            continue  # gone, not ours to read, or another (emulated) node's process
        env = parse_environ(raw)
        stat = read_stat(pid)
        if stat is None:
            continue  # exited
        if (env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")) != job_id and method == "proc":
            continue
        proc_node = env.get("SLURMD_NODENAME")
        if proc_node is not None and proc_node != node:
            continue  # another (emulated) node's process on this same host
        if MARKER_ENV in env:
            continue  # a tool started by a slurmdiag collector
        step = pids[pid] or env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID")
        if own_step and step == own_step and env.get("SLURM_JOB_ID") == own_job:
            continue  # a process of our own step
        cmdline = read_cmdline(pid)
        if any(
            "@SDG1-HELLO" in arg or arg.endswith("slurmdiag/collector/node.py") for arg in cmdline
        ):
            continue  # another slurmdiag collector attached to the same job
        procs[pid] = {"pid": pid, "env": env, "stat": stat, "cmdline": cmdline, "step_id": step}
    return procs, method


def _agent_kind(cmdline):
    """The launcher a process is, judged from its first arguments, or None."""
    head = cmdline[:4]
    bases = [_basename(arg) for arg in head]
    for arg, base in zip(head, bases):
        if base == "torchrun" or arg in ("torch.distributed.run", "torch.distributed.launch"):
            return "torchrun"
        if arg.endswith(("torch/distributed/run.py", "torch/distributed/launch.py")):
            return "torchrun"
        if base == "accelerate" or arg.startswith("accelerate.commands"):
            return "accelerate"
        if base == "deepspeed" or arg.startswith("deepspeed.launcher"):
            return "deepspeed"
    return None


def _is_python(info):
    if info["stat"]["comm"].startswith("python"):
        return True
    if info["cmdline"] and _basename(info["cmdline"][0]).startswith("python"):
        return True
    try:
        return "python" in _basename(os.readlink("/proc/{}/exe".format(info["pid"])))
    except OSError:
        return False


def _first(env, names):
    for name in names:
        value = env.get(name)
        if value not in (None, ""):
            return value
    return None


def _as_int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _looks_multiprocessing(info):
    joined = " ".join(info["cmdline"][:4])
    return (
        "spawn_main" in joined
        or "--multiprocessing-fork" in joined
        or "forkserver" in joined
        or info["stat"]["comm"].startswith("pt_data")
    )


def classify(procs):
    """Set role (rank | dataloader_worker | child | agent | None=skip) and rank_pid in place.

    A process below a rank (in the job's own process tree) that carries the same rank identity,
    or is a multiprocessing child, or a fork with the same command line, is that rank's worker.
    A "rank" that turns out to have started other ranks is their launcher ("agent"), and the
    tree is classified again with that knowledge.
    """
    launchers = set()
    for _ in range(4):
        _classify_once(procs, launchers)
        found = set()
        for info in procs.values():
            if info["role"] == "rank":
                owner = next(
                    (a for a in _ancestors(procs, info["pid"]) if a["role"] == "rank"), None
                )
                if owner is not None:
                    found.add(owner["pid"])
        if found <= launchers:
            break
        launchers |= found


def _ancestors(procs, pid):
    seen = set()
    pid = procs[pid]["stat"]["ppid"]
    while pid in procs and pid not in seen:
        seen.add(pid)
        yield procs[pid]
        pid = procs[pid]["stat"]["ppid"]


def _classify_once(procs, launchers):
    depth = {pid: sum(1 for _ in _ancestors(procs, pid)) for pid in procs}
    for pid in procs:
        procs[pid]["role"] = None
    for pid in sorted(procs, key=lambda p: (depth[p], p)):
        info = procs[pid]
        info["rank_pid"] = None
        info["global_rank"] = _first(info["env"], RANK_VARS)
        if info["stat"]["comm"] in SKIP_COMMS:
            continue
        kind = _agent_kind(info["cmdline"])
        if kind is None and pid in launchers:
            kind = "submitit" if "submitit" in " ".join(info["cmdline"]) else "launcher"
        if kind:
            info["role"], info["agent_kind"] = "agent", kind
            continue
        owner = next(
            (
                a
                for a in _ancestors(procs, pid)
                if a["role"] in ("rank", "child", "dataloader_worker")
            ),
            None,
        )
        if owner is not None:
            rank = procs[owner["rank_pid"]] if owner["rank_pid"] else owner
            if (
                info["global_rank"] == rank["global_rank"]
                or _looks_multiprocessing(info)
                or info["cmdline"] == rank["cmdline"]
                or not _is_python(info)
            ):
                info["rank_pid"] = rank["pid"]
                info["role"] = "dataloader_worker" if _looks_multiprocessing(info) else "child"
                continue
        if _is_python(info):
            info["role"] = "rank"


def _launcher(info, procs):
    env = info["env"]
    pid = info["stat"]["ppid"]
    seen = set()
    while pid in procs and pid not in seen:
        seen.add(pid)
        parent = procs[pid]
        if parent["role"] == "agent":
            kind = parent.get("agent_kind")
            if kind in ("torchrun", "accelerate", "deepspeed", "submitit"):
                return kind
            break
        pid = parent["stat"]["ppid"]
    if env.get("TORCHELASTIC_RUN_ID"):
        return "torchrun"
    if "submitit" in " ".join(info["cmdline"]) or any(k.startswith("SUBMITIT_") for k in env):
        return "submitit"
    if any(k.startswith(("DEEPSPEED_", "DS_ACCELERATOR")) for k in env):
        return "deepspeed"
    if any(k.startswith("ACCELERATE_") for k in env):
        return "accelerate"
    procid = env.get("SLURM_PROCID")
    if "OMPI_COMM_WORLD_RANK" in env:
        return "mpirun"
    pmi = env.get("PMI_RANK") or env.get("PMIX_RANK")
    if pmi is not None and pmi != procid:
        return "mpirun"
    if info.get("step_id") == "batch":
        return "batch"  # started by the batch script itself (python directly, a shell loop)
    if procid is not None:
        return "srun"
    return "unknown"


# ---------------------------------------------------------------- py-spy and strace


def slim_threads(threads):
    """py-spy's JSON threads without locals and duplicate names."""
    out = []
    for thread in threads:
        frames = []
        for frame in thread.get("frames") or ():
            frames.append(
                {
                    "name": frame.get("name"),
                    "filename": frame.get("filename"),
                    "line": frame.get("line"),
                    "module": frame.get("module"),
                }
            )
        out.append(
            {
                "thread_id": thread.get("thread_id"),
                "os_thread_id": thread.get("os_thread_id"),
                "thread_name": thread.get("thread_name"),
                "active": thread.get("active"),
                "owns_gil": thread.get("owns_gil"),
                "frames": frames,
            }
        )
    return out


def _in_dataloader_loop(threads):
    for thread in threads or ():
        for frame in thread["frames"]:
            if frame["name"] == "_worker_loop" and "utils/data" in (frame["filename"] or ""):
                return True
    return False


def _spawn_wrap_frame(threads):
    """(frames, index) of torch.multiprocessing's ``_wrap`` in a stack, or None.

    ``torch.multiprocessing.spawn``/``start_processes`` runs each rank as ``_wrap(fn, i, ...)``
    in a child of the launching script: such a child is a rank, not a worker of its parent.
    """
    for thread in threads or ():
        frames = thread.get("frames") or ()
        for index, frame in enumerate(frames):
            if frame.get("name") == "_wrap" and (frame.get("filename") or "").endswith(
                "torch/multiprocessing/spawn.py"
            ):
                return frames, index
    return None


IDENTITY_LOCALS = {
    "rank": ("rank", "global_rank"),
    "world_size": ("world_size", "world"),
}


def spawn_identity(threads):
    """{"local_rank", "rank", "world_size"} read from py-spy --locals of a spawned rank.

    ``i`` of ``_wrap`` is the process index; the rank and world size are what the user's
    function (the frame ``_wrap`` called) named ``rank``/``global_rank`` and
    ``world_size``/``world``, when it did; a missing one is None.
    """
    found = _spawn_wrap_frame(threads)
    out = {"local_rank": None, "rank": None, "world_size": None}
    if found is None:
        return out
    frames, index = found

    def local(frame, names):
        for item in frame.get("locals") or ():
            if item.get("name") in names:
                value = _as_int(item.get("repr"))
                if value is not None:
                    return value
        return None

    out["local_rank"] = local(frames[index], ("i",))
    if index > 0:
        for key, names in IDENTITY_LOCALS.items():
            out[key] = local(frames[index - 1], names)
    return out


def identity_dump(pyspy, pid, clock):
    """Task: one ``py-spy dump --locals`` of ``pid``: its raw threads, or None."""
    timeout = min(10.0, clock.left() - FINISH_RESERVE_S)
    if timeout < 0.2:
        return None
    argv = [pyspy, "dump", "--json", "--locals", "--pid", str(pid)]
    rc, out, _err, _note = yield from tool_run(argv, timeout)
    if rc != 0:
        return None
    try:
        return loads(out)
    except ValueError:
        return None


def adopt_spawned_ranks(entries, pyspy, clock, concurrency):
    """Children run by torch.multiprocessing.spawn become ranks, their parent an agent.

    Called after the first round of samples, which shows ``_wrap`` in such a child's stack.
    Their identity comes from one ``py-spy dump --locals`` each (see spawn_identity). When the
    user's function names no rank, it is ``parent's rank x nprocs + i``, the usual formula.
    """
    spawned = [
        e
        for e in entries
        if e["role"] in ("dataloader_worker", "child")
        and e["samples"]
        and _spawn_wrap_frame(e["samples"][0]["threads"]) is not None
    ]
    if not spawned:
        return []
    by_pid = {e["pid"]: e for e in entries}
    identities = run_tasks((identity_dump(pyspy, e["pid"], clock) for e in spawned), concurrency)
    parents = {}
    for entry, threads in zip(spawned, identities):
        identity = spawn_identity(threads if isinstance(threads, list) else None)
        parents.setdefault(entry["rank_pid"], []).append(entry)
        entry["role"], entry["rank_pid"], entry["launcher"] = "rank", None, "mp.spawn"
        entry["local_rank"] = identity["local_rank"]
        entry["rank"], entry["world_size"] = identity["rank"], identity["world_size"]
    for parent_pid, children in parents.items():
        nprocs = len(children)
        parent = by_pid.get(parent_pid) or {}
        for entry in children:
            if entry["rank"] is None and entry["local_rank"] is not None:
                base = parent.get("rank") or 0
                entry["rank"] = base * nprocs + entry["local_rank"]
                entry["errors"].append(
                    f"rank {entry['rank']} inferred as the launching process's rank ({base}) x "
                    f"{nprocs} processes + index {entry['local_rank']}: the spawned function "
                    "has no local named rank or global_rank"
                )
            if entry["world_size"] is None and parent.get("world_size"):
                entry["world_size"] = parent["world_size"] * nprocs
        if parent:
            parent.update(role="agent", rank=None, local_rank=None, world_size=None,
                          launcher="mp.spawn", rank_pid=None)
    # Whatever else hung below a parent (its resource tracker) is its own process now; a
    # spawned rank's own workers (DataLoader) hang under that rank.
    ranks = {e["pid"] for e in entries if e["role"] == "rank"}
    for entry in entries:
        if entry["role"] in ("dataloader_worker", "child") and entry["rank_pid"] in parents:
            owner = _nearest(entry["ppid"], by_pid, ranks)
            entry["rank_pid"] = owner
            if owner is None:
                entry["role"] = "child"
    return spawned


def _nearest(pid, by_pid, ranks):
    seen = set()
    while pid in by_pid and pid not in seen:
        if pid in ranks:
            return pid
        seen.add(pid)
        pid = by_pid[pid]["ppid"]
    return None


def read_usage(pid, stat):
    """CPU seconds of the process and of each of its threads, and its I/O counters, now.

    {"cpu_s": total, "threads": {tid: cpu_s}, "io": [rchar, wchar, read_bytes, write_bytes]}
    (io null when /proc/PID/io cannot be read). Read at each sample: the analysis measures
    progress from the differences between samples (utime+stime of /proc/PID/task/TID/stat).
    """
    tick = float(os.sysconf("SC_CLK_TCK"))
    threads = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        tids = []
    for tid in tids:
        data = _read(f"/proc/{pid}/task/{tid}/stat", one_show=True)
        if not data:
            continue
        fields = data[data.rfind(")") + 2 :].split()
        try:
            threads[tid] = round((int(fields[11]) + int(fields[12])) / tick, 2)
        except (IndexError, ValueError):
            continue
    io = None
    text = _read(f"/proc/{pid}/io", one_show=True)
    if text:
        values = {}
        for line in text.splitlines():
            name, _, value = line.partition(":")
            values[name.strip()] = value.strip()
        try:
            io = [int(values[k]) for k in ("rchar", "wchar", "read_bytes", "write_bytes")]
        except (KeyError, ValueError):
            io = None
    return {"cpu_s": round(stat["ticks"] / tick, 2), "threads": threads, "io": io}


def group_locals(threads, pid):
    """[frame index, name, repr] of the locals of ``pid``'s main thread that say which process
    group a collective runs on and which groups the rank belongs to: a ProcessGroup object
    (repr ``<torch._C._distributed_c10d.ProcessGroup at 0x..>``, a dict of them), torch's
    ``-100`` (new_group's result on a non-member), and the c10d wrapper's ``args``/``kwargs``
    (no ProcessGroup there: the call runs on the default group)."""
    main = next((t for t in threads if t.get("os_thread_id") == pid), None)
    out = []
    for index, frame in enumerate((main or {}).get("frames") or ()):
        wrapper = (frame.get("filename") or "").endswith("distributed/c10d_logger.py")
        for item in frame.get("locals") or ():
            text = str(item.get("repr") or "")
            if ("c10d.ProcessGroup at 0x" in text or text == "-100" or ": -100" in text
                    or (wrapper and item.get("name") in ("args", "kwargs"))):
                out.append([index, item.get("name"), text[:400]])
    return out


def dump_stack(pyspy, pid, native, clock, traced=False, groups=False):
    """Task: one py-spy sample of ``pid``, {"t", "threads", "error"} (+ "note" when read oddly).
    ``traced``: strace is attached to it, so py-spy cannot suspend it: read with --nonblocking.
    ``groups``: read with --locals and keep only the process-group ones (group_locals)."""
    t = round(time.time() - clock.started, 3)
    stat = read_stat(pid)
    if stat is None:
        return {"t": t, "threads": None, "error": "process exited"}
    state = stat["state"]
    if state in ("Z", "X"):
        return {"t": t, "threads": None, "error": f"process is a zombie (state {state})"}
    timeout = min(10.0, clock.left())
    if timeout < 0.2:
        return {"t": t, "threads": None, "error": "skipped: deadline"}
    argv = [pyspy, "dump", "--json", "--pid", str(pid)]
    note = None
    # A stopped process (T/t) makes the blocking dump fail ("Failed to suspend process"), and one
    # in D cannot be suspended until its syscall returns; neither runs Python code meanwhile, so
    # reading without suspending is exact. --native needs the suspend.
    if state in ("T", "t", "D") or traced:
        argv.append("--nonblocking")
        why = "strace attached" if traced else f"process in state {state}"
        note = f"read with --nonblocking: {why}"
        if native:
            note += "; native frames skipped (they need the suspend)"
    elif native:
        argv.append("--native")
    if groups:
        argv.append("--locals")
    usage = read_usage(pid, stat)
    rc, out, err, timeout_note = yield from tool_run(argv, timeout)
    if rc == 0:
        try:
            raw = loads(out)
            sample = {"t": t, "threads": slim_threads(raw), "error": None, "usage": usage}
            if groups:
                sample["groups"] = group_locals(raw, pid)
            if note:
                sample["note"] = note
            return sample
        except (ValueError, AttributeError, TypeError) as exc:
            return {"t": t, "threads": None, "error": f"py-spy output not JSON: {exc}"}
    error = timeout_note or _one_line(err or out) or f"py-spy exit code {rc}"
    return {"t": t, "threads": None, "error": "py-spy: " + error}


def trace_syscalls(strace, pid, window_s, clock):
    """Task: ``strace -c -f -p PID`` for ``window_s`` seconds, then SIGINT; the raw -c table."""
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


# ---------------------------------------------------------------- GPUs

GPU_FIELDS = (
    "index,uuid,name,utilization.gpu,utilization.memory,memory.used,memory.total,"
    "temperature.gpu,power.draw,clocks_event_reasons.active,ecc.errors.uncorrected.volatile.total,"
    "pcie.link.gen.current,pcie.link.width.current,retired_pages.pending,remapped_rows.pending"
)
GPU_FIELD_SETS = (
    GPU_FIELDS,
    # Drivers before 535 know the field as clocks_throttle_reasons.
    GPU_FIELDS.replace("clocks_event_reasons", "clocks_throttle_reasons"),
    (
        "index,uuid,name,utilization.gpu,utilization.memory,memory.used,memory.total,"
        "temperature.gpu,power.draw"
    ),
)


def _tool_result(argv, rc, out, err, note):
    text = out if not err else (out + ("\n" if out and not out.endswith("\n") else "") + err)
    return {"argv": argv, "returncode": rc, "text": text, "error": note}


def collect_gpus(nvidia_smi, clock):
    """Task: nvidia-smi's raw outputs and the kernel's Xid lines."""
    if not nvidia_smi:
        return {
            "status": "absent",
            "message": "no GPUs visible (nvidia-smi not found)",
            "query_gpu": None,
            "compute_apps": None,
            "qx": None,
            "xid_lines": [],
            "xid_error": None,
        }
    gpu = {
        "status": "error",
        "message": None,
        "query_gpu": None,
        "compute_apps": None,
        "qx": None,
        "xid_lines": [],
        "xid_error": None,
    }
    for fields in GPU_FIELD_SETS:
        argv = [nvidia_smi, "--query-gpu=" + fields, "--format=csv"]
        result = _tool_result(argv, *(yield from tool_run(argv, min(10.0, clock.left()))))
        gpu["query_gpu"] = result
        if result["returncode"] == 0 or result["error"]:
            break  # success, or a hang/timeout that a retry would only repeat
    if gpu["query_gpu"]["returncode"] == 0:
        gpu["status"] = "ok"
        argv = [
            nvidia_smi,
            "--query-compute-apps=gpu_uuid,pid,process_name,used_gpu_memory",
            "--format=csv",
        ]
        timeout = min(10.0, clock.left())
        gpu["compute_apps"] = _tool_result(argv, *(yield from tool_run(argv, timeout)))
    else:
        failed = gpu["query_gpu"]
        if not failed["error"] and clock.left() > 1.0:
            argv = [nvidia_smi, "-q", "-x"]
            timeout = min(10.0, clock.left())
            gpu["qx"] = _tool_result(argv, *(yield from tool_run(argv, timeout)))
        text = failed["text"]
        if "No devices were found" in text:
            gpu["status"] = "absent"
        gpu["message"] = "nvidia-smi failed: " + (
            failed["error"] or _one_line(text) or "exit code {}".format(failed["returncode"])
        )
    if clock.left() > 0.5:
        rc, out, err, note = yield from tool_run(["dmesg", "-T"], min(2.0, clock.left()))
        if rc == 0:
            gpu["xid_lines"] = [line for line in out.splitlines() if "NVRM: Xid" in line][-50:]
        else:
            gpu["xid_error"] = "dmesg: " + (note or _one_line(err) or f"exit code {rc}")
    else:
        gpu["xid_error"] = "dmesg skipped: deadline"
    return gpu


# ---------------------------------------------------------------- NICs and sockets

ARPHRD_KINDS = {
    1: "ether",
    32: "infiniband",
    772: "loopback",
    65534: "none",
    776: "sit",
    778: "gre",
    768: "ipip",
    769: "tunnel6",
}


def collect_nics(clock):
    """Task: interfaces with their addresses, and InfiniBand ports.

    Links come from a netlink dump of this process's own network namespace: /sys/class/net
    shows the namespace of whoever mounted /sys, which is not ours on a node started with
    ``nsenter --net`` or in a container sharing the host's /sys. /sys is the fallback, and
    the source of link speed only where its ifindex matches the netlink one.
    """
    message = None
    try:
        links = _netlink_links()
    except (OSError, ImportError):  # no netlink here (seccomp?): read /sys
        links = None
    if links is None:
        try:
            names = sorted(os.listdir("/sys/class/net"))
        except OSError as exc:
            names = []
            message = f"cannot list /sys/class/net: {exc.strerror}"
        links = [_sys_link(name) for name in names]
    interfaces = []
    for link in links:
        base = "/sys/class/net/" + link["name"]
        same = link["index"] is None or _read_int(base + "/ifindex") == link["index"]
        speed = _read_int(base + "/speed") if same else None  # EINVAL on links that are down
        interfaces.append(
            {
                "name": link["name"],
                "state": link["state"],
                "mtu": link["mtu"],
                "speed_mbps": speed if speed is not None and speed >= 0 else None,
                "kind": link["kind"],
                "addresses": [],
            }
        )
    try:
        addresses, problem = _netlink_addresses(), None
    except (OSError, ImportError) as exc:  # no netlink here (seccomp?): ask ip
        addresses, problem = yield from _ip_addresses(clock)
        problem = problem and f"netlink: {exc}; {problem}"
    for item in interfaces:
        item["addresses"] = addresses.get(item["name"], [])
    if problem:
        message = problem if not message else message + "; " + problem
    return {"interfaces": interfaces, "ib_ports": _ib_ports(), "message": message}


def _sys_link(name):
    base = "/sys/class/net/" + name
    arphrd = _read_int(base + "/type")
    if _isdir(base + "/bridge"):
        kind = "bridge"
    elif _isdir(base + "/bonding"):
        kind = "bond"
    else:
        kind = ARPHRD_KINDS.get(arphrd, f"arphrd_{arphrd}")
    state = _read(base + "/operstate")
    return {"name": name, "index": None, "state": state.strip() if state else None,
            "mtu": _read_int(base + "/mtu"), "kind": kind}


RTM_NEWLINK, RTM_GETLINK = 16, 18
# IF_OPER_* as /sys/class/net/*/operstate spells them
OPERSTATES = ("unknown", "notpresent", "down", "lowerlayerdown", "testing", "dormant", "up")


def _netlink_dump(request, reply, handle):
    """Send one NLM_F_DUMP request (type ``request``) and hand every ``reply`` message's body to
    ``handle``; the request carries a zeroed family header of 16 bytes (ifinfomsg) or 8
    (ifaddrmsg), which asks for every family and every interface."""
    import _socket

    body = bytes(16 if request == RTM_GETLINK else 8)
    sock = _socket.socket(_socket.AF_NETLINK, _socket.SOCK_RAW, 0)  # NETLINK_ROUTE
    try:
        sock.send(_dump_request(request, body))
        for kind, data, offset, length in _netlink_messages(sock, "netlink"):
            if kind == reply:
                handle(data[offset + 16 : offset + length])
    finally:
        sock.close()


def _netlink_messages(sock, what):
    """(type, buffer, offset, length) of each message of the dump answering on ``sock``, until
    NLMSG_DONE; OSError for an error message (its errno when it has one)."""
    import _struct

    head = _struct.Struct("=IH").unpack_from  # nlmsghdr's length and type, read in place
    while True:
        data = sock.recv(1 << 17)
        if not data:
            raise OSError(f"{what} dump ended early")
        offset, size = 0, len(data)
        while offset + 16 <= size:
            length, kind = head(data, offset)
            if kind == NLMSG_DONE or kind == NLMSG_ERROR:
                code = int.from_bytes(data[offset + 16 : offset + 20], sys.byteorder, signed=True)
                if code < 0:
                    raise OSError(-code, f"{what}: {os.strerror(-code)}")
                if kind == NLMSG_ERROR:
                    raise OSError(f"{what}: error in a dump")
                return
            if length < 16:
                raise OSError(f"{what}: malformed message")
            yield kind, data, offset, length
            offset += (length + 3) & ~3


def _dump_request(kind, body):
    """A netlink dump request: nlmsghdr (length, type, flags NLM_F_REQUEST | NLM_F_DUMP,
    sequence, port id), then ``body``."""
    return _u(16 + len(body), 4) + _u(kind, 2) + _u(0x301, 2) + _u(1, 4) + _u(0, 4) + body


def _attributes(msg, offset):
    """{type: payload} of the rtattr list starting at ``offset``."""
    attrs = {}
    while offset + 4 <= len(msg):
        length, kind = _int(msg[offset : offset + 2]), _int(msg[offset + 2 : offset + 4])
        if length < 4:
            break
        attrs[kind & 0x3FFF] = msg[offset + 4 : offset + length]  # without NLA_F_NESTED
        offset += (length + 3) & ~3
    return attrs


def _netlink_links():
    """[{name, index, state, mtu, kind}] of this namespace's links, from RTM_GETLINK."""
    links = []

    def handle(msg):
        # ifinfomsg: family, pad, type (ARPHRD), index, flags, change
        arphrd, index = _int(msg[2:4]), _int(msg[4:8])
        attrs = _attributes(msg, 16)
        name = (attrs.get(3) or b"").rstrip(b"\0").decode("utf-8", "replace")  # IFLA_IFNAME
        if not name:
            return
        operstate = attrs.get(16)  # IFLA_OPERSTATE
        state = OPERSTATES[operstate[0]] if operstate and operstate[0] < len(OPERSTATES) else None
        mtu = _int(attrs[4]) if 4 in attrs else None  # IFLA_MTU
        info_kind = _attributes(attrs[18], 0).get(1) if 18 in attrs else None  # LINKINFO/KIND
        info_kind = (info_kind or b"").rstrip(b"\0").decode("ascii", "replace")
        kind = info_kind if info_kind in ("bridge", "bond") else ARPHRD_KINDS.get(
            arphrd, f"arphrd_{arphrd}")
        links.append({"name": name, "index": index, "state": state, "mtu": mtu, "kind": kind})

    _netlink_dump(RTM_GETLINK, RTM_NEWLINK, handle)
    links.sort(key=lambda link: link["name"])
    return links


RTM_NEWADDR, RTM_GETADDR, NLMSG_ERROR, NLMSG_DONE = 20, 22, 2, 3


def _netlink_addresses():
    """{ifname: ["addr/prefix", ...]} as ``ip -j addr`` lists them (local address, prefixlen;
    IPv4 before IPv6, in the kernel's order), from the RTM_GETADDR dump that ip itself reads."""
    import _socket

    names = dict(_socket.if_nameindex())
    found = {}
    _netlink_dump(RTM_GETADDR, RTM_NEWADDR, lambda msg: _add_address(msg, names, found, _socket))
    return found


def _add_address(msg, names, found, _socket):
    """One RTM_NEWADDR message: ifaddrmsg (family, prefixlen, flags, scope, index), attributes."""
    family, prefixlen, index = msg[0], msg[1], _int(msg[4:8])
    if family not in (_socket.AF_INET, _socket.AF_INET6):
        return
    attrs, offset = {}, 8
    while offset + 4 <= len(msg):
        length, kind = _int(msg[offset : offset + 2]), _int(msg[offset + 2 : offset + 4])
        if length < 4:
            break
        attrs[kind] = msg[offset + 4 : offset + length]
        offset += (length + 3) & ~3
    raw = attrs.get(2) or attrs.get(1)  # IFA_LOCAL, else IFA_ADDRESS: what ip prints as local
    if raw:
        address = _socket.inet_ntop(family, raw)
        found.setdefault(names.get(index, str(index)), []).append(f"{address}/{prefixlen}")


def _u(value, size):
    return value.to_bytes(size, sys.byteorder)


def _int(data):
    return int.from_bytes(data, sys.byteorder)


def _ip_addresses(clock):
    """Task: ({ifname: ["addr/prefix", ...]}, problem) from ``ip -j addr show``."""
    ip_tool = find_tool("ip", ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"])
    if not ip_tool:
        return {}, "ip not found"
    argv = [ip_tool, "-j", "addr", "show"]
    rc, out, err, note = yield from tool_run(argv, min(3.0, clock.left()))
    if rc != 0:
        return {}, "ip -j addr failed (%s)" % (note or _one_line(err) or rc)
    try:
        found = {}
        for link in loads(out):
            found[link.get("ifname")] = [
                "{}/{}".format(a.get("local"), a.get("prefixlen"))
                for a in link.get("addr_info") or ()
                if a.get("local")
            ]
        return found, None
    except (ValueError, AttributeError, TypeError) as exc:
        return {}, f"ip -j addr output not understood ({exc})"


def _ib_ports():
    ports = []
    root = "/sys/class/infiniband"
    try:
        devices = sorted(os.listdir(root))
    except OSError:
        return ports
    for device in devices:
        try:
            numbers = sorted(os.listdir(f"{root}/{device}/ports"), key=lambda s: int(s))
        except (OSError, ValueError):
            continue
        for number in numbers:
            base = f"{root}/{device}/ports/{number}/"
            values = {}
            for key in ("state", "phys_state", "rate", "link_layer"):
                text = _read(base + key)
                values[key] = text.strip() if text is not None else None
            ports.append(dict(device=device, port=int(number), **values))
    return ports


def _ipv6_text(raw16):
    """Compressed text form of a 16-byte IPv6 address (v4-mapped ones as plain IPv4)."""
    if raw16[:12] == b"\0" * 10 + b"\xff\xff":
        return ".".join(str(b) for b in raw16[12:])
    groups = [int.from_bytes(raw16[i : i + 2], "big") for i in range(0, 16, 2)]
    best, best_len, run_start, run_len = -1, 0, -1, 0
    for i, group in enumerate(groups + [1]):
        if group == 0:
            if run_len == 0:
                run_start = i
            run_len += 1
        else:
            if run_len > best_len and run_len >= 2:
                best, best_len = run_start, run_len
            run_len = 0
    parts = [f"{g:x}" for g in groups]
    if best < 0:
        return ":".join(parts)
    return ":".join(parts[:best]) + "::" + ":".join(parts[best + best_len :])


def _kernel_addr(hexaddr):
    """An address from /proc/net/tcp{,6}: 32-bit words in host byte order, printed as hex."""
    raw = bytes.fromhex(hexaddr)
    if sys.byteorder == "little":
        raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    if len(raw) == 4:
        return ".".join(str(b) for b in raw)
    return _ipv6_text(raw)


def parse_proc_net_tcp(text, wanted=None):
    """{inode: (local_ip, local_port, remote_ip, remote_port, state, tx_queue, rx_queue)}.

    With ``wanted`` (a set of inode strings) only those sockets are decoded.
    """
    table = {}
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 10 or (wanted is not None and parts[9] not in wanted):
            continue
        try:
            lip, lport = parts[1].split(":")
            rip, rport = parts[2].split(":")
            txq, rxq = parts[4].split(":")
            table[parts[9]] = (
                _kernel_addr(lip),
                int(lport, 16),
                _kernel_addr(rip),
                int(rport, 16),
                TCP_STATES.get(parts[3].upper(), parts[3]),
                int(txq, 16),
                int(rxq, 16),
            )
        except ValueError:
            continue
    return table


def _endpoint(ip, port):
    return ("[%s]:%d" if ":" in ip else "%s:%d") % (ip, port)


NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY, IPPROTO_TCP = 4, 20, 6
# TCP states whose sockets can be a process's open file: all but TIME_WAIT (6) and NEW_SYN_RECV
# (12), which the kernel keeps without an inode and which are the bulk of a busy host's table.
TCP_STATES_WITH_INODE = sum(1 << state for state in (1, 2, 3, 4, 5, 7, 8, 9, 10, 11))
# inet_diag_msg: family, state, timer, retrans, inet_diag_sockid (sport, dport big-endian; src,
# dst 16 bytes each; interface; cookie), expires, rqueue, wqueue, uid, inode
DIAG_MSG_LEN = 72


def socket_inodes(pid):
    """{inode} (ints) of the sockets ``pid`` holds open; None if its fds cannot be read."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    inodes = set()
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def _netns(pid):
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def sock_diag_tcp(family, wanted):
    """{inode: (local_ip, local_port, remote_ip, remote_port, state, tx_queue, rx_queue)} of the
    TCP sockets of ``family`` (AF_INET or AF_INET6) in our own network namespace whose inode is
    in ``wanted``, from one NETLINK_SOCK_DIAG dump (what ``ss`` reads), filtered by state in the
    kernel and by inode here: no text table is written or parsed. OSError if the kernel refuses.

    The queues mean what /proc/net/tcp's do: for a listening socket rx is the accept queue.
    """
    import _socket
    import _struct

    word = _struct.Struct("=I")
    found = {}
    sock = _socket.socket(_socket.AF_NETLINK, _socket.SOCK_RAW, NETLINK_SOCK_DIAG)
    try:
        # inet_diag_req_v2: family, protocol, no extensions, pad, states, a zero (any) sockid
        body = bytes([family, IPPROTO_TCP, 0, 0]) + _u(TCP_STATES_WITH_INODE, 4) + bytes(48)
        sock.send(_dump_request(SOCK_DIAG_BY_FAMILY, body))
        for kind, data, offset, length in _netlink_messages(sock, "sock_diag"):
            if (kind == SOCK_DIAG_BY_FAMILY and length >= 16 + DIAG_MSG_LEN
                    and word.unpack_from(data, offset + 84)[0] in wanted):
                msg = data[offset + 16 : offset + 16 + DIAG_MSG_LEN]
                found[_int(msg[68:72])] = _diag_socket(msg, family == _socket.AF_INET)
        return found
    finally:
        sock.close()


def _diag_socket(msg, ipv4):
    size = 4 if ipv4 else 16
    local, remote = msg[8 : 8 + size], msg[24 : 24 + size]
    return (
        ".".join(str(b) for b in local) if ipv4 else _ipv6_text(local),
        int.from_bytes(msg[4:6], "big"),
        ".".join(str(b) for b in remote) if ipv4 else _ipv6_text(remote),
        int.from_bytes(msg[6:8], "big"),
        TCP_STATES.get(f"{msg[1]:02X}", str(msg[1])),
        # wqueue is the unsent bytes, but a listener's backlog limit: /proc/net/tcp shows 0
        0 if msg[1] == 10 else _int(msg[60:64]),
        _int(msg[56:60]),  # rqueue: unread bytes, a listener's accept queue
    )


def _proc_net_tcp(pid, wanted):
    """sock_diag_tcp's table from ``pid``'s /proc/PID/net/tcp{,6} text (its namespace's)."""
    names = {str(inode) for inode in wanted}
    found = {}
    for name in ("tcp", "tcp6"):
        text = _read(f"/proc/{pid}/net/{name}") or ""
        found.update((int(inode), entry) for inode, entry in parse_proc_net_tcp(text, names).items())
    return found


def tcp_sockets(pids):
    """({pid: [socket tuple, ...] or None when its fds cannot be read}, how they were read).

    Each process's socket inodes come from /proc/PID/fd. The sockets themselves: in our own
    network namespace one sock_diag dump per address family for all the processes at once; a
    process in another namespace (or anywhere, when netlink is refused) from its
    /proc/PID/net/tcp{,6}, read once per namespace. ``how`` is "netlink", "proc" or both, with
    netlink's error when it was refused.
    """
    import _socket

    inodes = {pid: socket_inodes(pid) for pid in pids}
    namespaces = {}  # netns -> (a pid in it, wanted inodes)
    for pid, found in inodes.items():
        if found:
            namespaces.setdefault(_netns(pid), (pid, set()))[1].update(found)
    own, table, how, refused = _netns("self"), {}, [], None
    for netns, (pid, wanted) in namespaces.items():
        got = None
        if netns is not None and netns == own and refused is None:
            try:
                got = sock_diag_tcp(_socket.AF_INET, wanted)
                got.update(sock_diag_tcp(_socket.AF_INET6, wanted))
                how.append("netlink")
            except OSError as exc:
                refused, got = f"netlink refused ({exc})", None
                how.append(refused)
        if got is None:
            got = _proc_net_tcp(pid, wanted)
            how.append("proc")
        table.update(got)  # socket inodes are unique on the host, across namespaces
    out = {}
    for pid, found in inodes.items():
        out[pid] = None if found is None else [table[inode] for inode in found if inode in table]
    return out, ", ".join(dict.fromkeys(how)) or None


def connection_list(sockets, addr_to_if):
    """Documented connections from tcp_sockets' tuples, with the interface each one's local
    address belongs to; established ones first, at most MAX_CONNECTIONS."""
    out = []
    for lip, lport, rip, rport, state, txq, rxq in sockets:
        if lip.startswith("127.") or lip == "::1":
            interface = "lo"
        else:
            interface = addr_to_if.get(lip)
        out.append(
            {
                "local": _endpoint(lip, lport),
                "remote": _endpoint(rip, rport),
                "state": state,
                "interface": interface,
                "tx_queue": txq,
                "rx_queue": rxq,
            }
        )
    out.sort(key=lambda c: (c["state"] != "ESTABLISHED", c["local"], c["remote"]))
    return out[:MAX_CONNECTIONS]


# ---------------------------------------------------------------- framing


def frame_lines(node, doc):
    """The framed lines of ``doc``; the controller's slurmdiag/transport/framing.py decodes them."""
    import binascii
    import zlib

    data = dumps(doc).encode()
    payload = binascii.b2a_base64(zlib.compress(data, 6), newline=False).decode("ascii")
    crc = "{:08x}".format(zlib.crc32(payload.encode("ascii")) & 0xFFFFFFFF)
    chunks = [payload[i : i + CHUNK_CHARS] for i in range(0, len(payload), CHUNK_CHARS)] or [""]
    total = len(chunks)
    return [f"@SDG1 {node} {seq} {total} {crc} {chunk}\n" for seq, chunk in enumerate(chunks)]


def _write_line(line):
    data = line.encode("ascii", "replace")
    while data:  # one write for lines this short on a pipe; the loop covers odd outputs
        written = os.write(1, data)
        data = data[written:]


class Emitter:
    """Writes the document exactly once: from the main code, or from a signal handler.

    A handler runs on the main thread between any two bytecodes, also in the middle of an emit.
    Whoever takes the one token first writes (list.pop() is atomic); the others leave it be.
    """

    def __init__(self, node):
        self.node = node
        self.token = [True]
        self.done = False

    def claim(self):
        """True once: the caller is the one to write."""
        try:
            return self.token.pop()
        except IndexError:
            return False

    def write(self, doc):
        try:
            lines = frame_lines(self.node, doc)
        except (RuntimeError, ValueError, TypeError):  # a value that does not encode
            keep = (
                "format",
                "node",
                "hostname",
                "python",
                "collector_version",
                "started",
                "duration_s",
                "discovery",
                "tools",
            )
            minimal = {k: doc.get(k) for k in keep}
            minimal["errors"] = list(doc.get("errors") or []) + [
                "document could not be encoded while collection was still running"
            ]
            minimal["processes"] = []
            lines = frame_lines(self.node, minimal)
        for line in lines:
            _write_line(line)
        self.done = True


# ---------------------------------------------------------------- main


def _arg_list(value):
    if isinstance(value, str):
        return [value]
    return [v for v in value or () if isinstance(v, str)]


FR_DUMP_MAX_BYTES = 16 * 1024 * 1024


def _proc_uid(pid):
    text = _read(f"/proc/{pid}/status") or ""
    for line in text.splitlines():
        if line.startswith("Uid:"):
            fields = line.split()
            if len(fields) > 1 and _ascii_digits(fields[1]):
                return int(fields[1])
    return None


S_IFMT, S_IFREG, S_IFDIR, S_IFLNK = 0o170000, 0o100000, 0o040000, 0o120000


def _lstat_type(path):
    """The S_IFMT bits of ``path`` itself (a symlink is a symlink), None if it is not there."""
    try:
        return os.lstat(path).st_mode & S_IFMT
    except (OSError, ValueError):
        return None


def private_dir_problem(path, uid):
    """None when ``path`` is a real directory owned by ``uid`` with mode 0700, else why not.

    Shared places (/tmp) are hostile: a neighbour may plant a directory or a symlink there.
    """
    try:
        st = os.lstat(path)
    except (OSError, ValueError) as exc:
        return f"cannot stat {path}: {getattr(exc, 'strerror', None) or exc}"
    kind = st.st_mode & S_IFMT
    if kind != S_IFDIR:
        return f"{path} is not a directory" + (" (a symlink)" if kind == S_IFLNK else "")
    if st.st_uid != uid:
        return f"{path} is owned by uid {st.st_uid}, not by the rank's user (uid {uid})"
    if st.st_mode & 0o7777 != 0o700:
        return f"{path} has mode {st.st_mode & 0o7777:04o}, not 0700"
    return None


def read_owned(path, uid, limit):
    """(at most ``limit`` bytes, None) of a regular file owned by ``uid``, else (None, why not).

    Opened with O_NOFOLLOW|O_NONBLOCK (a symlink or a FIFO a job planted is never followed nor
    waited on) and checked with fstat on the open file, so nothing can be swapped in between.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError) as exc:
        if _lstat_type(path) == S_IFLNK:
            return None, f"{path} is a symlink: not followed, ignored"
        return None, f"cannot open {path}: {getattr(exc, 'strerror', None) or exc}"
    try:
        st = os.fstat(fd)
        if st.st_mode & S_IFMT != S_IFREG:
            return None, f"{path} is not a regular file: ignored"
        if st.st_uid != uid:
            return None, (f"{path} is owned by uid {st.st_uid}, not by the rank's user "
                          f"(uid {uid}): ignored")
        chunks = []
        left = limit
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks), None
    except OSError as exc:
        return None, f"cannot read {path}: {exc.strerror}"
    finally:
        os.close(fd)


def fr_request(pid, env):
    """Ask a process hooked by slurmdiag.torch for a Flight Recorder dump (a trigger file).

    Only in the rank's user's private directory (see private_dir_problem); the trigger is a new
    file (O_CREAT|O_EXCL|O_NOFOLLOW), so nothing is ever truncated through a planted symlink.
    """
    uid = _proc_uid(pid)
    base = env.get("SLURMDIAG_FR_DIR") or f"/tmp/slurmdiag-fr-{uid}"
    registration = f"{base}/{pid}.json"
    dump = f"{base}/{pid}.fr.json"
    if uid is None or _lstat_type(registration) is None:
        return None
    problem = private_dir_problem(base, uid)
    if problem is None and _lstat_type(registration) != S_IFREG:
        problem = f"{registration} is not a regular file"
    if problem is not None:
        return {"dump": dump, "uid": uid, "error": f"not asking for a dump: {problem}"}
    try:
        os.unlink(dump)  # an old dump must not pass for the one we ask for now
    except OSError:
        pass
    trigger = f"{base}/{pid}.trigger"
    try:
        os.close(os.open(trigger, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600))
    except FileExistsError:
        if _lstat_type(trigger) != S_IFREG:  # a pending trigger of an earlier attach is fine
            return {"dump": dump, "uid": uid, "error": f"{trigger} is not a regular file"}
    except OSError as exc:
        return {"dump": dump, "uid": uid, "error": f"cannot create trigger {trigger}: {exc}"}
    return {"dump": dump, "uid": uid, "error": None}


def _torch_dump_file(env, rank, uid):
    """A dump PyTorch wrote itself (NCCL watchdog timeout) under TORCH_FR_DUMP_TEMP_FILE.

    (path, bytes) of the first candidate that is a regular file of the rank's user (shared /tmp:
    /tmp/nccl_trace_rank_N may be anyone's), else (None, the reasons candidates were ignored).
    """
    if rank is None or uid is None:
        return None, []
    candidates = [f"{env[name]}{rank}" for name in ("TORCH_FR_DUMP_TEMP_FILE",
                                                    "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
                  if env.get(name)]
    notes = []
    for path in candidates + [f"/tmp/nccl_trace_rank_{rank}"]:
        if _lstat_type(path) is None:
            continue
        data, why = read_owned(path, uid, FR_DUMP_MAX_BYTES)
        if why is None:
            return path, data
        notes.append(why)
    return None, notes


def fr_collect(requests, entries_by_pid, envs, clock, wait_s):
    """Wait (bounded) for requested dumps; attach each to its rank entry, raw text or base64."""
    import binascii

    until = min(time.monotonic() + wait_s, clock.deadline - FINISH_RESERVE_S - 0.3)
    pending = {pid: req for pid, req in requests.items() if req and not req["error"]}
    while pending and time.monotonic() < until:
        for pid in [p for p, req in pending.items() if _lstat_type(req["dump"]) is not None]:
            del pending[pid]
        if pending:
            pump_until(lambda: False, time.monotonic() + 0.1)  # nvidia-smi's output meanwhile
    for pid, entry in entries_by_pid.items():
        req = requests.get(pid)
        result = None
        if req is not None and req["error"]:
            result = {"status": "error", "message": req["error"]}
        elif req is not None and pid not in pending:
            data, why = read_owned(req["dump"], req["uid"], FR_DUMP_MAX_BYTES)
            if why is None:
                result = {"status": "ok", "format": "json", "source": req["dump"],
                          "text": data.decode("utf-8", "replace")}
            else:
                result = {"status": "refused", "message": why}
        elif req is not None:
            result = {"status": "timeout",
                      "message": "hooked process did not write its dump in time"}
        else:
            path, found = _torch_dump_file(envs[pid], entry["rank"], _proc_uid(pid))
            if path:
                result = {"status": "ok", "format": "pickle", "source": path,
                          "base64": binascii.b2a_base64(found, newline=False).decode()}
            elif found:
                result = {"status": "refused", "message": "; ".join(found)}
            else:
                result = {"status": "not_hooked",
                          "message": "no slurmdiag.torch hook and no PyTorch dump file"}
        entry["flight_recorder"] = result


def _enter_phase(status, phase):
    """Record how long the previous phase took (doc["timings"]), then start ``phase``."""
    now = time.monotonic()
    timings = status.setdefault("timings", {})
    if "since" in status:
        timings[status["phase"]] = round(now - status["since"], 3)
    status["phase"], status["since"] = phase, now


def side_work(nvidia_smi, clock, found):
    """Task: fills found["gpu"], then found["nics"]; a failure is a message, never lost stacks."""
    try:
        found["gpu"] = yield from collect_gpus(nvidia_smi, clock)
    except Exception as exc:  # noqa: BLE001 - GPUs must not cost the stacks
        found["gpu"] = {"status": "error", "message": f"collector bug: {exc!r}"}
    try:
        found["nics"] = yield from collect_nics(clock)
    except Exception as exc:  # noqa: BLE001 - nor NICs
        found["nics"] = {"interfaces": [], "ib_ports": [], "message": f"collector bug: {exc!r}"}


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


def start_strace(ranks, strace, strace_s, clock, errors):
    """Start ``strace -c`` on every rank for ``strace_s`` s (shortened to fit the deadline) as
    background tasks; (ranks, tasks or None, message) for finish_strace."""
    window = strace_s
    left = clock.left() - 0.6  # attach, SIGINT, table
    message = None
    if not strace:
        window, message = 0.0, "strace not found"
    elif left < min(0.5, strace_s):
        window, message = 0.0, "skipped: deadline too close"
    elif left < strace_s:
        window = round(left, 2)
        message = f"window shortened from {strace_s:.1f} s to {window:.1f} s: deadline"
    if message:
        errors.append("strace " + message)
    if window <= 0:
        return list(ranks), None, message
    return list(ranks), [Task(trace_syscalls(strace, e["pid"], window, clock)) for e in ranks], message


def finish_strace(ranks, tasks, message):
    """Wait for start_strace's tasks; each rank's ``strace`` result."""
    if tasks is None:
        for entry in ranks:
            entry["strace"] = {"status": "skipped", "message": message, "window_s": 0.0, "text": ""}
        return
    pump_until(lambda: all(task.done for task in tasks))
    for entry, task in zip(ranks, tasks):
        result = task.result
        if isinstance(result, Exception) or result is None:
            result = {
                "status": "error",
                "message": f"collector bug: {result!r}",
                "window_s": 0.0,
                "text": "",
            }
        if message and result["status"] == "ok":
            result["message"] = message
        entry["strace"] = result


def collect(args, clock, doc, status):
    """Fill ``doc`` in place (so that the watchdog can emit a partial one)."""
    errors = doc["errors"]
    node = doc["node"]
    job_id = str(args.get("job_id") or "")
    samples = max(0, int(args.get("samples", 3)))
    interval = max(0.0, float(args.get("interval", 1.0)))
    native = bool(args.get("native", False))
    strace_s = max(0.0, float(args.get("strace_s", 2.0)))
    concurrency = max(1, int(args.get("concurrency", 8)))
    exclude = {int(p) for p in args.get("exclude_pids") or () if _ascii_digits(str(p))}
    if not job_id:
        errors.append("no job_id given")
        return

    tools = doc["tools"]
    tools["py-spy"] = find_tool("py-spy", _arg_list(args.get("pyspy")))
    tools["strace"] = find_tool("strace", _arg_list(args.get("strace")))
    tools["nvidia-smi"] = find_tool("nvidia-smi", _arg_list(args.get("nvidia_smi")))

    _enter_phase(status, "discovery")
    listing = None
    # "listpids" skips the /proc walks (tests, and sites whose stepd titles are not standard);
    # "walk" skips the sibling walk (tests).
    own_step = None
    own_env = _environ()
    if (own_env.get("SLURM_JOB_ID") or own_env.get("SLURM_JOBID")) == job_id:
        own_step = own_env.get("SLURM_STEP_ID") or own_env.get("SLURM_STEPID")
    walked = None
    how = args.get("discovery", "auto")
    if how == "auto":
        walked = sibling_stepd_descendants(job_id, node, own_step)
    if how in ("auto", "walk") and walked is None:
        walked = stepd_descendants(job_id, node, own_step)
    scontrol = find_tool("scontrol", []) if walked is None else None
    if scontrol:
        # No slurmstepd of the job visible here (another PID namespace, hidepid): ask Slurm.
        listing = Task(tool_run([scontrol, "listpids", job_id, node], min(5.0, clock.left())))
    # GPUs and NICs need no ptrace: a task gathers them on the side while scontrol runs and the
    # stacks are sampled.
    side_found = {}
    side = Task(side_work(tools["nvidia-smi"], clock, side_found))
    if listing is not None:
        pump_until(lambda: listing.done)
        if isinstance(listing.result, Exception):
            raise listing.result
    procs, method = discover(job_id, node, listing and listing.result, exclude, errors, walked)
    classify(procs)
    doc["discovery"] = method
    tick = float(os.sysconf("SC_CLK_TCK"))
    page_kb = os.sysconf("SC_PAGE_SIZE") // 1024
    kept = [p for p in procs.values() if p["role"] is not None]
    order = {"rank": 0, "dataloader_worker": 1, "child": 1, "agent": 2}
    kept.sort(
        key=lambda p: (
            order[p["role"]],
            _as_int(p["global_rank"]) is None,
            _as_int(p["global_rank"]) or 0,
            p["pid"],
        )
    )
    entries = []
    window_start = {}  # pid -> (monotonic time, CPU ticks, starttime against pid reuse)
    unsampled = set()
    for info in kept:
        env = info["env"]
        source = procs[info["rank_pid"]] if info["rank_pid"] else info
        role = info["role"]
        identity = role != "agent"  # an agent's SLURM_PROCID numbers nodes, not ranks
        entry = {
            "pid": info["pid"],
            "ppid": info["stat"]["ppid"],
            "role": role,
            "rank_pid": info["rank_pid"],
            "rank": _as_int(source["global_rank"]) if identity else None,
            "local_rank": _as_int(_first(source["env"], LOCAL_RANK_VARS)) if identity else None,
            "world_size": _as_int(_first(source["env"], WORLD_SIZE_VARS)) if identity else None,
            "launcher": info.get("agent_kind") if role == "agent" else _launcher(source, procs),
            "step_id": info["step_id"],
            "cmdline": info["cmdline"],
            "comm": info["stat"]["comm"],
            "state": info["stat"]["state"],
            "wchan": None,
            "num_threads": info["stat"]["num_threads"],
            "rss_kb": info["stat"]["rss_pages"] * page_kb,
            "cpu_percent": None,
            "cpu_window_s": None,
            "env": allowed_env(env),
            "samples": [],
            "strace": None,
            "connections": [],
            "errors": [],
        }
        window_start[info["pid"]] = (
            time.monotonic(),
            info["stat"]["ticks"],
            info["stat"]["starttime"],
        )
        entries.append(entry)
        if role != "rank" and not _is_python(info):
            unsampled.add(info["pid"])
            entry["errors"].append("not a Python process: no stack samples")
    doc["processes"] = entries
    ranks = [e for e in entries if e["role"] == "rank"]
    workers = [
        e
        for e in entries
        if e["role"] in ("dataloader_worker", "child") and e["pid"] not in unsampled
    ]
    if not ranks:
        errors.append(f"no rank processes of job {job_id} found on {node}")
        # A launcher with no ranks yet (torchrun waiting in its rendezvous) is worth one stack.
        workers += [e for e in entries if e["role"] == "agent" and e["pid"] not in unsampled]

    # Flight Recorder: ask hooked ranks first, so they dump while the stacks are sampled.
    fr_requests = {}
    rank_envs = {info["pid"]: info["env"] for info in kept if info["role"] == "rank"}
    if args.get("flight_recorder") and ranks:
        for entry in ranks:
            fr_requests[entry["pid"]] = fr_request(entry["pid"], rank_envs[entry["pid"]])

    # Stack samples: K rounds `interval` apart; workers only in the first round. The ranks'
    # TCP sockets are read while the first round's dumps run. strace and a blocking py-spy
    # cannot trace one process at once: strace traces the ranks from the end of the first round
    # on, and the later rounds read them with --nonblocking meanwhile (bench/README.md measures
    # the choices: "strace_overlap" "first" (default), "start" (strace from the start, every
    # round nonblocking), "off" (strace after sampling)); with --native every round needs the
    # suspend, so strace comes after them.
    _enter_phase(status, "py-spy sampling")
    pyspy = tools["py-spy"]
    sockets = {}

    def read_sockets():
        # Of every process: mp.spawn's children become ranks only after the first round.
        try:
            sockets["by_pid"], doc["sockets_read_with"] = tcp_sockets([e["pid"] for e in entries])
        except Exception as exc:  # noqa: BLE001 - sockets must not cost the stacks
            sockets["by_pid"] = {}
            errors.append(f"sockets not read: collector bug: {exc!r}")

    overlap = args.get("strace_overlap", "first") if strace_s > 0 and not native else "off"
    tracing = None  # (ranks traced, their strace tasks, the window's message) once started
    if not pyspy and samples and ranks:
        errors.append("py-spy not found: no stacks (install py-spy or pass its path)")
    elif ranks or workers:
        first_round_at = time.monotonic()
        round_cost = 0.3
        done = 0
        for k in range(samples):
            due = first_round_at + k * interval
            if due + round_cost > clock.deadline - FINISH_RESERVE_S:
                errors.append(
                    f"skipped samples {k + 1}-{samples} of {samples}: they would end after "
                    f"deadline_s {clock.deadline - clock.t0:.1f}"
                )
                break
            pump_until(lambda: False, due)  # the side task's and strace's tools run meanwhile
            if k == 0 and overlap == "start" and ranks:
                tracing = start_strace(ranks, tools["strace"], strace_s, clock, errors)
            targets = ranks + (workers if k == 0 else [])
            traced = set()
            if tracing and tracing[1]:
                traced = {e["pid"] for e, t in zip(tracing[0], tracing[1]) if not t.done}
            began = time.monotonic()
            results = run_tasks(
                # the first round also reads the ranks' process groups (--locals)
                (dump_stack(pyspy, e["pid"], native, clock, e["pid"] in traced,
                            k == 0 and e["role"] == "rank") for e in targets),
                concurrency,
                read_sockets if k == 0 else None,
            )
            round_cost = max(round_cost * 0.5, time.monotonic() - began)
            for entry, result in zip(targets, results):
                if isinstance(result, Exception):
                    result = {
                        "t": round(time.time() - clock.started, 3),
                        "threads": None,
                        "error": f"collector bug: {result!r}",
                    }
                entry["samples"].append(result)
                if entry["role"] == "child" and _in_dataloader_loop(result["threads"]):
                    entry["role"] = "dataloader_worker"  # a fork: same cmdline as its rank
            done += 1
            if k == 0 and workers and adopt_spawned_ranks(entries, pyspy, clock, concurrency):
                # mp.spawn: the "rank" was the launching script, its "workers" the ranks
                ranks = [e for e in entries if e["role"] == "rank"]
                rank_envs = {e["pid"]: procs[e["pid"]]["env"] for e in ranks}
                if args.get("flight_recorder"):
                    for entry in ranks:
                        if entry["pid"] not in fr_requests:
                            fr_requests[entry["pid"]] = fr_request(entry["pid"], rank_envs[entry["pid"]])
            if k == 0 and overlap == "first" and ranks and tracing is None:
                tracing = start_strace(ranks, tools["strace"], strace_s, clock, errors)
        if done and ranks and all(s["threads"] is None for e in ranks for s in e["samples"]):
            errors.append("py-spy produced no stack for any rank")
    if "by_pid" not in sockets:
        read_sockets()
    if tracing is None and strace_s > 0 and ranks:
        tracing = start_strace(ranks, tools["strace"], strace_s, clock, errors)

    # Process state and CPU over the sampling window.
    _enter_phase(status, "process state")
    for entry in entries:
        stat = _untraced_stat(entry["pid"]) if tracing is not None else read_stat(entry["pid"])
        begun, ticks, starttime = window_start[entry["pid"]]
        if stat is None or stat["starttime"] != starttime:
            entry["errors"].append("process exited during collection")
            continue
        window = time.monotonic() - begun
        entry["state"] = stat["state"]
        entry["num_threads"] = stat["num_threads"]
        entry["rss_kb"] = stat["rss_pages"] * page_kb
        entry["cpu_window_s"] = round(window, 3)
        if window > 0.05:
            entry["cpu_percent"] = round((stat["ticks"] - ticks) / tick / window * 100.0, 1)
        wchan = _read("/proc/{}/wchan".format(entry["pid"]), one_show=True)
        entry["wchan"] = wchan.strip() if wchan and wchan.strip() not in ("", "0") else None

    _enter_phase(status, "strace")
    if tracing is not None:
        finish_strace(*tracing)

    if args.get("flight_recorder") and ranks:
        _enter_phase(status, "flight recorder")
        fr_collect(
            fr_requests,
            {e["pid"]: e for e in ranks},
            rank_envs,
            clock,
            float(args.get("fr_wait_s", 10.0)),
        )

    _enter_phase(status, "gpu and nic collection")
    pump_until(lambda: side.done, clock.deadline - FINISH_RESERVE_S)
    if not side.done:
        errors.append("GPU/NIC collection did not finish before the deadline")
    doc["gpu"] = side_found.get("gpu") or {
        "status": "error",
        "message": "nvidia-smi did not finish before the deadline",
        "query_gpu": None,
        "compute_apps": None,
        "qx": None,
        "xid_lines": [],
    }
    doc["nics"] = side_found.get("nics") or {
        "interfaces": [],
        "ib_ports": [],
        "message": "not collected before the deadline",
    }

    _enter_phase(status, "sockets")
    addr_to_if = {}
    for item in doc["nics"].get("interfaces") or ():
        for cidr in item.get("addresses") or ():
            addr_to_if.setdefault(cidr.split("/")[0], item["name"])
    for entry in entries:
        if entry["role"] in ("rank", "agent") and entry["pid"] in sockets["by_pid"]:
            found = sockets["by_pid"][entry["pid"]]
            if found is None:
                entry["errors"].append("cannot read /proc/{}/fd".format(entry["pid"]))
            else:
                entry["connections"] = connection_list(found, addr_to_if)

    _enter_phase(status, "done")
    doc["timings"] = status["timings"]


def main(argv):
    clock = Clock(25.0)
    pid = os.getpid()
    args, problem = {}, None
    try:
        args = loads(argv[1]) if len(argv) > 1 else {}
        if not isinstance(args, dict):
            args, problem = {}, "arguments are not a JSON object"
    except ValueError as exc:
        problem = f"arguments are not JSON: {exc}"
    try:
        deadline_s = float(args.get("deadline_s", 25.0))
    except (TypeError, ValueError):
        deadline_s = 25.0
    clock.deadline = clock.t0 + max(deadline_s, 1.0)
    node = str(
        args.get("node") or _environ().get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
    )
    node = "_".join(node.split()) or "unknown"
    _write_line(f"@SDG1-HELLO {node} {pid}\n")

    doc = {
        "format": FORMAT,
        "node": node,
        "hostname": os.uname().nodename,
        "python": "{}.{}.{}".format(*sys.version_info[:3]),
        # Yama's ptrace policy decides whether py-spy and strace may attach at all.
        "ptrace_scope": (_read("/proc/sys/kernel/yama/ptrace_scope") or "").strip() or None,
        "collector_version": COLLECTOR_VERSION,
        "started": clock.started,
        "duration_s": None,
        "cpu_s": None,
        "discovery": None,
        "tools": {"py-spy": None, "strace": None, "nvidia-smi": None},
        "errors": [problem] if problem else [],
        "processes": [],
        "gpu": None,
        "nics": None,
    }
    emitter = Emitter(node)
    status = {"phase": "start", "since": time.monotonic()}

    def emit_partial(reason):
        """Signal handler work: end the tools, write what exists, exit."""
        if not emitter.claim():
            if emitter.done:
                os._exit(0)
            return  # the main code is writing the document right now: let it finish
        doc["errors"].append("{} during {}; document is partial".format(reason, status["phase"]))
        doc["duration_s"] = round(clock.elapsed(), 3)
        _kill_live_tools()
        emitter.write(doc)
        os._exit(0)

    _signal.signal(_signal.SIGALRM, lambda signum, frame: emit_partial("deadline reached"))
    for sig in (_signal.SIGTERM, _signal.SIGHUP, _signal.SIGUSR1):
        _signal.signal(sig, lambda signum, frame: emit_partial(f"signal {signum} received"))
    # The watchdog: SIGALRM shortly before the deadline if the document is not out by then.
    margin = clock.deadline - WATCHDOG_MARGIN_S - time.monotonic()
    _signal.setitimer(_signal.ITIMER_REAL, max(margin, 0.001))
    # A signal handler only runs when the main thread returns to Python: a read of
    # /proc/PID/environ of a process stuck in the kernel (dead NFS mount, "ps hangs") or a
    # stuck NIC driver can hold it past the deadline. A backup thread (builtin _thread: no
    # import cost) writes the partial document then.
    import _thread

    def backup_watchdog():
        time.sleep(max(margin, 0.001) + WATCHDOG_MARGIN_S / 2)
        emit_partial("deadline reached (collector blocked in the kernel)")

    _thread.start_new_thread(backup_watchdog, ())

    try:
        collect(args, clock, doc, status)
    except Exception as exc:  # noqa: BLE001 - the document is the only way out: report, never crash
        import traceback

        doc["errors"].append(
            "collector failed in {}: {}".format(
                status["phase"], "".join(traceback.format_exception_only(type(exc), exc)).strip()
            )
        )
    _end_live_tools(0.2)  # normally none; a late nvidia-smi, or one left by a failure
    doc["duration_s"] = round(clock.elapsed(), 3)
    # Since this process started (exec and interpreter start-up included); not the tools'.
    doc["cpu_s"] = round(time.process_time(), 4)
    if emitter.claim():
        _signal.setitimer(_signal.ITIMER_REAL, 0)
        emitter.write(doc)
    return 0


if __name__ == "__main__":
    os._exit(main(sys.argv))  # nothing left to flush: frames go out with os.write
