"""The system call each thread sits in and the descriptor it waits on (collector/syscalls.py),
read from real processes, and what the analysis makes of it: a rank stuck at exit while its
heartbeat keeps talking (`exit_heartbeat_stuck`, recorded by `make accuracy`) against a rank
whose upload at exit is slow but moving (`exit_slow_upload`); a rank waiting inside an asyncio
event loop (`asyncio_fetch_stuck`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from slurmdiag.analysis import diagnose
from slurmdiag.assemble import _blocked_calls
from slurmdiag.collector.main import read_blocked_calls
from slurmdiag.collector.sockets import tcp_sockets
from slurmdiag.collector.syscalls import (
    FD_CALLS,
    RESTART_CALLS,
    WAIT_CALLS,
    blocked_calls,
    parse_syscall,
)
from slurmdiag.snapshot import Rank, Snapshot

ACCURACY = Path(__file__).resolve().parent.parent / "fixtures" / "accuracy"

# A process whose main thread blocks in a TCP receive and whose "writer" thread blocks writing
# to a full pipe; it prints its pid, the socket's fd and the pipe's write end.
BLOCKED = r"""
import os, socket, threading
server = socket.socket(); server.bind(("127.0.0.1", 0)); server.listen(1)
conn = socket.create_connection(server.getsockname())
read_end, write_end = os.pipe()
threading.Thread(target=lambda: os.write(write_end, b"x" * 200000), name="writer").start()
print(os.getpid(), conn.fileno(), write_end, flush=True)
conn.recv(10)
"""


@pytest.fixture
def blocked() -> Iterator[tuple[int, int, int]]:
    proc = subprocess.Popen([sys.executable, "-c", BLOCKED], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    pid, sock, pipe = (int(x) for x in proc.stdout.readline().split())
    deadline = time.monotonic() + 10
    while len(blocked_calls(pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield pid, sock, pipe
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(os.uname().machine not in FD_CALLS, reason="no system call table here")
def test_each_blocked_thread_is_read_with_its_call_and_what_its_descriptor_is(
        blocked: tuple[int, int, int]) -> None:
    pid, sock, pipe = blocked
    calls = {c["fd"]: c for c in blocked_calls(pid)}
    # THEN the main thread (tid = pid) sits in recvfrom on its socket, the writer in write on
    # the pipe, each named by what /proc/PID/fd links to
    assert calls[sock]["tid"] == pid and calls[sock]["call"] == "recvfrom"
    assert calls[sock]["target"].startswith("socket:[")
    assert calls[pipe]["tid"] != pid and calls[pipe]["call"] == "write"
    assert calls[pipe]["target"].startswith("pipe:[")


# A process whose main thread polls a pipe and a socket (a TCPStore client's wait for its
# reply: poll on the store's connection) and whose "other" thread polls a pipe and another
# socket (a socket read with a timeout polls so too).
POLLING = r"""
import os, select, socket, threading
server = socket.socket(); server.bind(("127.0.0.1", 0)); server.listen(2)
conn = socket.create_connection(server.getsockname())
other = socket.create_connection(server.getsockname())
r1, _w1 = os.pipe(); r2, _w2 = os.pipe()
def polls():
    p = select.poll(); p.register(r1, select.POLLIN); p.register(other, select.POLLIN); p.poll()
