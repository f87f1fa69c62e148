"""A FUSE file system that stops answering: the scenarios' stand-in for a hung network file
system (an NFS server gone, a Lustre client wedged).

    python _stalled_mount.py MOUNTPOINT JOB_ID_FILE --stall-ranks 2,3 --from-step 3
    python _stalled_mount.py MOUNTPOINT JOB_ID_FILE --delay-s 0.7     # slow, not hung

Mounted by tests/scenarios/launch.py before it submits a scenario whose truth has
"stalled_mount", outside the job (the site's storage, not the job's). Every name in its root is
a 4 KiB file of zeros read past the page cache (direct I/O), so each read is a request to this
process. A read of ``shard-R-S.bin`` with R among the stalled ranks and S at or after the step is
never answered: the reader waits in the kernel (request_wait_answer; in state D once anything
interrupts it, a signal or ptrace), as on a hard NFS mount whose server is gone. Interrupts are
not answered either.

It ends itself, closing the connection (any reader still waiting gets an error) and detaching
the mount, once the job in JOB_ID_FILE completes or leaves squeue, or after LIFETIME_S: a
read it took and never answered holds its reader in the kernel even against SIGKILL (fuse's
request_wait_answer), so the job could not end before it does, as on a real hung mount. Speaks the
kernel's FUSE protocol on /dev/fuse directly (include/uapi/linux/fuse.h, 7.31): stdlib only, no
libfuse; Linux, root.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import os
import select
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

LIFETIME_S = 35 * 60  # the scenarios' sbatch --time is 30 minutes
SIZE = 4096
FUSE_ROOT_ID = 1
MS_NOSUID, MS_NODEV, MNT_DETACH = 2, 4, 2
FOPEN_DIRECT_IO = 1
S_IFDIR, S_IFREG = 0o040000, 0o100000
# opcodes
LOOKUP, FORGET, GETATTR, OPEN, READ, RELEASE, FLUSH, INIT = 1, 2, 3, 14, 15, 18, 25, 26
OPENDIR, RELEASEDIR, INTERRUPT, DESTROY, BATCH_FORGET = 27, 29, 36, 38, 42
NO_REPLY = (FORGET, INTERRUPT, BATCH_FORGET)

IN_HEADER = struct.Struct("<IIQQIIIHH")  # len, opcode, unique, nodeid, uid, gid, pid, extlen, pad
OUT_HEADER = struct.Struct("<IiQ")  # len, error, unique
ATTR = struct.Struct("<QQQQQQIIIIIIIIII")  # ino size blocks a/m/ctime, nsecs, mode nlink uid gid rdev blksize flags
INIT_OUT = struct.Struct("<IIIIHHIIHHI28x")  # 7.31's fields, padded to the 64 bytes of today's
READ_IN = struct.Struct("<QQII")  # fh, offset, size, read_flags


def attr(nodeid: int) -> bytes:
    if nodeid == FUSE_ROOT_ID:
        return ATTR.pack(nodeid, 0, 0, 0, 0, 0, 0, 0, 0, S_IFDIR | 0o755, 2, 0, 0, 0, SIZE, 0)
    return ATTR.pack(nodeid, SIZE, SIZE // 512, 0, 0, 0, 0, 0, 0, S_IFREG | 0o644, 1, 0, 0, 0,
                     SIZE, 0)


def stalled(name: str, ranks: set[int], from_step: int) -> bool:
    """shard-R-S.bin of a stalled rank R at step S >= from_step."""
    parts = name.removesuffix(".bin").split("-")
    if len(parts) != 3 or parts[0] != "shard" or not all(p.isdigit() for p in parts[1:]):
        return False
    return int(parts[1]) in ranks and int(parts[2]) >= from_step


class Server:
    def __init__(self, fd: int, ranks: set[int], from_step: int, delay_s: float = 0.0) -> None:
        self.fd, self.ranks, self.from_step, self.delay_s = fd, ranks, from_step, delay_s
        self.names: dict[int, str] = {}  # nodeid -> file name
        self.ids: dict[str, int] = {}
        self.due: list[tuple[float, int, bytes]] = []  # (when, unique, data): delayed reads

    def answer_due(self) -> float:
        """Answer the delayed reads whose time came; seconds until the next one (or 1)."""
        now = time.monotonic()
        for item in [d for d in self.due if d[0] <= now]:
            self.due.remove(item)
            self.reply(item[1], body=item[2])
        return min([d[0] - now for d in self.due] + [1.0])

    def reply(self, unique: int, error: int = 0, body: bytes = b"") -> None:
        try:
            os.write(self.fd, OUT_HEADER.pack(OUT_HEADER.size + len(body), -error, unique) + body)
        except OSError as exc:
            if exc.errno != errno.ENOENT:  # the request was interrupted meanwhile
                raise

    def handle(self, request: bytes) -> None:
        _, opcode, unique, nodeid, *_ = IN_HEADER.unpack_from(request)
        body = request[IN_HEADER.size:]
        if opcode in NO_REPLY:
            return
        if opcode == INIT:
            self.reply(unique, body=INIT_OUT.pack(7, 31, 0, 0, 16, 12, 65536, 1, 16, 0, 0))
        elif opcode == LOOKUP and nodeid == FUSE_ROOT_ID:
            name = body.split(b"\0", 1)[0].decode()
            node = self.ids.setdefault(name, len(self.ids) + 2)
            self.names[node] = name
            self.reply(unique, body=struct.pack("<QQQQII", node, 0, 1, 1, 0, 0) + attr(node))
        elif opcode == GETATTR:
            self.reply(unique, body=struct.pack("<QII", 1, 0, 0) + attr(nodeid))
        elif opcode in (OPEN, OPENDIR):
            self.reply(unique, body=struct.pack("<QIi", nodeid, FOPEN_DIRECT_IO, 0))
        elif opcode == READ:
            _, offset, size, _ = READ_IN.unpack_from(body)
            if stalled(self.names.get(nodeid, ""), self.ranks, self.from_step):
                return  # never answered
            data = bytes(max(0, min(size, SIZE - offset)))
            if self.delay_s:  # a slow mount, not a hung one
                self.due.append((time.monotonic() + self.delay_s, unique, data))
            else:
                self.reply(unique, body=data)
        elif opcode in (RELEASE, RELEASEDIR, FLUSH, DESTROY):
            self.reply(unique)
        else:
            self.reply(unique, errno.ENOSYS if opcode != LOOKUP else errno.ENOENT)


class Job:
    """The job this mount serves: the first id written to JOB_ID_FILE (a later run in the same
    directory writes another)."""

    def __init__(self, job_id_file: Path) -> None:
        self.file, self.id = job_id_file, ""

    def alive(self) -> bool:
        """True until the job is done or completing (before its id is written too). Completing
        ends the mount: a read this server took and never answered holds its process in the
        kernel, SIGKILL or not, until the connection closes, and the job with it."""
        if not self.id:
            if not self.file.exists():
                return True
            self.id = self.file.read_text().strip()
        done = subprocess.run(["squeue", "-h", "-j", self.id, "-o", "%T"], capture_output=True,
                              text=True, timeout=30, check=False)
        state = done.stdout.strip()
        return done.returncode == 0 and state not in ("", "COMPLETING")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mountpoint", type=Path)
    parser.add_argument("job_id_file", type=Path)
    parser.add_argument("--stall-ranks", default="")
    parser.add_argument("--from-step", type=int, default=0)
    parser.add_argument("--delay-s", type=float, default=0.0,
                        help="answer every other read this much later (a slow mount)")
    args = parser.parse_args()
    # killed (the harness, a test's clean-up): close and unmount all the same
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    ranks = {int(r) for r in args.stall_ranks.split(",") if r}
    args.mountpoint.mkdir(parents=True, exist_ok=True)
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open("/dev/fuse", os.O_RDWR)
    options = f"fd={fd},rootmode=40000,user_id=0,group_id=0".encode()
    if libc.mount(b"stalled", str(args.mountpoint).encode(), b"fuse", MS_NOSUID | MS_NODEV,
                  options) != 0:
        raise SystemExit(f"mount: {os.strerror(ctypes.get_errno())}")
    server = Server(fd, ranks, args.from_step, args.delay_s)
    started, checked = time.monotonic(), 0.0
    job = Job(args.job_id_file)
    try:
        while time.monotonic() - started < LIFETIME_S:
            if time.monotonic() - checked > 2:
                checked = time.monotonic()
                if not job.alive():
                    break
            if select.select([fd], [], [], max(0.0, server.answer_due()))[0]:
                try:
                    server.handle(os.read(fd, 1 << 17))
                except OSError as exc:
                    if exc.errno == errno.ENODEV:  # unmounted
                        break
                    if exc.errno not in (errno.ENOENT, errno.EINTR, errno.EAGAIN):
                        raise
    finally:
        os.close(fd)  # aborts the connection: a waiting reader gets an error
        libc.umount2(str(args.mountpoint).encode(), MNT_DETACH)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
