"""Tracebacks and srun task exits in job logs: how a rank that is gone went away."""

from __future__ import annotations

from pathlib import Path

from slurmdiag.parsers.job_log import parse_python_tracebacks, parse_srun_task_exits

LOG = (Path(__file__).parent.parent / "fixtures/job_logs/local_dead_rank_srun_K0.out").read_text()


def test_traceback_of_the_dead_rank_gives_its_innermost_frame():
    # GIVEN the real log of the dead_rank scenario (rank 3 raised before init_process_group)
    (finding,) = parse_python_tracebacks(LOG, "job.out")
    # THEN the exception and the innermost frame are read
    assert finding.kind == "traceback"
    assert finding.fields["exception"] == "FileNotFoundError"
    assert finding.fields["site"] == "/work/main/tests/scenarios/dead_rank.py:36"
    assert finding.fields["function"] == "open_shard_index"
    assert finding.fields["frames"].splitlines()[0].endswith("dead_rank.py:66:<module>")
    assert finding.rank is None  # srun without --label: no prefix names the rank


def test_srun_names_the_task_that_exited_and_not_the_ones_it_terminated():
    # GIVEN the same log: task 3 exited 1, srun then terminated tasks 0-2
    exits = parse_srun_task_exits(LOG, "job.out")
    # THEN only task 3 is reported, with its node and exit
    assert [(f.rank, f.host, f.fields["exit"]) for f in exits] == [
        (3, "node002", "Exited with exit code 1")
    ]


def test_prefixed_tracebacks_of_two_ranks_interleave_and_are_kept_apart():
    # GIVEN (SYNTHETIC) torchrun's [rankN]: prefixes with two ranks' tracebacks interleaved
    text = (
        "[rank1]:Traceback (most recent call last):\n"
        "[rank2]:Traceback (most recent call last):\n"
        '[rank1]:  File "/app/train.py", line 10, in <module>\n'
        '[rank2]:  File "/app/train.py", line 10, in <module>\n'
        '[rank1]:  File "/app/data.py", line 5, in load\n'
        "[rank1]:    open(path)\n"
        '[rank2]:  File "/app/model.py", line 7, in forward\n'
        "[rank2]:RuntimeError: shape mismatch\n"
        "[rank1]:OSError: [Errno 5] Input/output error\n"
        "srun: error: gpu7: tasks 4-5: Killed"
    )
    found = {f.rank: f for f in parse_python_tracebacks(text, "log")}
    assert found[1].fields["site"] == "/app/data.py:5" and found[1].fields["exception"] == "OSError"
    assert found[2].fields["site"] == "/app/model.py:7" and found[2].text == "RuntimeError: shape mismatch"
    # AND each says how much the job wrote after it (non-blank lines to the end)
    assert (found[2].fields["lines_after"], found[1].fields["lines_after"]) == ("2", "1")
    assert [f.rank for f in parse_srun_task_exits(text, "log")] == [4, 5]


def test_text_without_tracebacks_gives_nothing():
    assert parse_python_tracebacks("all fine\nTraceback nothing\n", "x") == ()


def test_lines_after_count_what_the_job_wrote_after_the_exception_line():
    # GIVEN the real log's traceback, then (SYNTHETIC) blank lines and three step lines
    (before,) = parse_python_tracebacks(LOG, "job.out")
    (after,) = parse_python_tracebacks(LOG + "\n\nstep 1\n  \nstep 2\nstep 3\n", "job.out")
    # THEN blank lines do not count
    assert int(after.fields["lines_after"]) == int(before.fields["lines_after"]) + 3
