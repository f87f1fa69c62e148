"""The file locks (flock, POSIX record locks) the ranks hold and wait for, from /proc/locks.

A rank blocked in ``fcntl.flock``/``lockf`` (a FileLock around a dataset cache, a checkpoint
directory) waits for whoever holds that lock, maybe another rank that waits in a collective for
it: a deadlock across ranks the stacks alone blame on the wrong side. /proc/locks lists every
lock of the kernel, one line each, each waiter right after the lock it waits for, with the
lock's number::

    1: FLOCK  ADVISORY  WRITE 4242 fe:00:2147709 0 EOF
    1: -> FLOCK  ADVISORY  WRITE 4250 fe:00:2147709 0 EOF

A lock on a shared filesystem held on another node is not in this node's table: the analysis
joins the waiters' inode with the locks the other nodes' ranks hold. OFD locks carry no pid
(-1): not attributed. Stdlib only (the collector's rule), posix not os.
"""

import posix as os

from .procfs import _read

#: Locks kept per process: a rank holding hundreds (one per cached shard) needs only a few named.
MAX_LOCKS = 16


def _parse(line):
    """(number, waiting, kind, mode, pid, dev, inode) of one /proc/locks line, or None."""
    number, _, rest = line.partition(":")
    fields = rest.split()
    waiting = bool(fields) and fields[0] == "->"
    if waiting:
        fields = fields[1:]
    if len(fields) < 5:
        return None
    try:
        pid = int(fields[3])
        dev, _, inode = fields[4].rpartition(":")
        return number.strip(), waiting, fields[0], fields[2], pid, dev, int(inode)
    except ValueError:
        return None


def read_in_background():
    """Start reading /proc/locks on a thread; a list that gets its text (None: unreadable).

    Each read of /proc/locks takes the kernel's file-lock rwsem for writing, which waits for
    an RCU grace period: 10-25 ms of wall (no CPU) the first time in a process, measured here.
    Read while the ranks are found and sampled, it is off the node's critical path (a hang's
    locks do not change meanwhile)."""
    import _thread

    box = []  # type: list

    def reader():
        box.append(_read("/proc/locks"))

    try:
        _thread.start_new_thread(reader, ())
    except RuntimeError:
        box.append(_read("/proc/locks"))
    return box


def file_locks(pids, text=None):
    """{pid: [{"held", "kind", "mode", "dev", "inode", "holder_pid", "path"}]} of ``pids``'
    locks: ``held`` False for one a process waits for, with ``holder_pid`` the pid holding it
    when this node's table shows it (None otherwise, or when the holder has no pid). ``text``:
    /proc/locks' content (tests)."""
    if text is None:
        text = _read("/proc/locks")  # records: read to the end
        if text is None:
            return {}
    wanted = set(pids)
    holders = {}  # lock number -> pid
    found = {}  # type: dict
    for line in text.splitlines():
        parsed = _parse(line)
        if parsed is None:
            continue
        number, waiting, kind, mode, pid, dev, inode = parsed
        if not waiting:
            holders[number] = pid
        if pid not in wanted:
            continue
        held = holders.get(number)
        locks = found.setdefault(pid, [])
        if len(locks) < MAX_LOCKS:
            locks.append({"held": not waiting, "kind": kind, "mode": mode, "dev": dev,
                          "inode": inode,
                          "holder_pid": held if waiting and held is not None and held > 0
                          else None,
                          "path": None})
    for pid, locks in found.items():
        _name_files(pid, locks)
    return found


def _name_files(pid, locks):
    """The path of each lock's file, from the process's descriptor open on that inode: its
    inode from /proc/PID/fdinfo (Linux 5.14+; without it, no path), its path from the link.
    Neither touches the file's filesystem: a stat() of a file on a hung NFS mount would hang
    the collector with it."""
    inodes = {lock["inode"] for lock in locks}
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return
    paths = {}
    for fd in fds:
        info = _read(f"/proc/{pid}/fdinfo/{fd}") or ""
        try:
            inode = next((int(line[4:]) for line in info.splitlines()
                          if line.startswith("ino:")), None)
            if inode in inodes and inode not in paths:
                paths[inode] = os.readlink(f"/proc/{pid}/fd/{fd}")
        except (OSError, ValueError):
            continue
    for lock in locks:
        lock["path"] = paths.get(lock["inode"])
