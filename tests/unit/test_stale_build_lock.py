"""Ranks asleep in a library's poll loop (`stale_build_lock`, recorded by `make accuracy`):
torch's FileBaton.wait on a lock file a killed build left. The culprit's site is the job's
call into the library; the summary names the library function that loops."""

from __future__ import annotations

import pytest
from snapfactory import recorded

from slurmdiag.analysis import diagnose


@pytest.mark.parametrize("mode", ["default", "samples1"])
def test_the_sleepers_are_named_at_their_call_with_the_library_loop(mode: str) -> None:
    v = diagnose(recorded(f"stale_build_lock.{mode}.baton")).verdicts[0]
    assert (v.kind, v.culprit_ranks) == ("straggler", (2, 3)), v
    assert v.sites[0].endswith("stale_build_lock.py:48")
    assert "sleeping at " in v.summary
    assert "stale_build_lock.py:48 in FileBaton.wait (torch/utils/file_baton.py) while" in v.summary


def test_a_sleep_in_the_jobs_own_code_names_no_library() -> None:
    # GIVEN store_wait: rank 2 sleeps in its own poll loop (time.sleep, no library frame)
    v = diagnose(recorded("store_wait.samples1.caught_awake")).verdicts[0]
    # THEN its site stands alone
    assert v.culprit_ranks == (2,), v
    assert v.summary.startswith("rank 2 is sleeping at ") and "store_wait.py:31 while" in v.summary
