"""File locks: the collector's reading of /proc/locks (real processes holding and waiting for a
real flock), and the verdict on a deadlock across ranks through one (`cache_lock_barrier`,
recorded by `make accuracy`: rank 0 holds the token cache's lock in a barrier that ranks 1-3,
blocked in flock() for that lock, never reach). Each rule is also tested on the variation that
would make it lie.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from slurmdiag.analysis import diagnose
from slurmdiag.collector.filelocks import file_locks, read_in_background
from slurmdiag.snapshot import Snapshot

ACCURACY = Path(__file__).resolve().parent.parent / "fixtures" / "accuracy"

HOLD = """
import fcntl, sys, time
f = open(sys.argv[1], "w")
fcntl.flock(f, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(60)
"""


@pytest.fixture
def holder_and_waiter(tmp_path: Path) -> Iterator[tuple[int, int, Path]]:
    """A process holding an exclusive flock on a file, and one blocked in flock() for it."""
    path = tmp_path / "tokens.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE,
                              text=True)
    waiter = None
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        waiter = subprocess.Popen([sys.executable, "-c", HOLD, str(path)],
                                  stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while "locks_lock_inode_wait" not in Path(f"/proc/{waiter.pid}/wchan").read_text():
            assert time.monotonic() < deadline, "the waiter never blocked in flock()"
            time.sleep(0.02)
        yield holder.pid, waiter.pid, path
    finally:
        for proc in (holder, waiter):
            if proc is not None:
                proc.kill()
                proc.wait()


def test_reads_who_holds_and_who_waits_for_a_real_flock(holder_and_waiter) -> None:  # type: ignore[no-untyped-def]
    holder, waiter, path = holder_and_waiter
    # WHEN the collector reads both processes' locks (and an unrelated pid's)
    found = file_locks([holder, waiter, 1])
    # THEN the holder holds it, the waiter waits for it and names the holder, both by path
    inode = path.stat().st_ino
    assert found[holder] == [{"held": True, "kind": "FLOCK", "mode": "WRITE",
                              "dev": found[holder][0]["dev"], "inode": inode,
                              "holder_pid": None, "path": str(path)}]
    waits = found[waiter]
    assert len(waits) == 1 and not waits[0]["held"]
    assert (waits[0]["inode"], waits[0]["holder_pid"], waits[0]["path"]) == (inode, holder,
                                                                               str(path))
    # AND only the pids asked for are listed
    assert set(found) <= {holder, waiter, 1} and 1 not in found


def test_the_table_read_on_a_thread_gives_the_same_locks(holder_and_waiter) -> None:  # type: ignore[no-untyped-def]
    # GIVEN /proc/locks read on a thread (the collector starts it with the collection: the
    # kernel's read waits for an RCU grace period, 10-25 ms of wall)
    holder, waiter, _ = holder_and_waiter
    box = read_in_background()
    deadline = time.monotonic() + 5
    while not box:
        assert time.monotonic() < deadline, "the thread never read /proc/locks"
        time.sleep(0.005)
    # THEN its text names the same holder and waiter as a read of the collector's own
    assert file_locks([holder, waiter], box[0]) == file_locks([holder, waiter])


def test_parses_the_tables_shapes_and_keeps_no_pid_for_ofd_locks() -> None:
    table = (
        "1: POSIX  ADVISORY  WRITE 100 08:01:55 0 EOF\n"
        "1: -> POSIX  ADVISORY  WRITE 200 08:01:55 0 EOF\n"
        "2: OFDLCK ADVISORY  READ  -1 08:01:77 0 EOF\n"
        "2: -> OFDLCK ADVISORY  WRITE 300 08:01:77 0 EOF\n"
        "3: FLOCK  ADVISORY  WRITE 300 00:2c:9 0 EOF\n"
        "garbage line\n"
    )
    found = file_locks([200, 300], text=table)
    assert [(x["held"], x["kind"], x["inode"], x["holder_pid"]) for x in found[200]] == [
        (False, "POSIX", 55, 100)]
    # an OFD lock's holder has no pid: waited for, holder unknown; the pid's own flock held
    assert [(x["held"], x["kind"], x["inode"], x["holder_pid"]) for x in found[300]] == [
        (False, "OFDLCK", 77, None), (True, "FLOCK", 9, None)]


# ---------------------------------------------------------------------------- the verdict


def deadlock(mode: str = "default") -> Snapshot:
    return Snapshot.from_json((ACCURACY / f"cache_lock_barrier.{mode}.file_lock.json").read_text())


def map_ranks(snapshot: Snapshot, change) -> Snapshot:  # type: ignore[no-untyped-def]
    return replace(snapshot, nodes=tuple(
        replace(n, ranks=tuple(change(r) for r in n.ranks)) for n in snapshot.nodes))


def top(snapshot: Snapshot):  # type: ignore[no-untyped-def]
    return diagnose(snapshot).verdicts[0]


@pytest.mark.parametrize("mode", ["default", "samples1"])
def test_the_rank_holding_the_lock_the_others_wait_for_is_the_culprit(mode: str) -> None:
    # GIVEN rank 0 in a barrier holding the cache's flock, ranks 1-3 blocked in flock() for it
    v = top(deadlock(mode))
    # THEN rank 0 is the culprit, at its barrier (not the three "stragglers" blocked outside
    # any collective), and the lock's file is named
    assert (v.kind, v.culprit_ranks) == ("straggler", (0,)), v
    assert v.sites[0].endswith("cache_lock_barrier.py:46")
    assert v.sites[1].endswith("cache_lock_barrier.py:41")
    assert v.summary.startswith("rank 0 holds the file lock on ")
    assert "tokens.lock (FLOCK WRITE) that ranks 1-3 wait for at " in v.summary
    assert "while it waits in barrier at " in v.summary and "deadlock" in v.summary
    assert v.severity == ("critical" if mode == "default" else "warning")


def test_the_holder_is_found_by_inode_when_no_node_names_its_pid() -> None:
    # GIVEN the same, but no waiter's node table shows the holder (a lock on a shared
    # filesystem, held on another node)
    def unnamed(rank):  # type: ignore[no-untyped-def]
        return replace(rank, file_locks=tuple(replace(x, holder_pid=None)
                                              for x in rank.file_locks))
    v = top(map_ranks(deadlock(), unnamed))
    # THEN rank 0 still, by the inode it reports held
    assert (v.kind, v.culprit_ranks) == ("straggler", (0,)), v
    assert "joined by inode" in " ".join(v.evidence)


def test_a_holder_that_works_is_no_deadlock() -> None:
    # GIVEN the same locks, but rank 0 working (a rank writing a shared log under the lock,
    # caught by the look): moving between samples, its CPU advancing
    def working(rank):  # type: ignore[no-untyped-def]
        if rank.rank != 0:
            return rank
        samples = tuple(replace(s, threads=tuple(
            replace(t, active=True, cpu_s=(t.cpu_s or 0.0) + 0.5 * i,
                    frames=t.frames[i % 2:]) for t in s.threads))
            for i, s in enumerate(rank.samples))
        return replace(rank, samples=samples, state="R", cpu_percent=95.0)
    v = top(map_ranks(deadlock(), working))
    # THEN the lock rule stays silent (the usual rules speak)
    assert "holds the file lock" not in v.summary, v


def test_a_lock_two_ranks_hold_or_a_different_file_names_no_holder() -> None:
    # GIVEN no pid named, and ranks 1 and 2 reported holding the inode too (a shared READ
    # lock): for every waiter the holder is ambiguous; or the waiters' lock on another path
    # with the same inode number (another filesystem)
    def shared(rank):  # type: ignore[no-untyped-def]
        locks = tuple(replace(x, holder_pid=None) for x in rank.file_locks)
        if rank.rank in (1, 2):
            locks += (replace(locks[0], held=True),)
        return replace(rank, file_locks=locks)

    def elsewhere(rank):  # type: ignore[no-untyped-def]
        return replace(rank, file_locks=tuple(
            replace(x, holder_pid=None, path=None if x.held else "/scratch/other.lock")
            if rank.rank != 0 else replace(x, path="/datasets/tokens.lock")
            for x in rank.file_locks))
    for changed in (map_ranks(deadlock(), shared), map_ranks(deadlock(), elsewhere)):
        assert "holds the file lock" not in top(changed).summary


def test_a_rank_waiting_for_its_own_lock_is_not_blamed_on_another() -> None:
    # GIVEN rank 1's waited lock naming rank 1's own pid as its holder (a process that flocks
    # one file through two descriptors deadlocks on itself)
    def own(rank):  # type: ignore[no-untyped-def]
        if rank.rank != 1:
            return rank
        return replace(rank, file_locks=tuple(replace(x, holder_pid=rank.pid)
                                              for x in rank.file_locks))
    v = top(map_ranks(deadlock(), own))
    # THEN rank 1 is not said to wait for rank 0 (ranks 2 and 3 still do)
    assert "ranks 2-3 wait for" in v.summary and "1-3" not in v.summary, v


def test_a_lock_held_by_a_process_that_is_no_rank_blames_no_rank() -> None:
    # GIVEN the waiters' tables naming a holder pid that is no rank of the job (a stale
    # process of an earlier job holding the cache's lock), while rank 0 still holds the inode
    def stale(rank):  # type: ignore[no-untyped-def]
        return replace(rank, file_locks=tuple(x if x.held else replace(x, holder_pid=424242)
                                              for x in rank.file_locks))
    # THEN rank 0 is not made the holder by its inode: the table named someone else
    assert "holds the file lock" not in top(map_ranks(deadlock(), stale)).summary


def test_a_look_in_which_collectives_complete_is_no_lock_deadlock() -> None:
    # GIVEN the same locks, but strace saw every rank move data (collectives complete: the
    # holder's collective was on a subgroup with other ranks, and it moves on)
    from slurmdiag.snapshot import RecentConnection, RecentTraffic, StraceSummary, SyscallCount

    def talking(rank):  # type: ignore[no-untyped-def]
        return replace(
            rank,
            strace=StraceSummary(status="ok", window_s=2.0, syscalls=(
                SyscallCount(syscall="sendmsg", calls=200),
                SyscallCount(syscall="recvmsg", calls=200))),
            recent_traffic=RecentTraffic(within_ms=2500, checked=1, active=tuple(
                RecentConnection(c.local, c.remote, 10, 10) for c in rank.connections
                if c.state == "ESTABLISHED")))
    v = top(map_ranks(deadlock(), talking))
    # THEN the progress rules speak first
    assert "holds the file lock" not in v.summary, v
