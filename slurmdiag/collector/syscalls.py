"""The system call each thread of a process sits in, and what its file descriptor is.

What an engineer reads by hand (``cat /proc/PID/task/*/syscall``, ``ls -l /proc/PID/fd``): a
thread blocked in ``recvfrom(7, ...)`` where fd 7 is ``socket:[81234]`` waits for a peer on
that connection; one in ``write(12, ...)`` on ``pipe:[4411]`` for a reader of that pipe. py-spy
says which Python line a thread is on; this says which descriptor it waits on, so the analysis
can tell a connection that carries data (an upload) from the one a stuck thread waits on.

/proc/PID/task/TID/syscall is ``NR ARG0 ... ARG5 SP PC`` for a thread in a system call,
``running`` or ``-1 SP PC`` otherwise; reading it needs the same access as ptrace (as py-spy
does). Only calls whose first argument is a descriptor are kept. Stdlib only, posix not os.
"""

import posix as os
import sys

# System call numbers whose first argument is a file descriptor, per architecture (x86_64:
# arch/x86/entry/syscalls/syscall_64.tbl; aarch64 and other new ports: asm-generic/unistd.h).
FD_CALLS = {
    "x86_64": {
        0: "read", 1: "write", 17: "pread64", 18: "pwrite64", 19: "readv", 20: "writev",
        40: "sendfile", 42: "connect", 43: "accept", 44: "sendto", 45: "recvfrom",
        46: "sendmsg", 47: "recvmsg", 72: "fcntl", 73: "flock", 74: "fsync", 75: "fdatasync",
        288: "accept4", 295: "preadv", 296: "pwritev", 299: "recvmmsg", 307: "sendmmsg",
    },
    "aarch64": {
        25: "fcntl", 32: "flock", 63: "read", 64: "write", 65: "readv", 66: "writev",
        67: "pread64", 68: "pwrite64", 69: "preadv", 70: "pwritev", 71: "sendfile",
        82: "fsync", 83: "fdatasync", 202: "accept", 203: "connect", 206: "sendto",
        207: "recvfrom", 211: "sendmsg", 212: "recvmsg", 242: "accept4", 243: "recvmmsg",
        269: "sendmmsg",
    },
}
#: wait4, whose first argument is the pid waited for (subprocess's waitpid): which child a rank
#: waits on when it has several (a copy tool beside a metrics sidecar).
WAIT_CALLS = {"x86_64": {61: "wait4"}, "aarch64": {260: "wait4"}}
#: poll and ppoll, whose first argument is an array of (fd, events, revents) and second its
#: length: a TCPStore client waits for its reply so (store.wait, store.get), on the store's
#: connection; so does a socket read with a timeout. Read for the main thread only. The array
#: is read from the process's memory (/proc/PID/mem: the access ptrace and py-spy need too), at
#: most MAX_POLLED entries; the call's fd is the first socket polled.
POLL_CALLS = {"x86_64": {7: "poll", 271: "ppoll"}, "aarch64": {73: "ppoll"}}
#: restart_syscall: a poll with a timeout that a ptrace stop interrupted (py-spy's dump with
#: --locals, strace's attach) goes on in it, its arguments still in the registers. Read as a
#: poll when the thread's kernel wait is a poll's (wchan poll_schedule_timeout) and its first
#: arguments read as a pollfd array of a socket.
RESTART_CALLS = {"x86_64": {219: "restart_syscall"}, "aarch64": {128: "restart_syscall"}}
MAX_POLLED = 8
#: The event bits a pollfd asks for (POLLIN ... POLLMSG, POLLRDHUP): anything else is not one.
POLL_EVENTS = 0x27FF
#: Threads kept per process: a pool of a hundred readers needs a few named.
MAX_CALLS = 16


