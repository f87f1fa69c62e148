"""Core files of crashed ranks: where to look, whose they are, and the crashing thread's stack.

Where: the job's working directory (``core_pattern`` ``core`` or ``core.%p``), the directory an
absolute ``core_pattern`` names, and ``coredumpctl`` where systemd-coredump keeps them. Whose:
the rank's environment is in the core (the process's stack holds it): ``SLURM_JOB_ID``,
``SLURM_PROCID``, ``RANK``. The stack: ``pystack core`` (Python and native frames), else gdb's
``bt``. A missing tool, an unreadable core or a slow one is a note, never a failure.
"""

from __future__ import annotations

import mmap
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from slurmdiag.safeio import decimal_int, open_job_file
from slurmdiag.snapshot import Frame
from slurmdiag.transport.run import Runner

PYSTACK_TIMEOUT_S = 60.0
MAX_CORES = 16
CORE_NAME = re.compile(r"^core(?:\.\d+)?$|^core\..+\.\d+$")
_ENV_KEYS = (b"SLURM_JOB_ID", b"SLURM_PROCID", b"RANK", b"SLURM_STEPID", b"SLURMD_NODENAME")


@dataclass(frozen=True)
class CoreStack:
    """One core file and what could be read from it."""

    path: str
    size: int
    rank: int | None = None
    job_id: str | None = None
    node: str | None = None
    pid: int | None = None
    reason: str | None = None  # "segmentation fault accessing address: 0x8"
    frames: tuple[Frame, ...] = ()  # innermost first
    tool: str | None = None  # pystack | gdb | None
    message: str | None = None  # why no stack


@dataclass(frozen=True)
class CoreSearch:
    cores: tuple[CoreStack, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)


def core_environment(fd: int) -> dict[str, str]:
    """The Slurm/torch identity variables found in an open core (its last occurrence of each)."""
    found: dict[str, str] = {}
    try:
        with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as data:
            for key in _ENV_KEYS:
                at = data.rfind(b"\0" + key + b"=")
                if at < 0:
                    continue
                end = data.find(b"\0", at + 1, at + 512)
                value = data[at + len(key) + 2: end if end > 0 else at + 512]
                found[key.decode()] = value.decode(errors="replace")
    except (OSError, ValueError):
        return {}
    return found


_PYSTACK_FRAME = re.compile(
    r'^\s+\((?P<kind>Python|C)\) File "(?P<file>[^"]*)", line (?P<line>\d+), in (?P<func>.+?)'
    r"(?: \((?P<lib>[^()]+)\))?\s*$"
)
_PYSTACK_THREAD = re.compile(r"^Traceback for thread (?P<tid>\d+)")
_PYSTACK_PID = re.compile(r"^pid: (?P<pid>\d+)")
_PYSTACK_REASON = re.compile(r"^The process died due (?:to )?an? (?P<reason>.+)$")


def parse_pystack_core(text: str) -> tuple[int | None, str | None, tuple[Frame, ...]]:
    """pid, death reason and the first thread's frames (innermost first) from ``pystack core``."""
    pid = reason = None
    frames: list[Frame] = []
    in_first = False
    for line in text.splitlines():
        if pid is None and (m := _PYSTACK_PID.match(line)):
            pid = int(m.group("pid"))
        if reason is None and (m := _PYSTACK_REASON.match(line)):
            reason = m.group("reason").strip()
        if _PYSTACK_THREAD.match(line):
            if in_first:
                break  # pystack prints the crashing thread first
            in_first = True
            continue
        if in_first and (m := _PYSTACK_FRAME.match(line)):
            native = m.group("kind") == "C"
            frames.append(Frame(function=m.group("func"), file=m.group("file"),
                                line=int(m.group("line")) or None, native=native,
                                module=m.group("lib") if native else None))
    return pid, reason, tuple(reversed(frames))


_GDB_FRAME = re.compile(
    r"^#\d+\s+(?:0x[0-9a-f]+ in )?(?P<func>\S+) \(.*\)(?: at (?P<file>[^:\s]+):(?P<line>\d+)| from (?P<lib>\S+))?\s*$"
)


def parse_gdb_backtrace(text: str) -> tuple[Frame, ...]:
    """``gdb -batch -ex bt`` frames of the last backtrace, innermost first (as gdb prints them)."""
    frames: list[Frame] = []
    for line in text.splitlines():
        m = _GDB_FRAME.match(line)
        if m:
            if line.startswith("#0 "):
                frames = []  # gdb shows the crashing frame on load, then the whole "bt"
            frames.append(Frame(function=m.group("func"), file=m.group("file") or m.group("lib") or "??",
                                line=int(m.group("line")) if m.group("line") else None, native=True))
    return tuple(frames)


def pystack_argv(core: str, native: bool = True) -> list[str]:
    argv = [_pystack_path() or "pystack", "core", core]
    return [*argv, "--native"] if native else argv


