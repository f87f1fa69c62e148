"""The live line of attach: on a real terminal (a pty) it moves; on a pipe or with --json, nothing."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest
from support.slurm_jobs import cancel, submit_running

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def two_node_job(local_cluster):
    job = submit_running("-N2", "--ntasks-per-node=1", "--time=10", "-o", "/dev/null",
                         "-J", "slurmdiag-progress-test", "--wrap", "srun sleep 300")
    yield job
    cancel(job)


def attach_argv(job: str, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "slurmdiag", "attach", job, "--samples", "1", "--strace", "0",
            "--no-report", "--out", str(out), *extra]


def run_with_stderr_on_a_pty(argv: list[str]) -> tuple[int, str, str]:
    """Run argv with stderr on a real pseudo-terminal, stdout on a pipe; (code, stdout, tty)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=slave, cwd=REPO)
    os.close(slave)
    seen = bytearray()
    while True:
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            seen.extend(chunk)
        elif proc.poll() is not None:
            break
    os.close(master)
    stdout = proc.stdout.read().decode() if proc.stdout else ""
    return proc.wait(timeout=60), stdout, seen.decode(errors="replace")


def test_on_a_terminal_the_live_line_shows_time_nodes_and_phase(two_node_job, tmp_path):
    code, stdout, tty = run_with_stderr_on_a_pty(attach_argv(two_node_job, tmp_path / "a"))
    assert code == 0, tty
    # THEN redrawn in place: elapsed time against the 30 s deadline, the phase, nodes answered
    frames = [f for f in tty.split("\r") if f.startswith("slurmdiag: ")]
    assert any("/ 30s, collecting through srun, nodes answered 0/2" in f for f in frames), frames
    assert any("nodes answered 2/2" in f for f in frames), frames
    assert any("analysing" in f for f in frames), frames
    # The clock moves, and the summary still goes to stdout untouched by the live line.
    times = [float(f.split()[1].rstrip("s")) for f in frames]
    assert times == sorted(times) and times[-1] > times[0]
    assert "slurmdiag: job " in stdout and "nodes answered" not in stdout


def test_no_live_line_on_a_pipe_nor_with_json(two_node_job, tmp_path):
    piped = subprocess.run(attach_argv(two_node_job, tmp_path / "p"), capture_output=True,
                           text=True, timeout=120, cwd=REPO, check=False)
    assert piped.returncode == 0 and "nodes answered" not in piped.stderr
    assert "\r" not in piped.stderr
    code, stdout, tty = run_with_stderr_on_a_pty(attach_argv(two_node_job, tmp_path / "j",
                                                             "--json"))
    assert code == 0 and stdout.startswith("{")
    assert "nodes answered" not in tty and "\r" not in tty.replace("\r\n", "\n")