def parse_syscall(text, table):
    """(call name, fd) of one /proc/PID/task/TID/syscall text, or None: not in a system call,
    or in one without a descriptor as its first argument."""
    fields = (text or "").split()
    if len(fields) < 2 or not fields[0].isdigit():
        return None  # "running", "-1 sp pc", unreadable
    name = table.get(int(fields[0]))
    if name is None:
        return None
    try:
        value = int(fields[1], 16)
    except ValueError:
        return None
    if name == "wait4" and value >= 1 << 63:
        value -= 1 << 64  # -1: any child
    return name, value


def blocked_calls(pid, machine=None):
    """[{"tid", "call", "fd", "target"}] of ``pid``'s threads sitting in a system call on a
    descriptor (``target``: what /proc/PID/fd/FD links to: ``socket:[INODE]``, ``pipe:[INODE]``,
    a path), or in wait4 (``fd`` the pid waited for, -1 for any child; ``target``
    ``process:PID``), at most MAX_CALLS; [] on an architecture without a table or a process
    gone."""
    machine = machine or os.uname().machine
    table = FD_CALLS.get(machine)
    if table is None:
        return []
    table = {**table, **WAIT_CALLS.get(machine, {}), **POLL_CALLS.get(machine, {}),
             **RESTART_CALLS.get(machine, {})}
    try:
        tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
    except (OSError, ValueError):
        return []
    found = []
    for tid in tids:
        try:
            fd = os.open(f"/proc/{pid}/task/{tid}/syscall", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            text = os.read(fd, 512).decode("ascii", "replace")
        except OSError:
            continue
        finally:
            os.close(fd)
        call = parse_syscall(text, table)
        if call is None:
            continue
        if call[0] == "wait4":
            target = f"process:{call[1]}" if call[1] > 0 else None
        elif call[0] in ("poll", "ppoll", "restart_syscall"):
            if str(tid) != str(pid):
                continue  # the main thread's only: other threads' polls would crowd MAX_CALLS
            polled = (polled_socket(pid, call[1], text)
                      if call[0] != "restart_syscall" or _polls(pid, tid) else None)
            if polled is None:
                continue
            name = "poll" if call[0] == "restart_syscall" else call[0]
            call, target = (name, polled[0]), polled[1]
        else:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{call[1]}")
            except OSError:
                target = None
        found.append({"tid": int(tid), "call": call[0], "fd": call[1], "target": target})
        if target and target.startswith("/"):
            # where in the kernel a call on a file sleeps: a FUSE server's answer
            # (request_wait_answer), a page, a lock; the main thread's is /proc/PID/wchan
            wchan = _task_wchan(pid, tid)
            if wchan:
                found[-1]["wchan"] = wchan
        if len(found) >= MAX_CALLS:
            break
    return found


def _task_wchan(pid, tid):
    try:
        fd = os.open(f"/proc/{pid}/task/{tid}/wchan", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        text = os.read(fd, 128).decode("ascii", "replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)
    return text if text and text != "0" else None


# Does the thread sleep in a poll's kernel wait (a restarted poll's, or select's)?
def _polls(pid, tid):
    return "poll" in (_task_wchan(pid, tid) or "")


# (fd, its target) of the first socket in the pollfd array a thread polls, or None (no socket,
# or the array unreadable: the process gone, or no ptrace access).
def polled_socket(pid, address, text):
    fields = text.split()
    try:
        count = min(int(fields[2], 16), MAX_POLLED)
    except (IndexError, ValueError):
        return None
    if count <= 0 or address <= 0:
        return None
    try:
        mem = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.pread(mem, 8 * count, address)
    except (OSError, OverflowError):
        return None
    finally:
        os.close(mem)
    for i in range(len(data) // 8):
        fd = int.from_bytes(data[8 * i:8 * i + 4], sys.byteorder, signed=True)
        if fd < 0:
            continue  # an entry switched off (its events ignored)
        events = int.from_bytes(data[8 * i + 4:8 * i + 6], sys.byteorder)
        if not events or events & ~POLL_EVENTS:
            return None  # not a pollfd array (a restarted call of another kind)
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:"):
            return fd, target
    return None
