"""run_command: the one subprocess call site — timeouts end the whole process group."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from slurmdiag.transport.run import run_command


def test_output_and_exit_code_are_returned():
    # GIVEN a command that writes to both streams and fails
    argv = [sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"]
    # WHEN it runs
    result = run_command(argv, timeout=20)
    # THEN both streams and the exit code come back, and it is not ok
    assert result.stdout == "out\n"
    assert result.stderr == "err\n"
    assert result.returncode == 3
    assert not result.ok and not result.timed_out


def test_timeout_kills_the_whole_process_group(tmp_path):
    # GIVEN a command whose child (a grandchild of ours) would outlive it, writing its pid first
    pidfile = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "print('started', flush=True)\n"
        "time.sleep(60)\n"
    )
    # WHEN the deadline passes
    start = time.monotonic()
    result = run_command([sys.executable, "-c", script], timeout=2)
    # THEN the call returns near the deadline with what was printed, and the grandchild is gone
    assert result.timed_out
    assert time.monotonic() - start < 6
    assert "started" in result.stdout
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"grandchild {child} survived the timeout")


def test_missing_program_is_a_result_not_an_exception():
    # GIVEN a program that does not exist
    result = run_command(["slurmdiag-no-such-program-xyz"], timeout=5)
    # THEN the failure is described, not raised
    assert result.returncode is None
    assert result.start_error and "slurmdiag-no-such-program-xyz" in result.start_error


def test_stdout_lines_are_streamed_to_the_callback():
    # GIVEN a command printing three lines
    seen: list[str] = []
    run_command([sys.executable, "-c", "print('a'); print('b'); print('c')"], timeout=20,
                on_stdout_line=seen.append)
    # THEN the callback saw each line as it came
    assert seen == ["a", "b", "c"]


def test_ctrl_c_ends_the_group_and_keeps_what_came(tmp_path):
    # GIVEN a command in its own session that prints, then waits, and answers SIGTERM with a
    # last word (as the collector sends its partial document), with a grandchild
    # (the trap and the grandchild exist before "partial" is printed, the grandchild past its
    # exec: a SIGTERM that reaches a forked shell before it execs sleep can be lost with the
    # shell's trap, and then sleep outlived the group, 1 run in ~15)
    script = ("trap 'echo last-word; kill $s; exit 0' TERM; "
              "sleep 60 & s=$!; "
              "while [ \"$(cat /proc/$s/comm 2>/dev/null)\" != sleep ]; do :; done; "
              f"echo $s > {tmp_path}/grandchild; echo partial; wait")

    def ctrl_c(line: str) -> None:
        if line == "partial":
            raise KeyboardInterrupt

    # WHEN Ctrl-C arrives while it runs
    result = run_command(["sh", "-c", script], 30, on_stdout_line=ctrl_c)
    # THEN the result says so, holds the output until then and the answer to SIGTERM
    assert result.interrupted and not result.timed_out
    assert result.stdout.split() == ["partial", "last-word"]
    assert result.duration_s < 5
    # AND nothing of the group is left, once the signals it was sent are delivered (they are
    # asynchronous: on a loaded machine the grandchild was once seen still asleep at return)
    grandchild = int((tmp_path / "grandchild").read_text())

    def ended() -> bool:
        try:
            return "Z" in Path(f"/proc/{grandchild}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True

    deadline = time.monotonic() + 5
    while not ended() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ended()


def test_feed_writes_to_stdin_once_it_has_something_then_closes_it():
    # GIVEN a child that says it is ready, then waits for a line on stdin and echoes it, then
    # reads to the end of its input
    script = ("import sys; print('ready', flush=True); line = sys.stdin.readline(); "
              "print('got', line.strip(), flush=True); print('rest', repr(sys.stdin.read()))")
    seen: list[str] = []
    asked: list[float] = []

    def feed() -> bytes | None:
        asked.append(time.monotonic())
        return b"go\n" if "ready" in seen else None

    # WHEN run with a feed that answers only once the child said it is ready
    result = run_command([sys.executable, "-c", script], timeout=20, on_stdout_line=seen.append,
                         feed=feed)
    # THEN the child got the line, then the end of its input (stdin closed after the feed)
    assert result.ok, result.stderr
    assert result.stdout.splitlines() == ["ready", "got go", "rest ''"]
    # AND the feed was asked until it answered, then never again
    assert len(asked) >= 2 and "ready" in seen


def test_without_feed_or_input_the_child_reads_the_end_of_input_at_once():
    result = run_command([sys.executable, "-c", "import sys; print(repr(sys.stdin.read()))"],
                         timeout=20)
    assert result.stdout.strip() == "''"
