"""Tests of slurmdiag.parsers.strace on real ``strace -c`` outputs (tests/fixtures/strace/).

``local_strace6.1_*`` was captured here (see tests/fixtures/LOCAL_SOURCES.md); the others are
public pastes listed in the shared SOURCES.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmdiag.parsers.strace import parse_strace_summary
from slurmdiag.snapshot import SyscallCount

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "strace"


def read(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_full_table_with_total_row_and_errors() -> None:
    # GIVEN a complete `strace -c echo hello` with the program output and the total row
    summary = parse_strace_summary(read("codeidx53802488013_strace_c_echo_full_with_total.txt"))
    # THEN every syscall row is read, the total row is not a syscall
    assert summary.status == "ok" and summary.message is None
    assert len(summary.syscalls) == 12
    assert "total" not in {s.syscall for s in summary.syscalls}
    assert summary.total_seconds == 0.0
    # AND the errors column is read where present
    by_name = {s.syscall: s for s in summary.syscalls}
    assert by_name["access"] == SyscallCount("access", calls=1, errors=1, seconds=0.0, percent=0.0)
    assert by_name["openat"].errors == 1 and by_name["openat"].calls == 2
    assert by_name["mmap"].calls == 8 and by_name["mmap"].errors == 0


def test_interrupted_table_after_detach_line_without_total() -> None:
    # GIVEN `strace -c` stopped with ^C: "^Cstrace: Process N detached", no total row
    summary = parse_strace_summary(
        read("codeidx19297156353_strace_c_futex_dominant_ctrlC_detached_PARTIAL.txt")
    )
    # THEN the rows are read and total_seconds is unknown
    assert summary.status == "ok"
    assert summary.total_seconds is None
    assert summary.message is not None and "total" in summary.message
    assert len(summary.syscalls) == 14
    assert summary.syscalls[0] == SyscallCount(
        "futex", calls=42367, errors=4, seconds=1.229840, percent=99.91
    )
    assert summary.syscalls[-1].syscall == "rt_sigprocmask"


def test_locale_decimal_commas() -> None:
    # GIVEN a table printed under es_AR: "33,78    0,000229"
    summary = parse_strace_summary(
        read("codeidx31110736218_strace_c_es_locale_decimal_comma_PARTIAL.txt")
    )
    # THEN commas are read as decimal points and the program's "Hello, world!" is skipped
    assert summary.status == "ok"
    assert summary.syscalls[0] == SyscallCount(
        "mmap", calls=8, errors=0, seconds=0.000229, percent=33.78
    )
    assert summary.syscalls[-1] == SyscallCount(
        "set_tid_address", calls=1, errors=0, seconds=0.000010, percent=1.47
    )
    assert len(summary.syscalls) == 14


def test_follow_forks_futex_only_table() -> None:
    # GIVEN `strace -f -c -e trace=futex` with the program's output line before the table
    summary = parse_strace_summary(read("codeidx70914559218_strace_fc_futex_only.txt"))
    # THEN the single futex row carries its 13513 errors
    assert summary.syscalls == (
        SyscallCount("futex", calls=37531, errors=13513, seconds=0.493130, percent=100.0),
    )


@pytest.mark.parametrize(
    ("name", "first", "count"),
    [
        ("scif_strace_c_table_truncated_by_author.txt", "munmap", 5),
        ("scif_strace_c_wait4_truncated_by_author.txt", "wait4", 5),
    ],
)
def test_table_cut_with_ellipsis_keeps_rows_before_it(name: str, first: str, count: int) -> None:
    # GIVEN an old (4.8) table whose author replaced the remaining rows with "..."
    summary = parse_strace_summary(read(name))
    # THEN the rows before "..." are read
    assert summary.status == "ok"
    assert summary.syscalls[0].syscall == first
    assert len(summary.syscalls) == count
    assert {s.syscall: s.errors for s in summary.syscalls}["open"] == 42


def test_local_attach_with_threads_and_detach_lines() -> None:
    # GIVEN a real `strace -c -f -p PID` stopped by SIGINT after 2 s on a blocked program;
    # the main thread sat in futex the whole time, so only the sleeper's calls completed
    summary = parse_strace_summary(read("local_strace6.1_c_f_attach_blocked.txt"))
    # THEN "attached with 2 threads" / "detached" lines are ignored and the total is read
    assert summary.status == "ok"
    assert summary.syscalls == (
        SyscallCount("clock_nanosleep", calls=4, errors=0, seconds=0.000052, percent=100.0),
    )
    assert summary.total_seconds == 0.000052
    assert summary.window_s == 0.0  # the caller knows the window, not the text


def test_no_call_completed_in_the_window_is_a_finding_not_an_error() -> None:
    # GIVEN a real `strace -c -f -p PID` (1 s, SIGINT) on a rank stuck in init_process_group:
    # both threads stayed in one call, and strace printed no table at all
    text = read("local_strace6.1_c_f_no_syscall_completed.txt")
    # (started by its full path, as the collector does, strace names itself so)
    for variant in (text, text.replace("strace:", "/usr/bin/strace:")):
        summary = parse_strace_summary(variant)
        # THEN that is an ok summary with no rows, and the message says what it means
        assert summary.status == "ok" and summary.syscalls == ()
        assert summary.message is not None and "no system call completed" in summary.message


def test_plain_strace_trace_is_an_error_status_not_an_exception() -> None:
    # GIVEN a plain strace trace (no -c), with program output inside a write() line
    summary = parse_strace_summary(read("issue_Pyrit492_strace_futex_wait_private_PARTIAL.txt"))
    # THEN the status says no table was found
    assert summary.status == "error"
    assert summary.message == "no 'strace -c' summary table in the output"
    assert summary.syscalls == ()


def test_strace_complaint_becomes_the_message() -> None:
    # GIVEN SYNTHETIC output of strace refused by ptrace (format as strace 6 prints it)
    text = "strace: attach: ptrace(PTRACE_SEIZE, 4242): Operation not permitted\n"
    # THEN that complaint is the error message
    summary = parse_strace_summary(text)
    assert summary.status == "error"
    assert summary.message == "attach: ptrace(PTRACE_SEIZE, 4242): Operation not permitted"
