"""Numbers read from text a job or a tool controls: '²' and huge ranges never raise or bloat.

``str.isdigit()`` admits superscripts (``'²'.isdigit()`` is True) that ``int()`` refuses; these
are the sites the fuzzing did not reach (the collector, the post-mortem, sacct)."""

from __future__ import annotations

import time

from slurmdiag.collector import discovery
from slurmdiag.post_mortem.logs import _expand
from slurmdiag.slurm.sacct import _number


def test_listpids_rows_with_superscript_digits_are_noise() -> None:
    # GIVEN listpids text with a forged pid column
    text = "PID      JOBID    STEPID   LOCALID GLOBALID\n²        7        0        0       0\n4242 7 0 0 0\n"
    # WHEN parsed THEN the forged row is skipped, not an exception
    assert discovery.parse_listpids(text) == [(4242, "0")]


def test_post_mortem_task_ranges_are_bounded_before_they_are_built() -> None:
    # GIVEN srun's task list as a log line could forge it
    started = time.monotonic()
    # WHEN a range of 10**12 tasks is expanded THEN it is cut at 100,000 at once
    ranks = _expand("0-999999999999")
    assert len(ranks) == 100000 and ranks[:3] == [0, 1, 2]
    assert time.monotonic() - started < 5
    # AND superscript digits are no task at all
    assert _expand("²") == [] and _expand("1-²") == []
    assert _expand("1,3-4") == [1, 3, 4]


def test_sacct_numbers_refuse_superscripts() -> None:
    assert _number("²") is None
    assert _number("12") == 12
