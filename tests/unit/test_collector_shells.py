"""Where a shell task is in its script (collector/shells.py): the line that runs the command it
waits for, read from real bash processes; and the liars that must name no line."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from slurmdiag.collector.shells import command_line, script_of, shell_line


def children(pid: int) -> list[int]:
    return [int(w) for w in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").decode().split("\0")


def started(script: Path, *args: str, cwd: Path | None = None) -> subprocess.Popen:
    """bash running ``script``, once a process below it runs ``sleep`` (or after 5 s): its first
    child alone may be a pipeline's subshell that has not forked its command yet."""
    proc = subprocess.Popen(["bash", str(script), *args], cwd=cwd, stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 5
    while not _runs_sleep(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return proc


def _runs_sleep(pid: int) -> bool:
    for kid in _descendants(pid):
        try:
            if Path(f"/proc/{kid}/comm").read_text().strip() == "sleep":
                return True
        except OSError:
            continue
    return False


@pytest.fixture
def procs():
    running: list[subprocess.Popen] = []
    yield running
    for p in running:
        for pid in [p.pid, *_descendants(p.pid)]:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        p.wait()


def _descendants(pid: int) -> list[int]:
    try:
        kids = children(pid)
    except FileNotFoundError:
        return []
    return [k for kid in kids for k in (kid, *_descendants(kid))]


STAGING = """#!/bin/bash
# stage the data, then train (sleep 3600 is the copy that never ends)
set -u
retry() {
    sleep 1
}
stage() {
    if [ "${1:-}" = slow ]; then
        sleep 3600  # the copy
    fi
}
stage "$@" | cat
exec python train.py
"""


def test_a_wrapper_is_found_at_its_commands_line_through_its_subshell(tmp_path, procs):
    # GIVEN bash running a wrapper whose function runs in a pipeline (a subshell of its own,
    # the same command line) and waits in `sleep 3600` at line 9; started by a relative path
    script = tmp_path / "stage.sh"
    script.write_text(STAGING)
    procs.append(started(Path("stage.sh"), "slow", cwd=tmp_path))
    pid = procs[-1].pid
    # THEN the place is line 9 of the script, by its absolute path (the shell's cwd)
    assert shell_line(pid, cmdline(pid), children) == f"{tmp_path}/stage.sh:9"
    # AND so it is whichever order the kernel lists the subshell and cat in
    assert shell_line(pid, cmdline(pid), lambda p: children(p)[::-1]) == f"{tmp_path}/stage.sh:9"


def test_a_wrapper_that_changed_its_directory_is_read_through_its_descriptor(tmp_path, procs):
    # GIVEN bash started on a relative path that moves to another directory before it waits,
    # that directory holding another script of the same name with the same command elsewhere
    (tmp_path / "stage.sh").write_text("#!/bin/bash\ncd elsewhere\n\nsleep 3600\n")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "stage.sh").write_text("sleep 3600\n")
    procs.append(started(Path("stage.sh"), cwd=tmp_path))
    pid = procs[-1].pid
    assert os.readlink(f"/proc/{pid}/cwd") == str(tmp_path / "elsewhere")
    # THEN the script read is the one the shell runs (its descriptor on it), at its line 4
    assert shell_line(pid, cmdline(pid), children) == f"{tmp_path}/stage.sh:4"


def test_a_shell_without_a_child_or_a_script_names_no_line(tmp_path, procs):
    # GIVEN bash in a builtin (read from a pipe nobody writes: no child), and bash -c
    script = tmp_path / "wait.sh"
    script.write_text("#!/bin/bash\nread line\nsleep 3600\n")
    proc = subprocess.Popen(["bash", str(script)], stdin=subprocess.PIPE)
    procs.append(proc)
    time.sleep(0.3)
    assert children(proc.pid) == []
    # THEN no line: the shell runs no command the script could be searched for
    assert shell_line(proc.pid, cmdline(proc.pid), children) is None
    inline = subprocess.Popen(["bash", "-c", "sleep 3600; true"])
    procs.append(inline)
    time.sleep(0.3)
    assert shell_line(inline.pid, cmdline(inline.pid), children) is None


def test_a_script_that_is_not_a_regular_file_is_not_read(tmp_path, procs):
    # GIVEN bash reading its script from a FIFO (bash <(...) is one): a read would block
    fifo = tmp_path / "script.fifo"
    os.mkfifo(fifo)
    proc = subprocess.Popen(["bash", str(fifo)])
    procs.append(proc)
    with open(fifo, "w") as feed:  # bash has it open; keep it open, give it a child
        feed.write("sleep 3600\n")
        feed.flush()
        deadline = time.monotonic() + 5
        while not children(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        started_at = time.monotonic()
        # THEN no line, at once
        assert shell_line(proc.pid, cmdline(proc.pid), children) is None
        assert time.monotonic() - started_at < 1


def test_the_line_is_chosen_by_the_commands_name_and_arguments():
    lines = [
        "#!/bin/bash",
        "# sleep 3600 is what we do when the copy hangs",   # 2: a comment
        "sleep 5  # let the mount settle",                  # 3: sleep, other argument
        "rsync -a --delete /data/shard /local/shard",       # 4
        "/usr/bin/sleep 3600 &&",                            # 5: the full path, both words
        "  echo done",
    ]
    text = "\n".join(lines)
    # THEN the line that spells the most of the command wins; comments are not code
    assert command_line(text, ["sleep", "3600"]) == 5
    assert command_line(text, ["sleep", "5"]) == 3
    assert command_line(text, ["/usr/bin/rsync", "-a", "--delete", "/data/shard", "/x"]) == 4
    # AND a command the script does not spell (started through a variable) names no line
    assert command_line(text, ["cp", "-r", "/data", "/local"]) is None
    # AND two lines as good as each other name none (a retry loop's two identical sleeps)
    assert command_line("sleep 10\nsleep 10\n", ["sleep", "10"]) is None
    # AND the command's name inside another word is not the command ("sleeper", "--sleep")
    assert command_line("run_sleeper 3600\nx --sleep 3600\n", ["sleep", "3600"]) is None


@pytest.mark.parametrize(("argv", "script"), [
    (["/bin/bash", "run.sh", "python", "train.py"], "run.sh"),
    (["bash", "-e", "-o", "pipefail", "/opt/run.sh"], "/opt/run.sh"),
    (["sh", "--", "-odd-name.sh"], "-odd-name.sh"),
    (["bash", "-c", "sleep 1"], None),
    (["bash", "-ec", "sleep 1"], None),
    (["bash", "-s"], None),
    (["bash"], None),
    (["python3", "run.sh"], None),
])
def test_the_script_a_shell_runs_is_read_from_its_command_line(argv, script):
    assert script_of(argv) == script


def test_a_node_of_tasks_alone_is_watched_long_enough_to_read_their_work():
    # GIVEN a node's look with no rank, only its step's tasks, just discovered; and one with a rank
    from types import SimpleNamespace

    from slurmdiag.collector.main import CHILD_IO_WINDOW_S, watch_tasks

    clock = SimpleNamespace(left=lambda: 60.0)
    now = time.monotonic()
    tasks = SimpleNamespace(ranks=[], entries=[{"pid": 1, "role": "task"}],
                            window_start={1: (now, 0, 0)}, clock=clock)
    ranked = SimpleNamespace(ranks=[{"pid": 2}], entries=[{"pid": 2, "role": "rank"},
                                                         {"pid": 1, "role": "task"}],
                             window_start={1: (now, 0, 0), 2: (now, 0, 0)}, clock=clock)
    # THEN the first waits out the window over which CPU and file I/O are read; the second not
    watch_tasks(ranked)
    assert time.monotonic() - now < CHILD_IO_WINDOW_S / 2
    watch_tasks(tasks)
    assert time.monotonic() - now >= CHILD_IO_WINDOW_S
    # AND never past the collector's deadline
    late = SimpleNamespace(**{**vars(tasks), "clock": SimpleNamespace(left=lambda: 1.0)},)
    late.window_start = {1: (time.monotonic(), 0, 0)}
    started_at = time.monotonic()
    watch_tasks(late)
    assert time.monotonic() - started_at < 0.1
