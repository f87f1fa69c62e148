"""What a rank's main thread waits on for another thread (a queue, an event), and which other
threads hold it: the collector's reading of py-spy --locals (`waited_holders`), on real
processes read by the real py-spy.

A thread's traceback in the job's log says a thread died; whether the one the main thread
waits for is that one, or a live one that computes, the stacks alone cannot say. A loader
thread handed its queue as an argument holds it in its locals, by the queue's address
(`healthy_slow_labels_dead_telemetry`: a metrics thread dead at the start beside a slow, live
label loader)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmdiag.collector import stacks

PYSPY = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))

#: Programs whose main thread parks on a thread-to-thread wait, beside threads that do or do
#: not hold what it waits on. Each prints the worker's OS thread id, then its own pid is the
#: main thread's.
PROGRAMS = {
    "queue_arg": """
import queue, threading
def load(labels):
    while True:
        sum(range(1000))
q = queue.Queue()
t = threading.Thread(target=load, args=(q,), daemon=True); t.start()
while t.native_id is None: pass
print(t.native_id, flush=True)
q.get()
""",
    "queue_attr": """
import queue, threading
class Loader:
    def __init__(self):
        self.out = queue.Queue()
    def run(self):
        while True:
            sum(range(1000))
    def next_batch(self):
        return self.out.get()
loader = Loader()
t = threading.Thread(target=loader.run, daemon=True); t.start()
while t.native_id is None: pass
print(t.native_id, flush=True)
loader.next_batch()
""",
    "queue_global": """
import queue, threading
BATCHES = queue.Queue()
def load():
    while True:
        sum(range(1000))
t = threading.Thread(target=load, daemon=True); t.start()
while t.native_id is None: pass
print(t.native_id, flush=True)
BATCHES.get()
""",
    "event_arg": """
import threading, time
def finish(done):
    time.sleep(3600)
    done.set()
done = threading.Event()
t = threading.Thread(target=finish, args=(done,), daemon=True); t.start()
while t.native_id is None: pass
print(t.native_id, flush=True)
done.wait()
""",
    "sleeps": """
import threading, time
t = threading.Thread(target=time.sleep, args=(3600,), daemon=True); t.start()
print(t.native_id, flush=True)
time.sleep(3600)
""",
}


@pytest.fixture
def running(request: pytest.FixtureRequest) -> Iterator[tuple[int, int]]:
    """(pid, worker's OS thread id) of PROGRAMS[param], parked in its wait."""
    proc = subprocess.Popen([sys.executable, "-c", PROGRAMS[request.param]],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        worker = int(proc.stdout.readline())
        time.sleep(0.3)  # into its wait
        yield proc.pid, worker
    finally:
        proc.kill()
        proc.wait()


def _dump(pid: int) -> list[dict]:
    out = subprocess.run([PYSPY, "dump", "--json", "--locals", "--pid", str(pid)],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    threads: list[dict] = json.loads(out)
    return threads


@pytest.mark.parametrize("running", ["queue_arg"], indirect=True)
def test_a_loader_handed_its_queue_holds_it(running: tuple[int, int]) -> None:
    pid, worker = running
    waited = stacks.waited_holders(_dump(pid), pid)
    assert waited is not None
    assert waited["object"].startswith("<Queue at 0x")
    assert waited["holders"] == [worker]


@pytest.mark.parametrize("running", ["event_arg"], indirect=True)
def test_the_thread_that_would_set_an_event_holds_it(running: tuple[int, int]) -> None:
    pid, worker = running
    waited = stacks.waited_holders(_dump(pid), pid)
    assert waited is not None and waited["object"].startswith("<Event at 0x")
    assert waited["holders"] == [worker]


@pytest.mark.parametrize("running", ["queue_attr"], indirect=True)
def test_a_producer_reaching_its_queue_through_self_holds_its_owner(
        running: tuple[int, int]) -> None:
    # its frames hold `self` (the Loader whose method waits on loader.out), not the queue
    pid, worker = running
    waited = stacks.waited_holders(_dump(pid), pid)
    assert waited is not None and waited["object"].startswith("<Queue at 0x")
    assert waited["owner"].startswith("<Loader at 0x")
    assert waited["holders"] == [worker]


@pytest.mark.parametrize("running", ["queue_global"], indirect=True)
def test_a_producer_of_a_global_queue_holds_nothing_seen(running: tuple[int, int]) -> None:
    # the documented limit: a module's global is no frame's local
    pid, _ = running
    waited = stacks.waited_holders(_dump(pid), pid)
    assert waited is not None and waited["object"].startswith("<Queue at 0x")
    assert waited["owner"] is None and waited["holders"] == []


@pytest.mark.parametrize("running", ["sleeps"], indirect=True)
def test_a_main_thread_that_sleeps_waits_on_nothing(running: tuple[int, int]) -> None:
    pid, _ = running
    assert stacks.waited_holders(_dump(pid), pid) is None


def test_an_address_is_not_a_longer_ones_prefix() -> None:
    assert stacks._holds("<Queue at 0x7f12>", "0x7f12")
    assert stacks._holds("(<Queue at 0x7f12>, 3)", "0x7f12")
    assert not stacks._holds("<Queue at 0x7f123>", "0x7f12")
    assert stacks._holds("[<X at 0x7f123>, <Queue at 0x7f12>]", "0x7f12")


def test_native_frames_under_the_wait_are_passed_over() -> None:
    # --native puts the C frames of the futex wait innermost
    frames = [
        {"name": "pthread_cond_wait", "filename": "/usr/lib/x86_64-linux-gnu/libc.so.6",
         "module": "/usr/lib/x86_64-linux-gnu/libc.so.6", "line": 0},
        {"name": "Condition.wait", "filename": "/usr/lib/python3.11/threading.py", "line": 320,
         "locals": [{"name": "self", "repr": "<Condition at 0x1>"}]},
        {"name": "Queue.get", "filename": "/usr/lib/python3.11/queue.py", "line": 171,
         "locals": [{"name": "self", "repr": "<Queue at 0x2>"}]},
        {"name": "step", "filename": "/work/train.py", "line": 9,
         "locals": [{"name": "self", "repr": "<Trainer at 0x3>"}]},
    ]
    assert stacks._waited_object(frames) == ("<Queue at 0x2>", "<Trainer at 0x3>")


def test_the_analysis_knows_the_same_thread_waits_as_the_collector() -> None:
    # the analysis keeps its own copy (importing the collector's modules costs the CLI ~7 ms)
    from slurmdiag.analysis import verdicts
    assert verdicts._THREAD_WAIT_FRAMES == stacks._THREAD_WAITS
