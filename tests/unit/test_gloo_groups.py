"""The collector's reading of a rank's gloo process groups, on real threads of this process
named as torch names gloo's: each group's loop thread (``gloo_tcp_loop``), then its workers
(``pt_gloo_runloop``). A group whose collectives complete wakes its workers; one whose
collective hangs leaves them asleep (`heartbeat_group_hang`)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from slurmdiag.collector import stacks


class _Thread:
    """A thread named ``name`` at the OS level that sleeps, or wakes every 10 ms (``busy``)."""

    def __init__(self, name: str, busy: bool, stop: threading.Event) -> None:
        self.named = threading.Event()
        self.tid = 0
        self.thread = threading.Thread(target=self._run, args=(name, busy, stop), daemon=True)
        self.thread.start()
        self.named.wait(5)

    def _run(self, name: str, busy: bool, stop: threading.Event) -> None:
        self.tid = threading.get_native_id()
        with open(f"/proc/self/task/{self.tid}/comm", "w") as fh:
            fh.write(name)
        self.named.set()
        while not stop.wait(0.01 if busy else 60):
            pass


@pytest.fixture
def groups() -> Iterator[list[_Thread]]:
    """Two gloo groups, made in order: the first's worker asleep, the second's working."""
    stop = threading.Event()
    made = [_Thread(stacks.GLOO_LOOP, False, stop), _Thread(stacks.GLOO_WORKER, False, stop),
            _Thread(stacks.GLOO_LOOP, True, stop), _Thread(stacks.GLOO_WORKER, True, stop)]
    yield made
    _end(made, stop)


def _end(made: list[_Thread], stop: threading.Event) -> None:
    """Stop the threads and wait until the kernel has let their tasks go."""
    stop.set()
    for t in made:
        t.thread.join(5)
    deadline = time.monotonic() + 5
    while any(os.path.exists(f"/proc/self/task/{t.tid}") for t in made):
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_the_groups_are_their_workers_in_the_order_made(groups: list[_Thread]) -> None:
    assert stacks.gloo_workers(os.getpid()) == [[groups[1].tid], [groups[3].tid]]


def test_the_working_group_ran_and_the_other_slept(groups: list[_Thread]) -> None:
    pid = os.getpid()
    workers = stacks.gloo_workers(pid)
    assert workers is not None
    before = stacks.gloo_schedule(pid, workers)
    time.sleep(0.3)
    assert stacks.gloo_groups_ran(pid, before) == [False, True]
    # how long each had slept, on the clock of the CPU each last ran on (a VM's are far apart)
    idle = stacks.idle_ms_of({pid: workers})[pid]
    assert idle is not None and idle[0] >= 250 and idle[1] < 100, idle


def test_one_group_is_read_and_none_is_nothing() -> None:
    assert stacks.gloo_workers(os.getpid()) is None  # no gloo thread in this process
    stop = threading.Event()
    made = [_Thread(stacks.GLOO_LOOP, False, stop), _Thread(stacks.GLOO_WORKER, False, stop)]
    try:
        assert stacks.gloo_workers(os.getpid()) == [[made[1].tid]]
    finally:
        _end(made, stop)


def test_a_loop_without_workers_is_not_read() -> None:
    stop = threading.Event()
    made = [_Thread(stacks.GLOO_LOOP, False, stop), _Thread(stacks.GLOO_WORKER, False, stop),
            _Thread(stacks.GLOO_LOOP, False, stop)]
    try:
        assert stacks.gloo_workers(os.getpid()) is None
    finally:
        _end(made, stop)


def test_a_thread_gone_counts_as_run(groups: list[_Thread]) -> None:
    pid = os.getpid()
    workers = stacks.gloo_workers(pid)
    assert workers is not None
    before = stacks.gloo_schedule(pid, workers)
    before[0][123456789] = ("1", "1")  # a worker that ended since
    assert stacks.gloo_groups_ran(pid, before)[0] is True


@pytest.mark.parametrize("busy", [False, True])
def test_a_rank_without_groups_has_its_main_thread_watched(busy: bool) -> None:
    # GIVEN a process with no gloo thread whose main thread sleeps, or wakes every 10 ms
    # (gloo runs a send or a receive on the calling thread: main_ran, main_idle_ms)
    from types import SimpleNamespace

    from slurmdiag.collector import main

    code = ("import time\nprint(flush=True)\nwhile True: time.sleep(0.01)" if busy
            else "import time; print(flush=True); time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        child.stdout.readline()  # started (on a loaded machine, later than any fixed wait)
        time.sleep(0.5)
        run = SimpleNamespace(ranks=[{"pid": child.pid}], gloo_workers={}, gloo_idle={})
        # WHEN the collector reads them before a look without strace, and again after it
        main.read_gloo_groups(run, traced=False, rounds=1)
        before = stacks.gloo_schedule(child.pid, main._watched(run, child.pid))
        time.sleep(0.3)
        groups, ran = main._split_watched(stacks.gloo_groups_ran(child.pid, before))
        _, idle = main._split_watched(run.gloo_idle[child.pid])
        # THEN only the main thread is watched: it ran or not, and had slept as long
        assert run.gloo_workers[child.pid] == [] and groups == []
        assert ran is busy
        assert (idle < 100) if busy else (idle >= 400), idle
    finally:
        child.kill()
        child.wait()
