"""A main thread that joins another thread. Where the job trains on a thread of its own and
keeps the main thread free for signals (`trainer_thread_queue`: the peers wait in their
all_reduce through their `trainer` threads), the rank is where the thread it joins is. Where
the peers wait on their main threads, the join is a step of the program and keeps its line
(`writer_close_no_sentinel`: closing a writer thread that was never told to stop). Both
recorded by `make accuracy`."""

from __future__ import annotations

from dataclasses import replace

import pytest
from snapfactory import map_rank, recorded

from slurmdiag.analysis import diagnose
from slurmdiag.snapshot import Rank, Snapshot


def first(snapshot: Snapshot):  # type: ignore[no-untyped-def]
    return diagnose(snapshot).verdicts[0]


@pytest.mark.parametrize("mode, severity", [("default", "critical"), ("samples1", "warning")])
def test_a_join_of_the_thread_that_trains_is_where_that_thread_is(mode: str, severity: str) -> None:
    v = first(recorded(f"trainer_thread_queue.{mode}.joined"))
    # it named the main thread's join loop (line 58)
    assert (v.kind, v.severity, v.culprit_ranks) == ("straggler", severity, (2,)), v
    assert v.sites[0].endswith("trainer_thread_queue.py:47")
    assert "rank 2 is in its thread trainer in train (" in v.summary
    assert "its main thread joins it at " in v.summary and "trainer_thread_queue.py:58" in v.summary


def test_a_join_in_the_programs_own_steps_keeps_its_line() -> None:
    v = first(recorded("writer_close_no_sentinel.default.joined"))
    assert (v.kind, v.severity, v.culprit_ranks) == ("straggler", "critical", (3,)), v
    assert v.sites[0].endswith("writer_close_no_sentinel.py:56")
    assert "waits on thread metrics-writer in MetricsWriter._write" in v.summary


def test_the_thread_of_the_peers_role_is_chosen_among_several() -> None:
    # GIVEN rank 2 with a second thread of the job's code listed before its trainer
    recording = recorded("trainer_thread_queue.default.joined")

    def decoy_first(rank: Rank) -> Rank:
        samples = []
        for sample in rank.samples:
            trainer = next(t for t in sample.threads if t.name == "trainer")
            decoy = replace(trainer, name="uploader", thread_id=trainer.thread_id + 1,
                            os_thread_id=(trainer.os_thread_id or 0) + 1)
            samples.append(replace(sample, threads=(decoy, *sample.threads)))
        return replace(rank, samples=tuple(samples))

    v = first(map_rank(recording, 2, decoy_first))
    # THEN the trainer, the role its peers wait through, is named, not the first listed
    assert "rank 2 is in its thread trainer in train (" in v.summary, v.summary
