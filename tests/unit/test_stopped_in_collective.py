"""A rank stopped (SIGSTOP) inside the very collective its peers wait in: every rank's stack
is the same, only the process state sets it apart (`stopped_in_collective`, recorded by
`make accuracy`). It was called all_waiting, with no culprit."""

from __future__ import annotations

from dataclasses import replace

import pytest
from snapfactory import map_rank, recorded

from slurmdiag.analysis import diagnose


@pytest.mark.parametrize("mode, severity", [("default", "critical"), ("samples1", "warning")])
def test_a_rank_stopped_inside_the_collective_is_the_culprit(mode: str, severity: str) -> None:
    v = diagnose(recorded(f"stopped_in_collective.{mode}.frozen")).verdicts[0]
    assert (v.kind, v.severity, v.culprit_ranks) == ("straggler", severity, (2,)), v
    assert "rank 2 is stopped (state T)" in v.summary
    assert v.sites[0].endswith("stopped_in_collective.py:45")
    assert "kill -CONT" in v.next_step


def test_the_same_stacks_with_every_rank_running_stay_all_waiting() -> None:
    # GIVEN the recording with rank 2 asleep in the collective like the others (state S)
    thawed = map_rank(recorded("stopped_in_collective.default.frozen"), 2,
                      lambda r: replace(r, state="S", wchan="do_epoll_wait"))
    v = diagnose(thawed).verdicts[0]
    # THEN nothing sets a rank apart: the cause is below Python
    assert (v.kind, v.culprit_ranks) == ("all_waiting", ()), v


def test_a_job_stopped_as_a_whole_is_told_to_resume_not_to_check_its_network() -> None:
    # GIVEN every rank stopped in the collective (scancel --signal=STOP JOB)
    stopped = recorded("stopped_in_collective.default.frozen")
    for number in (0, 1, 3):
        stopped = map_rank(stopped, number,
                           lambda r: replace(r, state="T", wchan="do_signal_stop"))
    v = diagnose(stopped).verdicts[0]
    # THEN no rank is singled out, and the next step resumes the job
    assert (v.kind, v.culprit_ranks) == ("all_waiting", ()), v
    assert "stopped (state T)" in v.summary
    assert "scancel --signal=CONT" in v.next_step and "NIC" not in v.next_step
