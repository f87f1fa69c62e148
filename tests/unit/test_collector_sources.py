"""A thread's target passed as its call (collector/sources.py): the line read on the node from
real processes dumped by real py-spy, and the lines that must not be taken for one."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmdiag.collector.sources import called_target, passes_call_as_target
from slurmdiag.collector.stacks import slim_threads, to_node_tids

SERVER = """import socketserver
import threading
import time


class Quiet(socketserver.BaseRequestHandler):
    def handle(self):
        pass


def start_status_server(server):
    {start}


server = socketserver.TCPServer(("127.0.0.1", 0), Quiet)
start_status_server(server)
time.sleep(3600)
"""
START_LINE = 12


@pytest.mark.parametrize(("line", "callee", "passes"), [
    ("    threading.Thread(target=server.serve_forever(), daemon=True).start()", "serve_forever", True),
    ("Process(target = self.run_loop(cfg, 'a)'), args=())", "run_loop", True),
    ("        target=consume(queue),", "consume", True),
    ("    worker = Thread(target=loop(", "loop", True),  # the call goes on over the next lines
    ("t = Thread(target=loop)", "loop", False),  # the function, passed
    ("t = Thread(target=make_server().serve_forever)", "make_server", False),  # a method, passed
    ("if target == loop():", "loop", False),
    ("x = my_target=serve()", "serve", False),
    ("Thread(target=serve_forever)  # not target=serve()", "serve", False),  # a comment
    ("Thread(target=a.serve() + 1)", "serve", False),
    ("Thread(target=other())", "serve", False),  # not the function the frame is in
])
def test_which_lines_pass_a_call_as_the_target(line: str, callee: str, passes: bool) -> None:
    assert passes_call_as_target(line, callee) is passes


def _dump_when(py_spy: str, pid: int, function: str) -> list[dict]:
    """py-spy's threads of ``pid`` (slimmed as the collector keeps them) once its main thread
    is in ``function``, within 10 s."""
    deadline = time.monotonic() + 10
    while True:
        done = subprocess.run([py_spy, "dump", "--json", "--pid", str(pid)],
                              capture_output=True, text=True, timeout=30, check=False)
        if done.returncode == 0:
            threads = slim_threads(to_node_tids(json.loads(done.stdout), pid))
            main = next((t for t in threads if t["os_thread_id"] == pid), None)
            if main and any(f["name"].endswith(function) for f in main["frames"]):
                return threads
        assert time.monotonic() < deadline, done.stderr or done.stdout
        time.sleep(0.1)


@pytest.fixture
def started(tmp_path: Path):
    running: list[subprocess.Popen] = []

    def start(statement: str) -> tuple[int, Path]:
        script = tmp_path / "serve.py"
        script.write_text(SERVER.format(start=statement))
        running.append(subprocess.Popen([sys.executable, str(script)]))
        return running[-1].pid, script

    yield start
    for proc in running:
        proc.kill()
        proc.wait()


def test_a_server_loop_called_as_the_target_is_found_at_its_line(py_spy, started) -> None:
    # GIVEN a real process that runs Thread(target=server.serve_forever()): the main thread in
    # socketserver's loop, called from line 12
    pid, script = started("threading.Thread(target=server.serve_forever(), daemon=True).start()")
    threads = _dump_when(py_spy, pid, "serve_forever")
    # THEN the place is that line of the script, as py-spy names the file
    cache: dict = {}
    assert called_target(pid, threads, cache) == f"{script}:{START_LINE}"
    # AND the script was read once: a second rank of the same file reads no file again
    assert len(cache) == 1
    assert called_target(pid, threads, cache) == f"{script}:{START_LINE}"
    assert len(cache) == 1


@pytest.mark.parametrize(("statement", "function"), [
    # a service serving on its main thread by design: the same stacks, no target
    ("server.serve_forever()", "serve_forever"),
    # the target passed as it should be: the main thread goes on, to its sleep
    ("threading.Thread(target=server.serve_forever, daemon=True).start()", "<module>"),
])
def test_a_server_started_right_names_no_line(py_spy, started, statement, function) -> None:
    pid, _ = started(statement)
    threads = _dump_when(py_spy, pid, function)
    if function == "<module>":  # wait until the sleep: the Thread started, its loop running
        time.sleep(0.3)
        threads = _dump_when(py_spy, pid, function)
    assert called_target(pid, threads, {}) is None


def test_a_file_that_is_not_regular_or_too_large_is_not_read(tmp_path: Path) -> None:
    # GIVEN frames naming a FIFO and a file over the limit, each at line 1 calling serve()
    import os

    from slurmdiag.collector import sources

    fifo = tmp_path / "fifo.py"
    os.mkfifo(fifo)
    large = tmp_path / "large.py"
    large.write_text("Thread(target=serve())\n" + "#" * sources.MAX_SOURCE_BYTES)
    for path in (fifo, large):
        threads = [{"os_thread_id": os.getpid(), "frames": [
            {"name": "serve", "filename": "/srv/lib.py", "line": 3, "module": None},
            {"name": "main", "filename": str(path), "line": 1, "module": None}]}]
        # THEN no line is named, and the FIFO's read did not block
        assert called_target(os.getpid(), threads, {}) is None


def _serving_rank(pid: int, script: Path) -> dict:
    return {"pid": pid, "state": "S", "wchan": "do_select", "samples": [{"threads": [
        {"os_thread_id": pid, "frames": [
            {"name": "BaseServer.serve_forever", "filename": "/usr/lib/python3.11/socketserver.py",
             "line": 233, "module": None},
            {"name": "start_status_server", "filename": str(script), "line": 1, "module": None}]}]}]}


@pytest.mark.parametrize(("state", "wchan", "read"), [
    ("S", "do_select", True),
    ("D", "io_schedule", False),  # a process of the node in the kernel: a mount may not answer
    ("S", "request_wait_answer", False),  # a FUSE file system's answer awaited
])
def test_no_file_is_read_on_a_node_where_a_mount_may_not_answer(tmp_path, state, wchan, read):
    # GIVEN a rank serving on its main thread through a called target, and another process of
    # the node in the given state
    import os
    from types import SimpleNamespace

    from slurmdiag.collector.main import read_called_targets

    script = tmp_path / "serve.py"
    script.write_text("threading.Thread(target=server.serve_forever()).start()\n")
    rank = _serving_rank(os.getpid(), script)
    run = SimpleNamespace(ranks=[rank], entries=[rank, {"state": state, "wchan": wchan}],
                          errors=[])
    read_called_targets(run)
    # THEN the place is read only where no process waits on a mount
    assert rank.get("called_target") == (f"{script}:1" if read else None)
    assert run.errors == []


def test_a_main_thread_in_a_collective_is_not_looked_at(tmp_path) -> None:
    # GIVEN a main thread in all_reduce below a line that passes a call as a target
    import os

    script = tmp_path / "train.py"
    script.write_text("Thread(target=all_reduce()).start()\n")
    threads = [{"os_thread_id": os.getpid(), "frames": [
        {"name": "all_reduce", "filename": "/venv/lib/python3.11/site-packages/torch/distributed/"
         "distributed_c10d.py", "line": 3252, "module": None},
        {"name": "main", "filename": str(script), "line": 1, "module": None}]}]
    cache: dict = {}
    # THEN no line is named and no file was read
    assert called_target(os.getpid(), threads, cache) is None
    assert cache == {}
