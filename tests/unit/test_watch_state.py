"""The watchdog's sqlite state and run lock: one alert per job and verdict, even under races."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slurmdiag.snapshot import Verdict
from slurmdiag.watch.state import (
    GIVE_UP_AFTER_S,
    STALE_SENDING_S,
    OutputFile,
    StateDB,
    WatchLock,
    verdict_fingerprint,
)

T0 = 1_800_000_000.0
HANG = Verdict("mismatched_collective", "critical", "rank 3 differs", (3,), ("train.py:88",))
OTHER = Verdict("straggler", "critical", "rank 5 reads", (5,), ("data.py:10",))


@pytest.fixture
def db(tmp_path: Path) -> Iterator[StateDB]:
    state = StateDB(tmp_path / "state" / "watch.db")
    yield state
    state.close()


def out(size: int, mtime: float, path: str = "/logs/job.out") -> list[OutputFile]:
    return [OutputFile(path, size, mtime)]


def test_fingerprint_ignores_order_and_summary_text() -> None:
    reworded = Verdict("mismatched_collective", "warning", "other words", (3,), ("train.py:88",))
    assert verdict_fingerprint([HANG, OTHER]) == verdict_fingerprint([OTHER, reworded])
    assert verdict_fingerprint([HANG]) != verdict_fingerprint([OTHER])
    assert verdict_fingerprint([]) == "unknown"


def test_first_sighting_is_quiet_since_the_files_mtime(db: StateDB) -> None:
    # GIVEN a job whose log was last written an hour before the watchdog first saw it
    seen = db.observe_job("1", name="a", user="u", outputs=out(100, T0 - 3600), now=T0)
    # THEN it counts as quiet for that hour already
    assert seen.first_sighting and seen.quiet_since == T0 - 3600
    # WHEN the file does not change  THEN the clock keeps running
    again = db.observe_job("1", name="a", user="u", outputs=out(100, T0 - 3600), now=T0 + 60)
    assert not again.changed and again.quiet_since == T0 - 3600
    # WHEN it grows  THEN the clock restarts
    grown = db.observe_job("1", name="a", user="u", outputs=out(150, T0 + 100), now=T0 + 120)
    assert grown.changed and grown.quiet_since == T0 + 120


def test_unknown_outputs_count_from_the_first_sighting(db: StateDB) -> None:
    first = db.observe_job("2", name=None, user=None, outputs=None, now=T0)
    later = db.observe_job("2", name=None, user=None, outputs=None, now=T0 + 900)
    assert first.quiet_since == T0 and later.quiet_since == T0 and not later.changed


def test_future_mtime_is_clamped_to_now(db: StateDB) -> None:
    seen = db.observe_job("3", name=None, user=None, outputs=out(1, T0 + 500), now=T0)
    assert seen.quiet_since == T0


def claim(db: StateDB, fingerprint: str, now: float, cooldown: float = 1800.0) -> int | None:
    return db.claim_stuck_alert(
        "7", fingerprint=fingerprint, payload={"event": "stuck"}, now=now, cooldown_s=cooldown
    )


def test_one_alert_per_job_and_verdict(db: StateDB) -> None:
    first = claim(db, "F1", T0)
    assert first is not None
    db.finish_alert(first, ok=True, error=None, attempts=1, now=T0)
    # Same verdict later: nothing new, however long after.
    assert claim(db, "F1", T0 + 10 * 86400) is None
    # New verdict within the cooldown: held back; after it: posted, the old alert is closed.
    assert claim(db, "F2", T0 + 60) is None
    second = claim(db, "F2", T0 + 1900)
    assert second is not None
    alerts = db.alerts("7")
    assert [(a.fingerprint, a.open, a.status) for a in alerts] == [
        ("F1", False, "sent"),
        ("F2", True, "sending"),
    ]
    assert db.open_stuck_fingerprint("7") == "F2"


def test_a_failed_alert_is_not_claimed_again_but_retried(db: StateDB) -> None:
    alert_id = claim(db, "F1", T0)
    assert alert_id is not None
    db.finish_alert(alert_id, ok=False, error="HTTP 500", attempts=4, now=T0)
    assert claim(db, "F1", T0 + 600) is None  # still the same verdict: retry, not a new alert
    (pending,) = db.retry_candidates(now=T0 + 300, created_before=T0 + 300)
    assert pending.id == alert_id and pending.last_error == "HTTP 500"
    assert db.claim_retry(alert_id, now=T0 + 300)
    assert not db.claim_retry(alert_id, now=T0 + 301)  # someone has it now
    db.finish_alert(alert_id, ok=True, error=None, attempts=1, now=T0 + 302)
    assert db.retry_candidates(now=T0 + 400, created_before=T0 + 400) == []
    assert db.alerts("7")[0].attempts == 5


def test_claims_of_a_dead_run_are_retried_after_a_while(db: StateDB) -> None:
    alert_id = claim(db, "F1", T0)
    assert db.retry_candidates(now=T0 + 60, created_before=T0 + 60) == []
    (stale,) = db.retry_candidates(now=T0 + STALE_SENDING_S + 1, created_before=T0 + 1)
    assert stale.id == alert_id


def test_failed_alerts_are_given_up_after_a_day(db: StateDB) -> None:
    alert_id = claim(db, "F1", T0)
    assert alert_id is not None
    db.finish_alert(alert_id, ok=False, error="down", attempts=1, now=T0)
    later = T0 + GIVE_UP_AFTER_S + 1
    assert db.retry_candidates(now=later, created_before=later) == []
    assert db.alerts("7")[0].status == "dropped"


def test_recovered_is_claimed_only_after_a_delivered_stuck_alert(db: StateDB) -> None:
    # GIVEN a stuck alert that was delivered
    alert_id = claim(db, "F1", T0)
    assert alert_id is not None
    db.finish_alert(alert_id, ok=True, error=None, attempts=1, now=T0)
    # WHEN the job recovers  THEN one recovered alert, and the stuck one is closed
    recovered = db.claim_recovered_alert("7", payload={}, now=T0 + 60, deliver=True)
    assert recovered is not None
    assert db.claim_recovered_alert("7", payload={}, now=T0 + 61, deliver=True) is None
    assert db.open_stuck_fingerprint("7") is None
    # AND the same verdict later is a new incident (outside the cooldown)
    assert claim(db, "F1", T0 + 4000) is not None


def test_undelivered_stuck_alert_is_dropped_on_recovery(db: StateDB) -> None:
    alert_id = claim(db, "F1", T0)
    assert alert_id is not None
    db.finish_alert(alert_id, ok=False, error="down", attempts=1, now=T0)
    assert db.claim_recovered_alert("7", payload={}, now=T0 + 60, deliver=True) is None
    (alert,) = db.alerts("7")
    assert alert.status == "dropped" and "recovered before delivery" in (alert.last_error or "")
    assert db.retry_candidates(now=T0 + 100, created_before=T0 + 100) == []


def test_stuck_marks_and_clears(db: StateDB) -> None:
    db.observe_job("9", name="n", user="u", outputs=None, now=T0)
    db.mark_checked("9", now=T0, stuck=True, verdicts=[HANG])
    db.mark_checked("9", now=T0 + 60, stuck=True, verdicts=[HANG])
    record = db.job("9")
    assert record is not None and record.stuck_since == T0 and record.last_checked == T0 + 60
    assert [r.job_id for r in db.stuck_jobs()] == ["9"]
    assert db.clear_stuck("9", now=T0 + 120, ended=True)
    assert not db.clear_stuck("9", now=T0 + 121)
    assert db.stuck_jobs() == [] and db.jobs_not_ended() == []


def test_state_file_is_private(tmp_path: Path) -> None:
    StateDB(tmp_path / "s" / "watch.db").close()
    assert oct(os.stat(tmp_path / "s" / "watch.db").st_mode & 0o777) == "0o600"
    assert oct(os.stat(tmp_path / "s").st_mode & 0o777) == "0o700"


def test_lock_is_exclusive_and_released(tmp_path: Path) -> None:
    first, second = WatchLock(tmp_path / "l.lock"), WatchLock(tmp_path / "l.lock")
    assert first.acquire()
    assert not second.acquire()
    first.release()
    assert second.acquire()
    second.release()


def _hold_lock(path: str, ready: Any, done: Any) -> None:
    lock = WatchLock(Path(path))
    assert lock.acquire()
    ready.set()
    done.wait(10)


def test_lock_excludes_another_process(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    ready, done = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_lock, args=(str(tmp_path / "l.lock"), ready, done))
    holder.start()
    try:
        assert ready.wait(10)
        assert not WatchLock(tmp_path / "l.lock").acquire()
    finally:
        done.set()
        holder.join(10)
    # The holder is gone: its lock went with it.
    assert WatchLock(tmp_path / "l.lock").acquire()


def _claim_in_process(path: str, barrier: Any, results: Any) -> None:
    state = StateDB(Path(path))
    barrier.wait(10)
    results.put(
        state.claim_stuck_alert(
            "7", fingerprint="F1", payload={}, now=T0, cooldown_s=0.0, deliver=True
        )
    )
    state.close()


def test_concurrent_claims_from_processes_yield_one_alert(tmp_path: Path) -> None:
    # GIVEN four processes that skip the run lock and claim the same alert at the same moment
    path = tmp_path / "watch.db"
    StateDB(path).close()
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    workers = [
        ctx.Process(target=_claim_in_process, args=(str(path), barrier, results)) for _ in range(4)
    ]
    for worker in workers:
        worker.start()
    claims = [results.get(timeout=30) for _ in workers]
    for worker in workers:
        worker.join(10)
    # THEN exactly one wins (BEGIN IMMEDIATE serialises the check-and-insert)
    assert sum(1 for c in claims if c is not None) == 1
    with StateDB(path) as state:
        assert len(state.alerts("7")) == 1
