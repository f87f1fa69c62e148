"""The watchdog's memory between runs: an sqlite file (stdlib) and an exclusive run lock.

Tables:
- ``jobs``: every running job seen — first/last seen, the size and mtime of its StdOut/StdErr,
  since when they stopped growing (``quiet_since``), when it was last attached to, since when it is
  stuck and the fingerprint of its verdict (kind + culprit ranks + sites).
- ``alerts``: every notification — ``stuck`` or ``recovered``, its fingerprint, the message content
  (JSON, so a retry resends what was decided), and its delivery ``status``:
  ``sending`` (claimed, in flight) → ``sent`` | ``failed`` (retried by later runs) | ``dropped``
  (given up, or the job recovered before it was delivered) | ``disabled`` (no notifier configured).
  A ``stuck`` alert stays *open* until the job recovers or its verdict changes.

Two overlapping runs never double-alert: ``WatchLock`` (flock on a file next to the db) keeps a
second run out, and every alert is *claimed* in a ``BEGIN IMMEDIATE`` transaction that first checks
what was already claimed — which also holds where flock is not shared (NFS, several login nodes).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurmdiag.snapshot import Verdict

if TYPE_CHECKING:
    from typing_extensions import Self

SCHEMA_VERSION = 1
# A claim still 'sending' after this long belongs to a run that died mid-post: retry it.
STALE_SENDING_S = 900.0
# Failed deliveries are retried by later runs for this long, then dropped.
GIVE_UP_AFTER_S = 86400.0
# Forget jobs and alerts this long after they were last seen.
FORGET_JOBS_AFTER_S = 7 * 86400.0
FORGET_ALERTS_AFTER_S = 30 * 86400.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id        TEXT PRIMARY KEY,
    name          TEXT,
    user          TEXT,
    first_seen    REAL NOT NULL,
    last_seen     REAL NOT NULL,
    output_sig    TEXT,
    output_size   INTEGER,
    output_mtime  REAL,
    quiet_since   REAL NOT NULL,
    last_checked  REAL,
    stuck_since   REAL,
    fingerprint   TEXT,
    verdicts_json TEXT,
    recovered_at  REAL,
    ended_at      REAL
);
CREATE TABLE IF NOT EXISTS alerts (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id        TEXT NOT NULL,
    event         TEXT NOT NULL,
    fingerprint   TEXT NOT NULL,
    created       REAL NOT NULL,
    status        TEXT NOT NULL,
    open          INTEGER NOT NULL DEFAULT 1,
    attempts      INTEGER NOT NULL DEFAULT 0,
    last_attempt  REAL,
    sent_at       REAL,
    last_error    TEXT,
    report_path   TEXT,
    payload_json  TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS alerts_job ON alerts (job_id, event, id);
CREATE INDEX IF NOT EXISTS alerts_status ON alerts (status);
"""


def verdict_fingerprint(verdicts: Sequence[Verdict]) -> str:
    """Stable identity of a diagnosis: kinds, culprit ranks and sites, order-independent."""
    parts = sorted(
        f"{v.kind}|{','.join(str(r) for r in sorted(set(v.culprit_ranks)))}|"
        f"{','.join(sorted(set(v.sites)))}"
        for v in verdicts
    )
    return ";".join(parts) or "unknown"


@dataclass(frozen=True)
class OutputFile:
    path: str
    size: int
    mtime: float


@dataclass(frozen=True)
class OutputObservation:
    """What the StdOut/StdErr files say this run."""

    quiet_since: float  # no growth since then
    first_sighting: bool
    changed: bool  # grew or changed since the previous run


@dataclass(frozen=True)
class JobRecord:
    job_id: str
    name: str | None
    user: str | None
    first_seen: float
    last_seen: float
    quiet_since: float
    last_checked: float | None
    stuck_since: float | None
    fingerprint: str | None
    ended_at: float | None


@dataclass(frozen=True)
class AlertRecord:
    id: int
    job_id: str
    event: str
    fingerprint: str
    created: float
    status: str
    open: bool
    attempts: int
    last_attempt: float | None
    sent_at: float | None
    last_error: str | None
    report_path: str | None
    payload: dict[str, Any]


