"""Hostile job-named paths: what the controller may open (docs/reliability.md, issue 12 points 1-2).

Each test reproduces a finding: a frame's file name or a job's StdOut that names something the
controller must not read, block on or exhaust memory on.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from slurmdiag import logs
from slurmdiag.report.render import read_source_lines
from slurmdiag.safeio import RefusedPath, job_uid, open_job_file
from slurmdiag.snapshot import Job

ME = os.geteuid()
OTHER_UID = 65534  # nobody: a job user that is not the controller's


def test_a_frame_naming_proc_self_environ_shows_nothing_of_the_controller() -> None:
    # GIVEN a rank whose code was compiled with the file name /proc/self/environ
    #   (the attaching process' environment, a webhook URL in it)
    os.environ["SLURMDIAG_TEST_SECRET"] = "https://hooks.example/SECRET"
    try:
        # WHEN the report reads the frame's source line, even for a job of the controller's user
        found = read_source_lines([("/proc/self/environ", 1), ("/proc/self/cmdline", 1)],
                                  owner_uid=ME)
    finally:
        del os.environ["SLURMDIAG_TEST_SECRET"]
    # THEN nothing is read
    assert found == {}


def test_a_frame_naming_a_root_only_file_of_another_user_is_not_read(tmp_path: Path) -> None:
    # GIVEN a 0600 file of the controller's user (root here) and a job of another user
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$hash:19000:0:99999:7:::\n")
    secret.chmod(0o600)
    # WHEN the report reads a frame naming it for that job
    found = read_source_lines([(str(secret), 1)], owner_uid=OTHER_UID)
    # THEN the line is not in the report
    assert found == {}


def test_a_symlink_to_a_foreign_file_is_not_followed(tmp_path: Path) -> None:
    # GIVEN a job-owned name that is a symlink to a file the job's user does not own
    secret = tmp_path / "secret"
    secret.write_text("token=abc\n")
    link = tmp_path / "train.py"
    link.symlink_to(secret)
    # WHEN it is read for a job of this user THEN the link is refused (O_NOFOLLOW)
    assert read_source_lines([(str(link), 1)], owner_uid=ME) == {}
    with pytest.raises(RefusedPath):
        os.close(open_job_file(link, owner_uid=ME))


def test_a_sparse_1_gib_source_file_costs_only_the_bound(tmp_path: Path) -> None:
    # GIVEN a sparse 1 GiB "source file" without a newline, and a frame at its line 2
    big = tmp_path / "big.py"
    with open(big, "wb") as fh:
        fh.truncate(1 << 30)
    # WHEN the report reads it
    started = time.monotonic()
    found = read_source_lines([(str(big), 2)], owner_uid=ME)
    # THEN no MemoryError, nothing found, and only the bound was read (well under a second)
    assert found == {}
    assert time.monotonic() - started < 5


def test_own_regular_files_still_give_their_lines(tmp_path: Path) -> None:
    # GIVEN the job user's own source file THEN its lines are read, long lines cut
    source = tmp_path / "train.py"
    source.write_text("import torch\n" + "x" * 5000 + "\n    dist.barrier()\n")
    found = read_source_lines([(str(source), 3), (str(source), 2)], owner_uid=ME)
    assert found[f"{source}:3"] == "    dist.barrier()"
    assert len(found[f"{source}:2"]) <= 1000


def test_job_uid_resolves_names_numbers_and_scontrol_form() -> None:
    assert job_uid("root") == 0
    assert job_uid("root(0)") == 0
    assert job_uid("1234") == 1234
    assert job_uid("alice(1000)") == 1000
    assert job_uid("no-such-user-here") is None
    assert job_uid(None) is None
    assert job_uid("²") is None


# ---------------------------------------------------------------- job logs (point 2)


def _job(stdout: str, user: str = "root") -> Job:
    return Job(id="1", state="RUNNING", user=user, stdout=stdout, stderr=stdout)


def test_a_job_whose_output_is_dev_zero_costs_nothing() -> None:
    # GIVEN a job whose StdOut is /dev/zero (the attach was killed for memory)
    # WHEN its logs are read THEN nothing is read at all
    assert logs.read_head_and_tail("/dev/zero", owner_uid=ME) is None
    assert logs.findings_from_job_logs(_job("/dev/zero")) == ()


def test_a_fifo_as_job_output_does_not_block(tmp_path: Path) -> None:
    # GIVEN a job whose StdOut is a FIFO nobody writes to (open() blocked for good)
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    result: list[object] = []
    worker = threading.Thread(
        target=lambda: result.append(logs.read_head_and_tail(str(fifo), owner_uid=ME)),
        daemon=True,
    )
    # WHEN its log is read
    worker.start()
    worker.join(5)
    # THEN the call returns at once with nothing
    if worker.is_alive():  # unblock the old code's open() so the test process can end
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        worker.join(5)
        pytest.fail("reading a FIFO job log blocked")
    assert result == [None]


def test_a_job_log_symlinked_to_a_root_file_is_not_read(tmp_path: Path) -> None:
    # GIVEN a job of another user whose StdOut is a symlink to a root-only file
    secret = tmp_path / "secret"
    secret.write_text("NCCL INFO NET/Socket : Using [0]secret:10.0.0.1<0>\n")
    secret.chmod(0o600)
    link = tmp_path / "job.out"
    link.symlink_to(secret)
    # THEN neither the link nor the file itself is read for that job
    assert logs.read_head_and_tail(str(link), owner_uid=OTHER_UID) is None
    assert logs.read_head_and_tail(str(secret), owner_uid=OTHER_UID) is None
    assert logs.findings_from_job_logs(_job(str(secret), user="nobody")) == ()


def test_a_huge_job_log_reads_head_and_tail_only(tmp_path: Path) -> None:
    # GIVEN a sparse 8 GiB job log with a line at its head and one at its tail
    log = tmp_path / "job.out"
    with open(log, "wb") as fh:
        fh.write(b"head line\n")
        fh.seek(8 << 30)
        fh.write(b"\nlast line\n")
    # WHEN it is read THEN only the bounds are read, head and tail lines kept
    text = logs.read_head_and_tail(str(log), owner_uid=ME, head=4096, tail=4096)
    assert text is not None
    assert len(text) <= 8192 + 1
    assert text.startswith("head line") and text.rstrip().endswith("last line")