threading.Thread(target=polls, name="other").start()
print(os.getpid(), conn.fileno(), flush=True)
p = select.poll(); p.register(r2, select.POLLIN); p.register(conn, select.POLLIN)
p.poll(600_000)
"""


# A process polling an array whose first entry is switched off (fd -1, events 0: the usual way
# to drop an entry) and whose second is a socket, through libc's poll.
POLL_SWITCHED_OFF = r"""
import ctypes, os, socket
server = socket.socket(); server.bind(("127.0.0.1", 0)); server.listen(1)
conn = socket.create_connection(server.getsockname())
class PollFd(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int), ("events", ctypes.c_short), ("revents", ctypes.c_short)]
fds = (PollFd * 2)(PollFd(-1, 0, 0), PollFd(conn.fileno(), 1, 0))
print(os.getpid(), conn.fileno(), flush=True)
ctypes.CDLL(None, use_errno=True).poll(fds, 2, -1)
"""


@contextmanager
def polling(program: str) -> Iterator[tuple[subprocess.Popen, int, int, list[dict]]]:
    """(the process, its pid, its socket's fd, its blocked calls once it sits in one)."""
    proc = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    try:
        pid, sock = (int(x) for x in proc.stdout.readline().split())
        deadline = time.monotonic() + 10
        calls = blocked_calls(pid)
        while not calls and time.monotonic() < deadline:
            time.sleep(0.05)
            calls = blocked_calls(pid)
        yield proc, pid, sock, calls
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(os.uname().machine not in FD_CALLS, reason="no system call table here")
def test_a_switched_off_entry_of_a_poll_is_passed_over() -> None:
    with polling(POLL_SWITCHED_OFF) as (_, _, sock, calls):
        # THEN the poll is read on the socket, the entry before it skipped
        assert [(c["call"], c["fd"]) for c in calls] == [("poll", sock)], calls


#: restart_syscall's number, as /proc/PID/syscall starts with it
RESTART = next((f"{n} " for n in RESTART_CALLS.get(os.uname().machine, {})), "?")


@pytest.mark.skipif(os.uname().machine not in RESTART_CALLS, reason="no system call table here")
def test_a_thread_polling_a_socket_names_the_socket() -> None:
    # GIVEN a process whose main thread polls a pipe and a socket, another thread a pipe and
    # another socket
    with polling(POLLING) as (proc, pid, sock, calls):
        # THEN the main thread is read in poll on the socket (the first socket of its array),
        # and the other thread's poll is not listed (the main thread's only: other threads'
        # polls would crowd out their calls that the rules read)
        assert [(c["tid"], c["call"], c["fd"]) for c in calls] == [(pid, "poll", sock)], calls
        assert calls[0]["target"].startswith("socket:[")
        # AND once a stop interrupted it (py-spy's dump with --locals, strace's attach), the
        # poll goes on in restart_syscall, and is still read as the poll on the socket
        os.kill(proc.pid, signal.SIGSTOP)
        os.kill(proc.pid, signal.SIGCONT)
        deadline = time.monotonic() + 10
        while (not Path(f"/proc/{pid}/syscall").read_text().startswith(RESTART)
               and time.monotonic() < deadline):
            time.sleep(0.01)
        assert Path(f"/proc/{pid}/syscall").read_text().startswith(RESTART)
        calls = blocked_calls(pid)
        assert [(c["tid"], c["call"], c["fd"]) for c in calls] == [(pid, "poll", sock)], calls


@pytest.mark.skipif(os.uname().machine not in FD_CALLS, reason="no system call table here")
def test_a_socket_waited_on_is_named_by_its_connection(blocked: tuple[int, int, int]) -> None:
    pid, sock, _ = blocked
    endpoints: dict = {}
    tcp_sockets([pid], {}, endpoints)
    entry = {"pid": pid}
    read_blocked_calls(SimpleNamespace(ranks=[entry], sockets={"endpoints": endpoints}))
    call = next(c for c in entry["blocked_calls"] if c["fd"] == sock)
    # THEN its endpoints are those of the process's loopback connection to its own listener
    assert call["local"].startswith("127.0.0.1:") and call["remote"].startswith("127.0.0.1:")
    assert call["local"] != call["remote"]


def test_the_syscall_file_is_read_for_calls_on_a_descriptor_only() -> None:
    x86, arm = FD_CALLS["x86_64"], FD_CALLS["aarch64"]
    line = "45 0xc 0x7f3a 0x2000 0x0 0x0 0x0 0x7ffd 0x7f3b\n"
    assert parse_syscall(line, x86) == ("recvfrom", 12)
    assert parse_syscall("207 0x7 0x1 0x2 0x0 0x0 0x0 0x7ffd 0x7f3b", arm) == ("recvfrom", 7)
    assert parse_syscall("64 0x3 0x1 0x2 0x0 0x0 0x0 0x7ffd 0x7f3b", arm) == ("write", 3)
    # a futex wait, a running thread, one not in a system call, an unreadable file: nothing
    for text in ("202 0x7f 0x80 0x0 0x0 0x0 0x0 0x7ffd 0x7f3b", "running", "-1 0x7ffd 0x7f3b", ""):
        assert parse_syscall(text, x86) is None
    # an architecture without a table reads nothing
    assert blocked_calls(os.getpid(), machine="riscv64") == []


def test_a_node_documents_calls_are_kept_and_broken_ones_dropped() -> None:
    calls = _blocked_calls([
        {"tid": 7, "call": "recvfrom", "fd": 12, "target": "socket:[9]",
         "local": "10.0.0.1:5", "remote": "10.0.0.2:6"},
        {"tid": 8, "call": "write", "fd": 3, "target": None},
        {"tid": "x", "call": "read", "fd": 1}, {"tid": 9, "fd": 2}, {"call": "read", "fd": 1},
    ])
    assert [(c.tid, c.call, c.fd, c.remote) for c in calls] == [
        (7, "recvfrom", 12, "10.0.0.2:6"), (8, "write", 3, None)]


def recorded(name: str) -> Snapshot:
    return Snapshot.from_json((ACCURACY / f"{name}.blocked_calls.json").read_text())


@pytest.mark.parametrize("mode", ["default", "samples1"])
def test_a_rank_stuck_at_exit_while_its_heartbeat_talks_is_no_finishing_job(mode: str) -> None:
    # GIVEN rank 1 at exit (main thread in threading._shutdown), its uploader in recvfrom on
    # a connection quiet all window, its daemon heartbeat sending every 0.2 s on another
    v = diagnose(recorded(f"exit_heartbeat_stuck.{mode}")).verdicts[0]
    # THEN it is stuck at its uploader's line, and the evidence says the connection is quiet
    assert (v.kind, v.culprit_ranks) == ("straggler", (1,)), v
    assert v.sites[0].endswith("exit_waits_uploader.py:62")
    assert any(e.startswith("rank 1: thread uploader (tid ") and "no data on it" in e
               for e in v.evidence), v.evidence


def waits_on_active(rank: Rank) -> Rank:
    """The rank's waited-on connection swapped for the one that carried data."""
    assert rank.recent_traffic is not None and rank.recent_traffic.active
    busy = rank.recent_traffic.active[0]
    return replace(rank, blocked_calls=tuple(
        replace(c, local=busy.local, remote=busy.remote) for c in rank.blocked_calls))


def test_a_thread_at_exit_waiting_on_the_connection_that_moves_data_is_finishing() -> None:
    # GIVEN the same rank, its uploader's call on the connection that carried data
    snapshot = recorded("exit_heartbeat_stuck.default")
    snapshot = replace(snapshot, nodes=tuple(
        replace(n, ranks=tuple(waits_on_active(r) for r in n.ranks)) for n in snapshot.nodes))
    v = diagnose(snapshot).verdicts[0]
    # THEN it may be finishing: said so, no alarm
    assert (v.kind, v.severity) == ("slow_step", "info"), v
    assert v.summary.startswith("finishing, or stuck at exit, cannot tell")


def test_uploads_at_exit_in_sends_on_connections_that_carry_data_are_finishing() -> None:
    # GIVEN exit_slow_upload read with blocked calls: every uploader in sendto on the
    # connection tcp_info saw move data
    snapshot = recorded("exit_slow_upload.default")
    assert all(r.blocked_calls for n in snapshot.nodes for r in n.ranks)
    v = diagnose(snapshot).verdicts[0]
    assert (v.kind, v.severity, v.culprit_ranks) == ("slow_step", "info", (0, 1, 2, 3)), v


def test_a_rank_waiting_in_an_asyncio_event_loop_says_where_the_loop_started() -> None:
    # GIVEN asyncio_fetch_stuck (recorded): rank 2's main thread in the event loop's selector
    # below `asyncio.run(fetch_manifest(...))`, the awaiting coroutine suspended
    snapshot = Snapshot.from_json(
        (ACCURACY / "asyncio_fetch_stuck.default.event_loop.json").read_text())
    v = diagnose(snapshot).verdicts[0]
    # THEN the straggler is told as waiting in an event loop, at the line that started it
    assert (v.kind, v.culprit_ranks) == ("straggler", (2,)), v
    assert v.sites[0].endswith("asyncio_fetch_stuck.py:53")
    assert "blocked in I/O in an asyncio event loop started at " in v.summary
    assert "the coroutine it awaits is on no thread's stack" in v.summary


def test_a_queue_feeder_that_cannot_flush_at_exit_is_named_with_its_pipe_write() -> None:
    # GIVEN exit_queue_feeder (recorded): rank 1's main thread in multiprocessing's exit
    # handler joining the queue's feeder thread, which sits in write() on the queue's pipe
    snapshot = recorded("exit_queue_feeder.default")
    v = diagnose(snapshot).verdicts[0]
    # THEN the feeder and its write are what the rank waits for, with the queue's advice
    assert (v.kind, v.culprit_ranks) == ("straggler", (1,)), v
    assert ("an exit handler waits for its thread QueueFeederThread in Connection._send"
            in v.summary), v.summary
    assert "blocked in write on pipe:[" in v.summary
    assert v.sites[0].endswith("multiprocessing/connection.py:384")
    assert "cancel_join_thread" in v.next_step


def test_without_the_system_calls_the_feeder_is_an_idle_helper_again() -> None:
    # GIVEN the same snapshot from a collector that read no system calls
    snapshot = recorded("exit_queue_feeder.default")
    snapshot = replace(snapshot, nodes=tuple(
        replace(n, ranks=tuple(replace(r, blocked_calls=()) for r in n.ranks))
        for n in snapshot.nodes))
    v = diagnose(snapshot).verdicts[0]
    # THEN the rank is still the straggler, at its exit handler's own line
    assert (v.kind, v.culprit_ranks) == ("straggler", (1,)), v
    assert "QueueFeederThread" not in v.summary and "(an exit handler)" in v.summary


def test_a_failing_system_call_reading_does_not_cost_the_file_locks(monkeypatch) -> None:
    # GIVEN a collector whose system-call reading fails (a bug, an unreadable /proc)
    import slurmdiag.collector.main as collector

    def broken(pid):  # type: ignore[no-untyped-def]
        raise OSError("boom")

    monkeypatch.setattr(collector, "blocked_calls", broken)
    monkeypatch.setattr(collector, "file_locks",
                        lambda pids, text: {pids[0]: [{"held": True, "table": text}]})
    entry: dict = {"pid": os.getpid()}
    run = SimpleNamespace(entries=[], ranks=[entry], tracing=None, sockets={}, errors=[],
                          round_wchan={},
                          locks_text=["/proc/locks as read on the collector's thread"])
    collector.read_process_state(run)
    # THEN the error is said and the locks are still read
    assert any(e.startswith("system calls not read") for e in run.errors), run.errors
    assert entry["file_locks"] == [{"held": True,
                                    "table": "/proc/locks as read on the collector's thread"}]


@pytest.mark.skipif(os.uname().machine not in FD_CALLS, reason="no system call table here")
def test_a_thread_waiting_for_a_child_names_the_child() -> None:
    # GIVEN a process with two children that waits for the second one (subprocess's waitpid)
    program = ("import subprocess, sys\n"
               "first = subprocess.Popen(['sleep', '60'])\n"
               "second = subprocess.Popen(['sleep', '60'])\n"
               "print(first.pid, second.pid, flush=True)\n"
               "second.wait()\n")
    proc = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    first, second = (int(x) for x in proc.stdout.readline().split())
    try:
        deadline = time.monotonic() + 10
        calls: list = []
        while not calls and time.monotonic() < deadline:
            calls = [c for c in blocked_calls(proc.pid) if c["call"] == "wait4"]
            time.sleep(0.05)
        # THEN its main thread sits in wait4 on the second child's pid
        assert calls == [{"tid": proc.pid, "call": "wait4", "fd": second,
                          "target": f"process:{second}"}]
    finally:
        for pid in (first, second):
            os.kill(pid, 9)
        proc.kill()
        proc.wait()


def test_wait4_of_any_child_has_no_target() -> None:
    x86 = {**FD_CALLS["x86_64"], **WAIT_CALLS["x86_64"]}
    assert parse_syscall("61 0xffffffffffffffff 0x7ffd 0x0 0x0 0x0 0x0 0x7ffd 0x7f3b", x86) == (
        "wait4", -1)
    assert parse_syscall("61 0x1f4 0x7ffd 0x0 0x0 0x0 0x0 0x7ffd 0x7f3b", x86) == ("wait4", 500)


# A process whose "reader" thread blocks reading a FIFO nobody writes (a path, not a pipe:[N])
# while its main thread waits for it.
FIFO_READER = r"""
import os, sys, threading
path = sys.argv[1]
os.mkfifo(path)
def read():
    fd = os.open(path, os.O_RDWR)  # opened for both: no writer to wait for, the read blocks
    os.read(fd, 1)
reader = threading.Thread(target=read, name="reader")
reader.start()
print(os.getpid(), flush=True)
reader.join()
"""


@pytest.mark.skipif(os.uname().machine not in FD_CALLS, reason="no system call table here")
def test_a_thread_in_a_call_on_a_file_is_read_with_where_it_sleeps(tmp_path: Path) -> None:
    fifo = tmp_path / "shard.fifo"
    proc = subprocess.Popen([sys.executable, "-c", FIFO_READER, str(fifo)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    try:
        pid = int(proc.stdout.readline())
        deadline = time.monotonic() + 10
        calls: list[dict] = []
        while not calls and time.monotonic() < deadline:
            time.sleep(0.05)
            calls = [c for c in blocked_calls(pid) if c["target"] == str(fifo)]
        # THEN the reader's read on the FIFO's path, with its thread's kernel wait
        assert len(calls) == 1 and calls[0]["tid"] != pid and calls[0]["call"] == "read", calls
        assert "pipe" in calls[0]["wchan"], calls
    finally:
        proc.kill()
        proc.wait()


PREFETCH = "stalled_mount_prefetch.default.thread_wchan"


def test_a_thread_waited_for_on_a_mount_that_does_not_answer_is_said_so() -> None:
    # stalled_mount_prefetch (a real look): rank 2's main thread in Future.result(), its prefetch
    # thread in read on the stalled FUSE mount (wchan request_wait_answer)
    snapshot = Snapshot.from_json((ACCURACY / f"{PREFETCH}.json").read_text())
    verdict = diagnose(snapshot).verdicts[0]
    assert (verdict.kind, verdict.culprit_ranks) == ("straggler", (2,))
    assert verdict.next_step is not None and "FUSE file system" in verdict.next_step
    assert "which waits for a FUSE file system that does not answer" in verdict.summary
    assert any(line.endswith("waiting for a FUSE file system that does not answer "
                             "(request_wait_answer)") for line in verdict.evidence)


def _thread_wchan(rank: Rank, wchan: str | None) -> Rank:
    return replace(rank, blocked_calls=tuple(replace(c, wchan=wchan) for c in rank.blocked_calls))


@pytest.mark.parametrize("wchan", [None, "pipe_read"])
def test_its_liar_a_thread_waited_for_elsewhere_is_a_thread_wait(wchan: str | None) -> None:
    snapshot = Snapshot.from_json((ACCURACY / f"{PREFETCH}.json").read_text())
    snapshot = replace(snapshot, nodes=tuple(
        replace(n, ranks=tuple(_thread_wchan(r, wchan) if r.rank == 2 else r for r in n.ranks))
        for n in snapshot.nodes))
    verdict = diagnose(snapshot).verdicts[0]
    assert (verdict.kind, verdict.culprit_ranks) == ("straggler", (2,))
    assert verdict.next_step is not None and "FUSE" not in verdict.next_step
    assert "FUSE" not in verdict.summary
