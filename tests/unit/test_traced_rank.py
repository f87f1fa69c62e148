"""A rank held in a tracing stop by a debugger left attached (`debugger_left_attached`, recorded
by `make accuracy`), and the collector's reading of who traces a process (a real strace)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from slurmdiag.analysis import diagnose
from slurmdiag.collector.procfs import read_tracer
from slurmdiag.snapshot import Snapshot

ACCURACY = Path(__file__).resolve().parent.parent / "fixtures" / "accuracy"


def traced(mode: str = "default") -> Snapshot:
    return Snapshot.from_json(
        (ACCURACY / f"debugger_left_attached.{mode}.traced.json").read_text())


def map_rank(snapshot: Snapshot, number: int, change) -> Snapshot:  # type: ignore[no-untyped-def]
    return replace(snapshot, nodes=tuple(
        replace(n, ranks=tuple(change(r) if r.rank == number else r for r in n.ranks))
        for n in snapshot.nodes))


@pytest.mark.parametrize("mode", ["default", "samples1"])
def test_a_rank_a_debugger_holds_stopped_names_the_debugger(mode: str) -> None:
    # GIVEN rank 2 in a tracing stop (state t), its TracerPid a "debugger" that never detaches
    v = diagnose(traced(mode)).verdicts[0]
    # THEN rank 2 is the straggler where it stopped, held by that pid, and the advice is to
    # detach it (kill -CONT does not resume a traced process)
    assert (v.kind, v.culprit_ranks) == ("straggler", (2,)), v
    assert v.sites[0].endswith("debugger_left_attached.py:47")
    assert "is held in a tracing stop (state t) by pid " in v.summary
    assert "kill -CONT does not resume a traced process" in v.next_step


def test_a_rank_stopped_by_a_signal_is_told_to_continue() -> None:
    # GIVEN the same rank stopped by SIGSTOP instead (state T, no tracer)
    stopped = map_rank(traced(), 2, lambda r: replace(r, state="T", tracer=None))
    v = diagnose(stopped).verdicts[0]
    # THEN it is stopped, and kill -CONT is the advice
    assert "is stopped (state T) at " in v.summary and "kill -CONT PID" in v.next_step


def test_a_tracer_on_a_rank_that_is_not_stopped_is_not_a_tracing_stop() -> None:
    # GIVEN rank 2 with its tracer still listed but in state S (a tool's strace, or a py-spy
    # dump passing by, traces without stopping it)
    passing = map_rank(traced(), 2, lambda r: replace(r, state="S"))
    v = diagnose(passing).verdicts[0]
    # THEN it is not said to be held by that tracer, nor told to detach it
    assert v.culprit_ranks == (2,), v
    assert "tracing stop" not in v.summary and "detach" not in v.next_step


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_reads_the_tracer_of_a_real_process() -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    tracer = None
    try:
        assert read_tracer(sleeper.pid) is None
        tracer = subprocess.Popen(["strace", "-p", str(sleeper.pid), "-e", "trace=none"],
                                  stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        found = read_tracer(sleeper.pid)
        while found is None and time.monotonic() < deadline:
            time.sleep(0.02)
            found = read_tracer(sleeper.pid)
        assert found is not None and found["pid"] == tracer.pid
        assert found["comm"] == "strace" and found["cmdline"][:2] == ["strace", "-p"]
    finally:
        for proc in (tracer, sleeper):
            if proc is not None:
                proc.kill()
                proc.wait()