class WatchLock:
    """Exclusive, non-blocking ``flock`` on a lock file; released when the process ends, even on a crash."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> bool:
        """True when this run holds the lock; False when another run does."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except OSError:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class StateDB:
    """The sqlite state; one instance per run, used from one thread."""

    def __init__(self, path: Path, *, busy_timeout_s: float = 30.0) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        created = not path.exists()
        self._db = sqlite3.connect(str(path), timeout=busy_timeout_s, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        if created:
            with contextlib.suppress(OSError):
                os.chmod(path, 0o600)  # job names, users and paths are not for everyone
        with self._transaction():
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    self._db.execute(statement)
            if version == 0:
                self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE``: the write lock is taken before anything is read."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    # ---------------------------------------------------------------------------------- jobs

    def job(self, job_id: str) -> JobRecord | None:
        row = self._db.execute("SELECT * FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        return _job_record(row) if row else None

    def observe_job(
        self,
        job_id: str,
        *,
        name: str | None,
        user: str | None,
        outputs: Sequence[OutputFile] | None,
        now: float,
    ) -> OutputObservation:
        """Record this run's sighting of a running job and the state of its output files.

        A first sighting is quiet since the files' mtime (so a job silent for hours before the
        watchdog started counts at once); later, any change of size or mtime restarts the clock.
        ``outputs=None`` means the files are unknown or unreadable: no cheap signal, the clock
        runs from the first sighting.
        """
        signature = json.dumps([[o.path, o.size, o.mtime] for o in outputs]) if outputs else None
        size = sum(o.size for o in outputs) if outputs else None
        mtime = max(o.mtime for o in outputs) if outputs else None
        with self._transaction() as db:
            row = db.execute(
                "SELECT output_sig, quiet_since, ended_at FROM jobs WHERE job_id = ?", (job_id,)
            ).fetchone()
            if row is None:
                quiet_since = min(mtime, now) if mtime is not None else now
                db.execute(
                    "INSERT INTO jobs (job_id, name, user, first_seen, last_seen, output_sig,"
                    " output_size, output_mtime, quiet_since) VALUES (?,?,?,?,?,?,?,?,?)",
                    (job_id, name, user, now, now, signature, size, mtime, quiet_since),
                )
                return OutputObservation(quiet_since, first_sighting=True, changed=False)
            changed = signature is not None and signature != row["output_sig"]
            quiet_since = now if changed else float(row["quiet_since"])
            db.execute(
                "UPDATE jobs SET name = ?, user = ?, last_seen = ?, ended_at = NULL,"
                " output_sig = COALESCE(?, output_sig), output_size = COALESCE(?, output_size),"
                " output_mtime = COALESCE(?, output_mtime), quiet_since = ? WHERE job_id = ?",
                (name, user, now, signature, size, mtime, quiet_since, job_id),
            )
            return OutputObservation(quiet_since, first_sighting=False, changed=changed)

    def mark_checked(
        self,
        job_id: str,
        *,
        now: float,
        stuck: bool,
        verdicts: Sequence[Verdict] = (),
    ) -> None:
        """Record an attach: stuck (with its verdicts) or not."""
        fingerprint = verdict_fingerprint(verdicts) if stuck else None
        verdicts_json = json.dumps([_verdict_dict(v) for v in verdicts]) if verdicts else None
        with self._transaction() as db:
            if stuck:
                db.execute(
                    "UPDATE jobs SET last_checked = ?, stuck_since = COALESCE(stuck_since, ?),"
                    " fingerprint = ?, verdicts_json = ? WHERE job_id = ?",
                    (now, now, fingerprint, verdicts_json, job_id),
                )
            else:
                db.execute(
                    "UPDATE jobs SET last_checked = ?, verdicts_json = ? WHERE job_id = ?",
                    (now, verdicts_json, job_id),
                )

    def clear_stuck(self, job_id: str, *, now: float, ended: bool = False) -> bool:
        """The job progressed or ended; True when it had been stuck."""
        with self._transaction() as db:
            row = db.execute("SELECT stuck_since FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
            was_stuck = row is not None and row["stuck_since"] is not None
            db.execute(
                "UPDATE jobs SET stuck_since = NULL, fingerprint = NULL,"
                " recovered_at = CASE WHEN stuck_since IS NULL THEN recovered_at ELSE ? END,"
                " ended_at = CASE WHEN ? THEN ? ELSE ended_at END WHERE job_id = ?",
                (now, ended, now, job_id),
            )
            return was_stuck

    def open_stuck_fingerprint(self, job_id: str) -> str | None:
        """Fingerprint of the job's open stuck alert (posted, pending or disabled), if any."""
        row = self._db.execute(
            "SELECT fingerprint FROM alerts WHERE job_id = ? AND event = 'stuck' AND open = 1"
            " ORDER BY id DESC LIMIT 1",
            (job_id,),
        ).fetchone()
        return row["fingerprint"] if row else None

    def jobs_not_ended(self) -> list[JobRecord]:
        """Jobs the state believes running (the caller compares them with squeue)."""
        rows = self._db.execute("SELECT * FROM jobs WHERE ended_at IS NULL").fetchall()
        return [_job_record(r) for r in rows]

    def stuck_jobs(self) -> list[JobRecord]:
        rows = self._db.execute(
            "SELECT * FROM jobs WHERE stuck_since IS NOT NULL AND ended_at IS NULL"
        ).fetchall()
        return [_job_record(r) for r in rows]

    def forget_old(self, now: float) -> None:
        with self._transaction() as db:
            db.execute("DELETE FROM jobs WHERE last_seen < ?", (now - FORGET_JOBS_AFTER_S,))
            db.execute(
                "DELETE FROM alerts WHERE created < ? AND status != 'sending'",
                (now - FORGET_ALERTS_AFTER_S,),
            )

    # -------------------------------------------------------------------------------- alerts

    def claim_stuck_alert(
        self,
        job_id: str,
        *,
        fingerprint: str,
        payload: dict[str, Any],
        now: float,
        cooldown_s: float,
        deliver: bool = True,
        report_path: str | None = None,
    ) -> int | None:
        """Claim the right to post "job J is stuck with verdict F"; None when it is not ours to post.

        Not ours when an open stuck alert of this job already carries F (posted, failed and waiting
        for a retry, or being posted by another run), or when the last alert of this job is younger
        than ``cooldown_s`` (the verdict changed, but we do not flood the channel). A new verdict
        closes the previous open alert.
        """
        with self._transaction() as db:
            last_open = db.execute(
                "SELECT id, fingerprint FROM alerts WHERE job_id = ? AND event = 'stuck'"
                " AND open = 1 ORDER BY id DESC LIMIT 1",
                (job_id,),
            ).fetchone()
            if last_open is not None and last_open["fingerprint"] == fingerprint:
                return None
            last_any = db.execute(
                "SELECT MAX(created) FROM alerts WHERE job_id = ? AND status != 'dropped'",
                (job_id,),
            ).fetchone()[0]
            if last_any is not None and now - last_any < cooldown_s:
                return None
            db.execute(
                "UPDATE alerts SET open = 0,"
                " status = CASE WHEN status IN ('failed', 'sending') THEN 'dropped' ELSE status END,"
                " last_error = CASE WHEN status IN ('failed', 'sending')"
                "   THEN 'superseded by a newer verdict' ELSE last_error END"
                " WHERE job_id = ? AND event = 'stuck' AND open = 1",
                (job_id,),
            )
            cursor = db.execute(
                "INSERT INTO alerts (job_id, event, fingerprint, created, status, open,"
                " report_path, payload_json) VALUES (?, 'stuck', ?, ?, ?, 1, ?, ?)",
                (
                    job_id,
                    fingerprint,
                    now,
                    "sending" if deliver else "disabled",
                    report_path,
                    json.dumps(payload),
                ),
            )
            return int(cursor.lastrowid or 0)

    def claim_recovered_alert(
        self,
        job_id: str,
        *,
        payload: dict[str, Any],
        now: float,
        deliver: bool,
    ) -> int | None:
        """Close the job's open stuck alerts; claim a "recovered" post when one was delivered.

        Undelivered stuck alerts are dropped instead: telling a channel that a job it never heard
        about has recovered helps nobody.
        """
        with self._transaction() as db:
            rows = db.execute(
                "SELECT id, status, fingerprint FROM alerts WHERE job_id = ? AND event = 'stuck'"
                " AND open = 1 ORDER BY id",
                (job_id,),
            ).fetchall()
            if not rows:
                return None
            delivered = [r for r in rows if r["status"] == "sent"]
            db.execute(
                "UPDATE alerts SET open = 0,"
                " status = CASE WHEN status IN ('failed', 'sending') THEN 'dropped' ELSE status END,"
                " last_error = CASE WHEN status IN ('failed', 'sending')"
                "   THEN 'the job recovered before delivery' ELSE last_error END"
                " WHERE job_id = ? AND event = 'stuck' AND open = 1",
                (job_id,),
            )
            if not delivered or not deliver:
                return None
            cursor = db.execute(
                "INSERT INTO alerts (job_id, event, fingerprint, created, status, open,"
                " payload_json) VALUES (?, 'recovered', ?, ?, 'sending', 0, ?)",
                (job_id, delivered[-1]["fingerprint"], now, json.dumps(payload)),
            )
            return int(cursor.lastrowid or 0)

    def stuck_alert_delivered(self, job_id: str) -> bool:
        """Whether a "stuck" post about this job reached the channel (its latest incident)."""
        with self._transaction() as db:
            row = db.execute(
                "SELECT 1 FROM alerts WHERE job_id = ? AND event = 'stuck' AND status = 'sent'"
                " LIMIT 1",
                (job_id,),
            ).fetchone()
        return row is not None

    def claim_postmortem_alert(
        self,
        job_id: str,
        *,
        payload: dict[str, Any],
        now: float,
        deliver: bool,
        report_path: str | None = None,
    ) -> int | None:
        """Close the job's open stuck alerts and claim its one post-mortem post (None: had one)."""
        with self._transaction() as db:
            db.execute(
                "UPDATE alerts SET open = 0 WHERE job_id = ? AND event = 'stuck' AND open = 1",
                (job_id,),
            )
            if db.execute(
                "SELECT 1 FROM alerts WHERE job_id = ? AND event = 'postmortem' LIMIT 1", (job_id,)
            ).fetchone() is not None:
                return None
            cursor = db.execute(
                "INSERT INTO alerts (job_id, event, fingerprint, created, status, open,"
                " report_path, payload_json) VALUES (?, 'postmortem', '', ?, ?, 0, ?, ?)",
                (job_id, now, "sending" if deliver else "disabled", report_path,
                 json.dumps(payload)),
            )
            return int(cursor.lastrowid or 0) if deliver else None

    def finish_alert(
        self, alert_id: int, *, ok: bool, error: str | None, attempts: int, now: float
    ) -> None:
        with self._transaction() as db:
            db.execute(
                "UPDATE alerts SET status = ?, attempts = attempts + ?, last_attempt = ?,"
                " sent_at = CASE WHEN ? THEN ? ELSE sent_at END, last_error = ?"
                " WHERE id = ? AND status = 'sending'",
                ("sent" if ok else "failed", attempts, now, ok, now, error, alert_id),
            )

    def retry_candidates(self, *, now: float, created_before: float) -> list[AlertRecord]:
        """Failed alerts (and claims of runs that died mid-post) from earlier runs, oldest first."""
        with self._transaction() as db:
            db.execute(
                "UPDATE alerts SET status = 'dropped', open = 0,"
                " last_error = COALESCE(last_error, '') || ' (given up)'"
                " WHERE status IN ('failed', 'sending') AND created < ?",
                (now - GIVE_UP_AFTER_S,),
            )
        rows = self._db.execute(
            "SELECT * FROM alerts WHERE created < ? AND (status = 'failed'"
            " OR (status = 'sending' AND COALESCE(last_attempt, created) < ?)) ORDER BY id",
            (created_before, now - STALE_SENDING_S),
        ).fetchall()
        return [_alert_record(r) for r in rows]

    def claim_retry(self, alert_id: int, *, now: float) -> bool:
        """Take a failed alert for another attempt; False when another run took it first."""
        with self._transaction() as db:
            cursor = db.execute(
                "UPDATE alerts SET status = 'sending', last_attempt = ? WHERE id = ? AND"
                " (status = 'failed' OR (status = 'sending' AND COALESCE(last_attempt, created) < ?))",
                (now, alert_id, now - STALE_SENDING_S),
            )
            return cursor.rowcount == 1

    def release_claim(self, alert_id: int, *, error: str, now: float) -> None:
        """Put a claimed alert back to 'failed' without an attempt (skipped in this run)."""
        with self._transaction() as db:
            db.execute(
                "UPDATE alerts SET status = 'failed', last_error = ?,"
                " last_attempt = COALESCE(last_attempt, ?) WHERE id = ? AND status = 'sending'",
                (error, now, alert_id),
            )

    def alerts(self, job_id: str | None = None) -> list[AlertRecord]:
        if job_id is None:
            rows = self._db.execute("SELECT * FROM alerts ORDER BY id").fetchall()
        else:
            rows = self._db.execute(
                "SELECT * FROM alerts WHERE job_id = ? ORDER BY id", (job_id,)
            ).fetchall()
        return [_alert_record(r) for r in rows]

    def pending_count(self) -> int:
        return int(
            self._db.execute(
                "SELECT COUNT(*) FROM alerts WHERE status IN ('failed', 'sending')"
            ).fetchone()[0]
        )


def _verdict_dict(verdict: Verdict) -> dict[str, Any]:
    return {
        "kind": verdict.kind,
        "severity": verdict.severity,
        "summary": verdict.summary,
        "culprit_ranks": list(verdict.culprit_ranks),
        "sites": list(verdict.sites),
    }


def _job_record(row: sqlite3.Row) -> JobRecord:
    return JobRecord(
        job_id=row["job_id"],
        name=row["name"],
        user=row["user"],
        first_seen=row["first_seen"],
        last_seen=row["last_seen"],
        quiet_since=row["quiet_since"],
        last_checked=row["last_checked"],
        stuck_since=row["stuck_since"],
        fingerprint=row["fingerprint"],
        ended_at=row["ended_at"],
    )


def _alert_record(row: sqlite3.Row) -> AlertRecord:
    return AlertRecord(
        id=row["id"],
        job_id=row["job_id"],
        event=row["event"],
        fingerprint=row["fingerprint"],
        created=row["created"],
        status=row["status"],
        open=bool(row["open"]),
        attempts=row["attempts"],
        last_attempt=row["last_attempt"],
        sent_at=row["sent_at"],
        last_error=row["last_error"],
        report_path=row["report_path"],
        payload=json.loads(row["payload_json"]),
    )