def gdb_argv(core: str, executable: str) -> list[str]:
    return ["gdb", "-batch", "-nx", "-ex", "bt", executable, core]


def _pystack_path() -> str | None:
    found = shutil.which("pystack")
    if found:
        return found
    import sys

    beside = Path(sys.executable).with_name("pystack")  # installed in this venv, not on PATH
    return str(beside) if beside.exists() else None


def core_pattern() -> str | None:
    try:
        return Path("/proc/sys/kernel/core_pattern").read_text().strip()
    except OSError:
        return None


def find_core_files(work_dir: str | None, pattern: str | None, extra_dirs: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """Candidate core files and notes on where they could not be looked for."""
    notes: list[str] = []
    directories: list[str] = [d for d in (work_dir, *extra_dirs) if d]
    if pattern:
        if pattern.startswith("|"):
            notes.append(f"core_pattern pipes cores to {pattern[1:].split()[0]}; "
                         "looked with coredumpctl where present")
        elif pattern.startswith("/"):
            directories.append(str(Path(pattern).parent))
    found: list[str] = []
    for directory in dict.fromkeys(directories):
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    if CORE_NAME.match(entry.name) and entry.is_file(follow_symlinks=False):
                        found.append(entry.path)
        except OSError as exc:
            notes.append(f"cannot list {directory} for core files: {exc.strerror}")
    return found[:MAX_CORES], notes


def read_core(path: str, job_id: str, runner: Runner, owner_uid: int | None) -> CoreStack | None:
    """The core's owner and stack; None when the core is not this job's.

    A core sits in a directory the job controls: it is read only under the job-named-path rule
    (``safeio``: a regular file of the job's user, no link), and only then handed to the tools."""
    try:
        fd = open_job_file(path, owner_uid=owner_uid)
    except OSError as exc:
        return CoreStack(path=path, size=0, message=f"not read: {exc.strerror or exc}")
    try:
        size = os.fstat(fd).st_size
        env = core_environment(fd)
        executable = _executable_of(fd)
    finally:
        os.close(fd)
    if env.get("SLURM_JOB_ID") and env["SLURM_JOB_ID"] != job_id.split("_")[0].split("+")[0]:
        return None
    rank_text = env.get("RANK") or env.get("SLURM_PROCID")
    base = CoreStack(path=path, size=size, rank=decimal_int(rank_text),
                     job_id=env.get("SLURM_JOB_ID"), node=env.get("SLURMD_NODENAME"))
    tool = _pystack_path()
    if tool:
        result = runner(pystack_argv(path), PYSTACK_TIMEOUT_S)
        if result.ok or result.stdout.strip():
            pid, reason, frames = parse_pystack_core(result.stdout)
            if frames:
                return CoreStack(**{**base.__dict__, "pid": pid, "reason": reason, "frames": frames,
                                    "tool": "pystack"})
        message = "pystack timed out" if result.timed_out else (
            f"pystack failed: {(result.stderr or result.stdout).strip()[-200:]}")
    else:
        message = "pystack is not installed (pip install 'slurmdiag[postmortem]')"
    if executable and shutil.which("gdb"):
        result = runner(gdb_argv(path, executable), PYSTACK_TIMEOUT_S)
        frames = parse_gdb_backtrace(result.stdout)
        if frames:
            return CoreStack(**{**base.__dict__, "frames": frames, "tool": "gdb",
                                "message": message})
    return CoreStack(**{**base.__dict__, "message": message})


def _executable_of(fd: int) -> str | None:
    """The executable a core names in its file mappings (the first absolute path to a binary)."""
    try:
        head = os.pread(fd, 1 << 20, 0)
    except OSError:
        return None
    for match in re.finditer(rb"(/[\w./+-]+/(?:python[\d.]*|[\w.+-]+))\0", head):
        candidate = match.group(1).decode(errors="replace")
        if os.access(candidate, os.X_OK) and not candidate.endswith(".so"):
            return candidate
    return None


def coredumpctl_argv(job_pids: tuple[int, ...] = ()) -> list[str]:
    return ["coredumpctl", "--no-pager", "list", *[str(p) for p in job_pids]]


def search_cores(work_dir: str | None, job_id: str, runner: Runner, extra_dirs: tuple[str, ...] = (),
                 owner_uid: int | None = None) -> CoreSearch:
    """Every core of this job that could be found, with stacks where a tool could read them."""
    paths, notes = find_core_files(work_dir, core_pattern(), extra_dirs)
    if shutil.which("coredumpctl"):
        result = runner(coredumpctl_argv(), 20.0)
        if result.ok and result.stdout.strip():
            notes.append("coredumpctl lists cores: read them with 'coredumpctl debug PID'")
    cores = []
    for path in paths:
        core = read_core(path, job_id, runner, owner_uid)
        if core is not None:
            cores.append(core)
    return CoreSearch(cores=tuple(cores), notes=tuple(notes))
