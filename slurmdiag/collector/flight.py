"""PyTorch Flight Recorder: asking hooked ranks for a dump, and reading it back safely.

A dump is only read from a private directory owned by the rank's user, never through a symlink
and never past FR_DUMP_MAX_BYTES: a rank's files are the job's, not ours.
"""

import posix as os
import time

from .procfs import _ascii_digits, _read
from .tools import FINISH_RESERVE_S, pump_until

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
