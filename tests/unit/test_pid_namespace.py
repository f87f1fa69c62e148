"""A rank in its own PID namespace (a container runtime's: podman, apptainer --containall): py-spy
numbers its threads as the rank sees them, the node's /proc as the node does. The collector
translates (NSpid); real processes under `unshare --pid`, and the snapshot of the
`container_pid_namespace` scenario recorded by `make accuracy`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmdiag.analysis import diagnose
from slurmdiag.analysis.stacks import merge_stacks
from slurmdiag.collector.stacks import node_tids, to_node_tids
from slurmdiag.snapshot import Snapshot

ACCURACY = Path(__file__).resolve().parent.parent / "fixtures" / "accuracy"
SLEEPER = "import threading, time; threading.Thread(target=time.sleep, args=(60,)).start(); time.sleep(60)"


@pytest.fixture
def contained() -> Iterator[int]:
    """The node's pid of a Python process that is pid 1 of its own PID namespace."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare")
    outer = subprocess.Popen(["unshare", "--pid", "--fork", sys.executable, "-c", SLEEPER])
    try:
        deadline = time.monotonic() + 10
        inner = None
        while inner is None:
            assert time.monotonic() < deadline, "the contained process never started"
            children = Path(f"/proc/{outer.pid}/task/{outer.pid}/children").read_text().split()
            if children and len(os.listdir(f"/proc/{children[0]}/task")) == 2:
                inner = int(children[0])
            time.sleep(0.02)
        yield inner
    finally:
        outer.kill()
        outer.wait()


def test_threads_of_a_process_in_its_own_pid_namespace_get_the_nodes_ids(contained: int) -> None:
    # GIVEN a process that is pid 1 of its namespace, with a second thread
    mapping = node_tids(contained)
    # THEN each of its threads' namespace ids maps to the node's, the main thread's to its pid
    assert mapping is not None and mapping[1] == contained
    assert sorted(mapping.values()) == sorted(int(t) for t in os.listdir(f"/proc/{contained}/task"))
    # AND py-spy-shaped threads numbered by the namespace get the node's numbers
    threads = [{"os_thread_id": ns, "thread_name": "t"} for ns in sorted(mapping)]
    assert sorted(t["os_thread_id"] for t in to_node_tids(threads, contained)) == sorted(
        mapping.values())


def test_a_process_in_the_nodes_namespace_is_left_as_it_is() -> None:
    assert node_tids(os.getpid()) is None
    threads = [{"os_thread_id": 12345}]
    assert to_node_tids(threads, os.getpid()) == [{"os_thread_id": 12345}]


def test_a_contained_jobs_main_threads_are_found_by_their_pid() -> None:
    # GIVEN container_pid_namespace: rank_gated_collective with every rank under
    # `unshare --pid --fork --mount-proc` (py-spy saw each main thread as thread 1)
    snapshot = Snapshot.from_json(
        (ACCURACY / "container_pid_namespace.default.node_tids.json").read_text())
    # THEN each main thread is found by the rule that trusts nothing but the ids, with its
    # CPU time, and the verdict is rank_gated_collective's without a caveat about it
    digests = merge_stacks(snapshot).digests
    assert [d.main_rule for d in digests] == ["os_thread_id"] * 4
    assert all(d.cpu_fraction is not None for d in digests)
    v = diagnose(snapshot).verdicts[0]
    assert (v.kind, v.culprit_ranks) == ("mismatched_collective", (0,)), v
    assert not any("chosen by rule" in line for line in v.evidence)
