"""The stuck-job watchdog: one pass over the running jobs, for cron, scrontab or a systemd timer.

Per run (``Watchdog.run_once`` / ``run_once``):
1. take the run lock (a second, overlapping run exits 0 at once);
2. list running jobs (``squeue --json``, or the text format where Slurm lacks it) and filter them;
3. per job, cheap signals first: run time >= ``min_runtime``, StdOut/StdErr without growth for
   ``stale_after``; then a light attach (``confirm_samples`` samples) to confirm: hang verdicts of
   severity critical/warning and no ``progressing`` verdict;
4. a confirmed stuck job gets a full attach with its report in
   ``report_dir/<jobid>/<UTC timestamp>/report.html``, and one alert per verdict (state.py);
5. jobs that were stuck and progress again or end get an optional "recovered" message;
6. failed notifications of earlier runs are retried; the heartbeat file is written.

Exit codes: 0 nothing stuck, 1 stuck jobs found, >= 2 the watchdog itself failed (the
``SlurmdiagError`` exit codes: 5 Slurm unavailable, 7 configuration, 10 anything else).
A job whose attach fails is *inconclusive*: reported, never a failure of the run.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
import re
import socket
import sqlite3
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from slurmdiag.config import NotifySettings, Settings, WatchSettings, format_duration
from slurmdiag.errors import (
    JobNotFound,
    JobNotRunning,
    ParseError,
    SlurmdiagError,
    SlurmUnavailable,
)
from slurmdiag.options import AttachOptions
from slurmdiag.safeio import atomic_write, decimal_int, one_line
from slurmdiag.slurm.parse import (
    SQUEUE_TEXT_FORMAT,
    SlurmJob,
    array_task_name,
    parse_job_id,
    parse_squeue_json,
    parse_squeue_text,
)
from slurmdiag.snapshot import Snapshot, Verdict
from slurmdiag.vocabulary import HANG_KINDS as _HANG_KINDS
from slurmdiag.vocabulary import Severity, VerdictKind, severity_rank
from slurmdiag.watch.notify import Alert, SendResult, notify
from slurmdiag.watch.state import OutputFile, StateDB, WatchLock, verdict_fingerprint

SQUEUE_TIMEOUT_S = 60.0
#: Verdict kinds that mean "hung" (the analysis owns the list); ``progressing`` overrides them.
HANG_KINDS = frozenset(_HANG_KINDS)
PROGRESS_KINDS = frozenset({VerdictKind.PROGRESSING})
#: Verdicts that say the attach saw too little to judge (no ranks found, no node answered).
INCONCLUSIVE_KINDS = frozenset({VerdictKind.INCOMPLETE, VerdictKind.NO_RANKS})
HANG_SEVERITIES = frozenset({Severity.CRITICAL, Severity.WARNING})

EXIT_OK = 0
EXIT_STUCK = 1
EXIT_INTERNAL = 10


class CommandResultLike(Protocol):
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool


Runner = Callable[..., Any]  # (argv, timeout, *, env=None, input=None) -> CommandResult
class Attach(Protocol):
    """An attach as the watchdog makes it: ``out_dir`` None writes nothing, else the report and
    snapshot there; raises what slurmdiag.api.attach raises."""

    def __call__(self, job_id: str, options: AttachOptions, *, out_dir: Path | None = None
                 ) -> Snapshot: ...
Sender = Callable[[Alert, NotifySettings], SendResult]


def _default_runner(argv: Sequence[str], timeout: float, **kwargs: Any) -> Any:
    from slurmdiag.transport.run import run_command

    return run_command(argv, timeout, **kwargs)


def attach_name(job: SlurmJob) -> str:
    """The name attach is given for a running job: an array task as ``A_T`` (its own job id
    can also be its array's, which names the whole array), any other job by its id."""
    name = array_task_name(job.array_job_id, job.array_task_id)
    return name if name is not None and (job.array_task_id or "").isdigit() else job.job_id


def _default_attach(job_id: str, options: AttachOptions, *, out_dir: Path | None = None
                    ) -> Snapshot:
    from slurmdiag.api import attach_job

    result = attach_job(job_id, options, out_dir=out_dir, write=out_dir is not None)
    if result.write_error is not None:
        raise result.write_error
    return result.snapshot


def _default_postmortem(job_id: str, out_dir: Path, runner: Any) -> Snapshot:
    from slurmdiag.post_mortem.build import postmortem_job

    return postmortem_job(job_id, out_dir=out_dir, runner=runner).snapshot


#: Job states after which the watchdog posts a post-mortem instead of "recovered".
FAILED_END_STATES = frozenset({"FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL",
                               "DEADLINE", "PREEMPTED"})


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------

#: JobOutcome.status values, in the order a job moves through them.
OUTCOME_STATUSES = (
    "young",  # runs for less than min_runtime
    "active",  # output grew within stale_after
    "checked_recently",  # quiet, but attached to less than stale_after ago and not stuck then
    "deferred",  # quiet, but max_jobs_per_run attaches were spent on others
    "inconclusive",  # the attach failed
    "not_stuck",  # attached: progressing, or no hang verdict
    "stuck",  # attached (now or earlier) and hung
    "recovered",  # was stuck; progresses again
    "ended",  # was stuck; no longer running
)


@dataclass(frozen=True)
class JobOutcome:
    job_id: str
    status: str  # one of OUTCOME_STATUSES
    name: str | None = None
    user: str | None = None
    detail: str = ""
    quiet_for_s: float | None = None
    verdicts: tuple[Verdict, ...] = ()
    report: str | None = None
    report_url: str | None = None


@dataclass(frozen=True)
class NotificationOutcome:
    alert_id: int
    job_id: str
    event: str
    delivered: bool
    attempts: int = 0
    error: str | None = None
    retry: bool = False  # an alert of an earlier run


@dataclass(frozen=True)
class WatchResult:
    exit_code: int
    started: float
    finished: float
    squeue_mode: str | None = None  # json | text
    jobs_running: int = 0
    jobs_selected: int = 0
    outcomes: tuple[JobOutcome, ...] = ()
    notifications: tuple[NotificationOutcome, ...] = ()
    locked_out: bool = False
    errors: tuple[str, ...] = ()
    pending_alerts: int = 0
    attach_seconds: tuple[tuple[str, float], ...] = ()  # (job id, seconds attaching this pass)

    @property
    def stuck_jobs(self) -> tuple[str, ...]:
        return tuple(o.job_id for o in self.outcomes if o.status == "stuck")

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for outcome in self.outcomes:
            counts[outcome.status] = counts.get(outcome.status, 0) + 1
        return counts

    def summary(self) -> dict[str, Any]:
        """Small JSON-able digest (heartbeat file, logs)."""
        return {
            "exit_code": self.exit_code,
            "duration_s": round(self.finished - self.started, 3),
            "squeue_mode": self.squeue_mode,
            "jobs_running": self.jobs_running,
            "jobs_selected": self.jobs_selected,
            "outcomes": self.counts(),
            "stuck_jobs": list(self.stuck_jobs),
            "notifications_sent": sum(1 for n in self.notifications if n.delivered),
            "notifications_failed": sum(1 for n in self.notifications if not n.delivered),
            "pending_alerts": self.pending_alerts,
            "errors": list(self.errors),
        }

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["stuck_jobs"] = list(self.stuck_jobs)
        return data

    def summary_lines(self) -> list[str]:
        """Lines for people (stderr); the CLI prints them."""
        if self.locked_out:
            return ["watch: another watch run holds the lock; nothing done"]
        lines = []
        for outcome in self.outcomes:
            if outcome.status in ("stuck", "recovered", "ended", "inconclusive", "not_stuck"):
                name = f" ({outcome.name})" if outcome.name else ""
                detail = f": {outcome.detail}" if outcome.detail else ""
                lines.append(f"watch: job {outcome.job_id}{name} {outcome.status}{detail}")
                if outcome.report:
                    lines.append(f"watch:   report {outcome.report_url or outcome.report}")
        for note in self.notifications:
            what = "retried " if note.retry else ""
            if note.delivered:
                lines.append(f"watch: {what}{note.event} alert for job {note.job_id} delivered")
            else:
                lines.append(
                    f"watch: {what}{note.event} alert for job {note.job_id} NOT delivered "
                    f"({note.error}); the next run retries it"
                )
        if self.exit_code >= 2 and not self.outcomes:
            # The pass itself failed (Slurm down, state unusable): the reason, once, and the code.
            return [f"watch: error: {error}" for error in self.errors] + [
                f"watch: the pass failed; exit {self.exit_code}"
            ]
        for error in self.errors:
            lines.append(f"watch: {error}")
        counts = ", ".join(f"{n} {status}" for status, n in sorted(self.counts().items()))
        lines.append(
            f"watch: {self.jobs_running} running, {self.jobs_selected} watched"
            + (f" ({counts})" if counts else "")
            + f"; {len(self.stuck_jobs)} stuck; exit {self.exit_code}"
        )
        return lines


# --------------------------------------------------------------------------------------------
# Pure helpers
# --------------------------------------------------------------------------------------------


def squeue_json_argv() -> list[str]:
    return ["squeue", "--all", "--json", "--states=RUNNING"]


def squeue_text_argv() -> list[str]:
    return ["squeue", "--all", "--noheader", "--states=RUNNING", "--format", SQUEUE_TEXT_FORMAT]


def _matches_any(value: str | None, patterns: Iterable[str]) -> bool:
    return value is not None and any(fnmatch.fnmatchcase(value, p) for p in patterns)


def _job_ids(job: SlurmJob) -> set[str]:
    """Every name a user might write in exclude_jobs for this job."""
    ids = {job.job_id}
    if job.array_job_id:
        ids.add(job.array_job_id)
    task = array_task_name(job.array_job_id, job.array_task_id)
    if task is not None:
        ids.add(task)
    if job.het_job_id:
        ids.add(job.het_job_id)
        if job.het_job_offset is not None:
            ids.add(f"{job.het_job_id}+{job.het_job_offset}")
    return ids


def skip_reason(job: SlurmJob, watch: WatchSettings) -> str | None:
    """Why the filters of ``[watch]`` leave this job out, or None when it is watched."""
    if (job.state or "").upper() != "RUNNING":
        return f"state {job.state}"
    if job.het_job_id and job.het_job_offset:
        # the leader's id names the whole het job: its attach looks at every component
        return f"component of het job {job.het_job_id}, looked at with its leader"
    partitions = set((job.partition or "").split(","))
    if watch.partitions and not partitions & set(watch.partitions):
        return f"partition {job.partition} not in partitions"
    if watch.users and job.user not in watch.users:
        return f"user {job.user} not in users"
    if job.user in watch.exclude_users:
        return f"user {job.user} excluded"
    nodes = job.num_nodes if job.num_nodes is not None else len(job.nodes)
    if nodes < watch.min_nodes:
        return f"{nodes} node(s) < min_nodes {watch.min_nodes}"
    if watch.job_name_patterns and not _matches_any(job.name, watch.job_name_patterns):
        return "name matches no job_name_patterns"
    if _matches_any(job.name, watch.exclude_job_name_patterns):
        return "name matches exclude_job_name_patterns"
    if _job_ids(job) & set(watch.exclude_jobs):
        return "listed in exclude_jobs"
    return None


def whole_het_jobs(jobs: Iterable[SlurmJob]) -> dict[str, SlurmJob]:
    """{leader's job id: the whole het job} for the heterogeneous jobs among ``jobs`` (squeue's
    rows, one a component): the leader's row with every component's nodes, tasks and
    partitions, for the filters of ``[watch]`` (a job of a gpu component beside a cpu leader is
    a gpu job; its nodes are all its components'). Attaching by the leader's id looks at
    every component."""
    from slurmdiag.slurm.discover import whole_het_job

    components: dict[str, list[SlurmJob]] = {}
    for job in jobs:
        if job.het_job_id and job.het_job_offset is not None:
            components.setdefault(job.het_job_id, []).append(job)
    out = {}
    for het_id, rows in components.items():
        rows.sort(key=lambda j: j.het_job_offset or 0)
        if rows[0].het_job_offset != 0 or rows[0].job_id != het_id:
            continue  # no leader row among them: each is filtered as it is
        partitions = dict.fromkeys(p for j in rows for p in (j.partition or "").split(",") if p)
        out[het_id] = dataclasses.replace(whole_het_job(rows),
                                          partition=",".join(partitions) or None)
    return out


_SLURM_DURATION_RE = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)$")


def parse_slurm_duration(text: str | None) -> float | None:
    """Slurm's elapsed time: ``D-HH:MM:SS``, ``HH:MM:SS``, ``MM:SS``, ``D-HH:MM`` -> seconds."""
    if not text:
        return None
    text = text.strip()
    match = _SLURM_DURATION_RE.match(text)
    if not match:
        return None
    days, hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    if match.group(1) and not match.group(2):
        # "D-HH:MM" (days given, two fields): hours and minutes, not minutes and seconds.
        hours, minutes, seconds = minutes, seconds, 0
    return float(days * 86400 + hours * 3600 + minutes * 60 + seconds)


def job_run_time(job: SlurmJob, now: float) -> float | None:
    """Seconds the job has been running: squeue's elapsed time, else now - start time."""
    elapsed = parse_slurm_duration(job.run_time)
    if elapsed is not None:
        return elapsed
    if job.start_time:
        try:
            started = datetime.fromisoformat(job.start_time)
        except ValueError:
            return None
        return max(0.0, now - started.timestamp())
    return None


_PATTERN_RE = re.compile(r"%(\d*)([%AabjJNnstuxX])")


def expand_output_path(pattern: str | None, job: SlurmJob) -> str | None:
    """Expand Slurm's filename pattern (``slurm-%j.out``, ``%x-%A_%a.log``) the way sbatch does.

    Returns None for what cannot be known from the login node (``%n``/``%t``/``%s`` per task
    files; ``%N`` without a batch host) and for /dev/null.
    """
    if not pattern:
        return None
    task_id = job.array_task_id if decimal_int(job.array_task_id) is not None else None
    values = {
        "%": "%",
        "A": job.array_job_id or job.job_id,
        "a": task_id or "4294967294",
        "j": job.job_id,
        "J": job.job_id,
        "N": job.batch_host or (job.nodes[0] if job.nodes else None),
        "u": job.user,
        "x": job.name,
        "b": task_id[-1] if task_id else "0",
    }
    unknown = False

    def replace(match: re.Match[str]) -> str:
        nonlocal unknown
        width, letter = match.group(1), match.group(2)
        value = values.get(letter)
        if value is None:
            unknown = True
            return ""
        return value.zfill(min(int(width), 64)) if width and decimal_int(value) is not None else value

    expanded = _PATTERN_RE.sub(replace, pattern)
    if unknown or expanded == "/dev/null":
        return None
    if not os.path.isabs(expanded):
        if not job.work_dir:
            return None
        expanded = os.path.join(job.work_dir, expanded)
    return expanded


def output_paths(job: SlurmJob) -> list[str]:
    paths: list[str] = []
    for pattern in (job.stdout, job.stderr):
        path = expand_output_path(pattern, job)
        if path and path not in paths:
            paths.append(path)
    return paths


def stat_outputs(paths: Sequence[str]) -> list[OutputFile] | None:
    files = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        files.append(OutputFile(path, st.st_size, st.st_mtime))
    return files or None


def classify_verdicts(verdicts: Sequence[Verdict]) -> tuple[bool, tuple[Verdict, ...]]:
    """(stuck, the hang verdicts): stuck when a hang kind is critical/warning and nothing moves.

    A ``slow_step`` ("a slow step or a hang, cannot tell": ranks computing, or waiting for
    DataLoader workers that compute, while the others wait, seen for a few seconds) counts too:
    the watchdog only confirms jobs whose output has not grown for ``stale_after``, and a step
    that long is the hang the short look could not tell."""
    if any(v.kind in PROGRESS_KINDS for v in verdicts):
        return False, ()
    hang = tuple(v for v in verdicts
                 if (v.kind in HANG_KINDS and v.severity in HANG_SEVERITIES)
                 or v.kind == VerdictKind.SLOW_STEP)
    return bool(hang), hang


def _severity_rank(verdict: Verdict) -> int:
    return severity_rank(verdict.severity)


def alert_verdicts(verdicts: Sequence[Verdict], hang: Sequence[Verdict]) -> tuple[Verdict, ...]:
    """Hang verdicts first, then other critical/warning findings (NIC, GPU) as context."""
    others = [v for v in verdicts if v not in hang and v.severity in HANG_SEVERITIES]
    return tuple(sorted(hang, key=_severity_rank)) + tuple(sorted(others, key=_severity_rank))


def report_url_for(report: str | None, report_dir: Path, url_base: str | None) -> str | None:
    """``report_url_base`` + the report's path relative to ``report_dir``, URL-quoted."""
    if not report or not url_base:
        return None
    try:
        relative = Path(report).resolve().relative_to(report_dir.resolve())
    except ValueError:
        return None
    return url_base.rstrip("/") + "/" + urllib.parse.quote(relative.as_posix())


def report_out_dir(report_dir: Path, job_id: str, now: float) -> Path:
    stamp = datetime.fromtimestamp(now, tz=timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    safe_id = re.sub(r"[^0-9A-Za-z_+.-]", "_", job_id)
    return report_dir / safe_id / stamp


# --------------------------------------------------------------------------------------------
# Heartbeat (dead-man switch)
# --------------------------------------------------------------------------------------------


def write_heartbeat(path: Path, result: WatchResult, now: float) -> None:
    """Atomically replace the heartbeat file with the time and summary of this run."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    data = {
        "time": datetime.fromtimestamp(now, tz=timezone.utc).isoformat(timespec="seconds"),
        "epoch": now,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "summary": result.summary(),
    }
    atomic_write(path, json.dumps(data, indent=1) + "\n", 0o600)


#: ``watch --check-heartbeat`` exit codes: the monitoring-plugin convention (Nagios, Icinga,
#: Sensu, Zabbix agents), never shared with the usage error code of the other commands.
HEARTBEAT_OK, HEARTBEAT_WARNING, HEARTBEAT_CRITICAL, HEARTBEAT_UNKNOWN = 0, 1, 2, 3
HEARTBEAT_LABELS = {0: "OK", 1: "WARNING", 2: "CRITICAL", 3: "UNKNOWN"}


def heartbeat_status(path: Path, max_age_s: float, now: float | None = None) -> tuple[int, str]:
    """(code, a sentence saying why): 0 fresh; 1 fresh but the last pass had errors or alerts it
    could not deliver; 2 stale or missing (the watchdog does not run); 3 unreadable."""
    now = time.time() if now is None else now
    try:
        data = json.loads(path.read_text())
        epoch = float(data["epoch"])
    except FileNotFoundError:
        return HEARTBEAT_CRITICAL, (
            f"no heartbeat file at {path}: the watchdog has never completed a run here"
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return HEARTBEAT_UNKNOWN, f"heartbeat file {path} is unreadable ({type(exc).__name__})"
    age = now - epoch
    summary = data.get("summary") if isinstance(data, dict) else None
    summary = summary if isinstance(summary, dict) else {}
    stuck = summary.get("stuck_jobs")
    tail = f"; stuck jobs then: {', '.join(stuck)}" if stuck else ""
    if age > max_age_s:
        return HEARTBEAT_CRITICAL, (
            f"heartbeat is stale: last good run {format_duration(round(age))} ago "
            f"(> {format_duration(max_age_s)}) at {data.get('time')}"
        )
    fresh = f"last good run {format_duration(max(0, round(age)))} ago"
    errors = summary.get("errors") or []
    pending = summary.get("pending_alerts") or 0
    if errors or pending:
        what = [f"{len(errors)} error(s)"] if errors else []
        what += [f"{pending} alert(s) not delivered yet"] if pending else []
        first = f": {errors[0]}" if errors else ""
        return HEARTBEAT_WARNING, f"{fresh}, with {' and '.join(what)}{first}{tail}"
    return HEARTBEAT_OK, f"heartbeat fresh: {fresh}{tail}"


def check_heartbeat(path: Path | str, max_age: float, *, now: float | None = None) -> int:
    """Dead-man switch: 0 when the last good run is younger than ``max_age`` seconds, else 1-3
    (see heartbeat_status)."""
    return heartbeat_status(Path(path), max_age, now)[0]


# --------------------------------------------------------------------------------------------
# The watchdog
# --------------------------------------------------------------------------------------------


def _log_to_stderr(message: str) -> None:
    print(f"watch: {one_line(message)}", file=sys.stderr, flush=True)


class Watchdog:
    """One configured watchdog; ``run_once()`` is one pass. Every outside effect is injectable:

    ``attach`` (slurmdiag.api.attach), ``runner`` (transport.run.run_command, for squeue/scontrol),
    ``clock`` (epoch seconds), ``send`` (post an Alert) and ``log`` (a line for people).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        attach: Attach | None = None,
        runner: Runner | None = None,
        clock: Callable[[], float] = time.time,
        send: Sender | None = None,
        log: Callable[[str], None] | None = None,
        postmortem: Callable[[str, Path, Any], Snapshot] | None = None,
    ) -> None:
        self.settings = settings
        self._attach = attach or _default_attach
        self._postmortem = postmortem or _default_postmortem
        self._runner = runner or _default_runner
        self._clock = clock
        self._send = send or notify
        self._log = log or _log_to_stderr
        self._squeue_json: bool | None = None  # learnt once per Watchdog

    # ------------------------------------------------------------------------------ listing

    def list_running_jobs(self) -> tuple[list[SlurmJob], str]:
        """Running jobs from squeue: JSON where this Slurm has it, the text format otherwise."""
        from slurmdiag.slurm.discover import check_slurm_conf

        check_slurm_conf()
        if self._squeue_json is not False:
            result = self._runner(squeue_json_argv(), SQUEUE_TIMEOUT_S)
            if _ok(result):
                try:
                    jobs = parse_squeue_json(result.stdout)
                except (ParseError, ValueError) as exc:
                    self._log(f"squeue --json output not understood ({exc}); using the text format")
                    self._squeue_json = False
                else:
                    self._squeue_json = True
                    return jobs, "json"
            elif _is_unavailable(result):
                _raise_unavailable(result)  # the controller is down: the text form would not help
            else:
                self._squeue_json = False  # an old Slurm, or no JSON plugin: text from now on
        result = self._runner(squeue_text_argv(), SQUEUE_TIMEOUT_S)
        if not _ok(result):
            _raise_unavailable(result)
        return parse_squeue_text(result.stdout), "text"

    def _output_files(self, job: SlurmJob, mode: str) -> list[OutputFile] | None:
        paths = output_paths(job)
        if not paths and mode == "text":
            # squeue's text format has no StdOut/StdErr: ask scontrol (discover) for this job.
            try:
                from slurmdiag.slurm.discover import discover_job

                paths = output_paths(discover_job(parse_job_id(job.job_id), self._runner,
                                                  raw_id=True))
            except (SlurmdiagError, ValueError):
                paths = []
        return stat_outputs(paths)

    def confirm_ended(self, job_id: str) -> bool:
        """Ask scontrol whether a job missing from squeue has really ended (True) or not (False)."""
        from slurmdiag.slurm.discover import discover_job

        try:
            discover_job(parse_job_id(job_id), self._runner, raw_id=True)
        except (JobNotRunning, JobNotFound):
            return True
        except (SlurmdiagError, ValueError):
            return False  # Slurm cannot tell now: decide in a later pass
        return False  # still running

    # ------------------------------------------------------------------------------ the pass

    def run_once(self) -> WatchResult:
        started = self._clock()
        watch = self.settings.watch
        lock = WatchLock(watch.lock_file)
        try:
            acquired = lock.acquire()
        except OSError as exc:
            return self._failed(
                started, EXIT_INTERNAL, f"cannot take the lock {watch.lock_file}: {exc.strerror}"
            )
        if not acquired:
            self._log(f"another watch run holds the lock ({watch.lock_file}); nothing to do")
            return WatchResult(EXIT_OK, started, self._clock(), locked_out=True)
        try:
            with StateDB(watch.state_db) as db:
                result = _Pass(self, db, started).run()
        except SlurmdiagError as exc:
            hint = f" (hint: {exc.hint})" if exc.hint else ""
            result = self._failed(started, exc.exit_code, f"{exc.message}{hint}")
        except (sqlite3.Error, OSError) as exc:
            result = self._failed(
                started, EXIT_INTERNAL, f"state {watch.state_db}: {type(exc).__name__}: {exc}"
            )
        finally:
            lock.release()
        self._write_metrics(result)
        return result

    def _write_metrics(self, result: WatchResult) -> None:
        """After every pass, failed ones too: the last success then comes from the heartbeat."""
        path = self.settings.watch.metrics_file
        if path is None:
            return
        from slurmdiag.watch.metrics import write_metrics

        last_success = result.finished if result.exit_code < 2 else None
        if last_success is None:
            try:
                last_success = float(
                    json.loads(self.settings.watch.heartbeat_file.read_text())["epoch"]
                )
            except (OSError, ValueError, KeyError, TypeError):
                last_success = None
        try:
            write_metrics(path, result, last_success)
        except (OSError, SlurmdiagError) as exc:
            self._log(f"metrics not written to {path}: {getattr(exc, 'strerror', None) or exc}")

    def _failed(self, started: float, code: int, message: str) -> WatchResult:
        # Not logged here: the result carries it and summary_lines() prints it, once.
        return WatchResult(code, started, self._clock(), errors=(message,))


def _ok(result: Any) -> bool:
    return result.returncode == 0 and not result.timed_out


_UNAVAILABLE_MARKERS = (
    "Unable to contact slurm controller",
    "Connection refused",
    "Socket timed out",
    "Could not establish a configuration source",
    "Zero Bytes were transmitted",
    ": fatal: ",
)


def _is_unavailable(result: Any) -> bool:
    if result.timed_out or result.returncode is None:
        return True
    text = f"{result.stderr}\n{result.stdout}"
    return any(marker in text for marker in _UNAVAILABLE_MARKERS)


def _raise_unavailable(result: Any) -> None:
    if getattr(result, "start_error", None):
        raise SlurmUnavailable(f"cannot run squeue: {result.start_error}")
    if result.timed_out:
        raise SlurmUnavailable(
            f"squeue did not answer within {SQUEUE_TIMEOUT_S:.0f} s",
            hint="the Slurm controller may be overloaded or down; the next run tries again",
        )
    text = (result.stderr or result.stdout or "").strip()
    from slurmdiag.slurm.discover import slurm_fatal

    fatal = slurm_fatal(text)
    if fatal is not None:
        raise fatal
    last = text.splitlines()[-1] if text else "(no output)"
    raise SlurmUnavailable(f"squeue failed (exit {result.returncode}): {last[:300]}")


class _Pass:
    """The state of one run_once (split out so the steps read top to bottom)."""

    def __init__(self, dog: Watchdog, db: StateDB, started: float) -> None:
        self.dog = dog
        self.db = db
        self.started = started
        self.watch = dog.settings.watch
        self.notify_settings = dog.settings.notify
        self.outcomes: list[JobOutcome] = []
        self.notes: list[NotificationOutcome] = []
        self.errors: list[str] = []
        self.delivery_blocked: str | None = None  # set after a failed post: later ones wait
        self.attach_seconds: dict[str, float] = {}

    def now(self) -> float:
        return self.dog._clock()

    def run(self) -> WatchResult:
        jobs, mode = self.dog.list_running_jobs()
        running = {job.job_id: job for job in jobs if (job.state or "").upper() == "RUNNING"}
        whole = whole_het_jobs(running.values())
        selected = [job for job in running.values()
                    if skip_reason(whole.get(job.job_id, job), self.watch) is None]

        self._handle_gone(set(running))
        candidates = []
        for job in sorted(selected, key=lambda j: j.job_id):
            candidate = self._cheap_signals(job, mode)
            if candidate is not None:
                candidates.append(candidate)
        # Oldest silence first; the attach budget bounds the run time.
        candidates.sort(key=lambda c: -c[1])
        for index, (job, quiet_for) in enumerate(candidates):
            if index >= self.watch.max_jobs_per_run:
                self.outcomes.append(
                    _outcome(job, "deferred", "attach budget of this run spent", quiet_for)
                )
                continue
            self._confirm(job, quiet_for)

        self._retry_earlier_alerts()
        self.db.forget_old(self.now())
        stuck = any(o.status == "stuck" for o in self.outcomes)
        finished = self.now()
        result = WatchResult(
            exit_code=EXIT_STUCK if stuck else EXIT_OK,
            started=self.started,
            finished=finished,
            squeue_mode=mode,
            jobs_running=len(running),
            jobs_selected=len(selected),
            outcomes=tuple(self.outcomes),
            notifications=tuple(self.notes),
            errors=tuple(self.errors),
            pending_alerts=self.db.pending_count(),
            attach_seconds=tuple((k, round(v, 3)) for k, v in self.attach_seconds.items()),
        )
        write_heartbeat(self.watch.heartbeat_file, result, finished)
        return result

    # -- steps ---------------------------------------------------------------------------

    def _handle_gone(self, running_ids: set[str]) -> None:
        """Jobs the state knew running that squeue no longer lists: ended (recovered if stuck)."""
        for record in self.db.jobs_not_ended():
            if record.job_id in running_ids:
                continue  # still running, only filtered out now
            if record.stuck_since is not None and not self.dog.confirm_ended(record.job_id):
                continue  # squeue may have left it out by accident: never say "recovered" lightly
            was_stuck = self.db.clear_stuck(record.job_id, now=self.now(), ended=True)
            if was_stuck and self._post_mortem(record):
                continue
            if was_stuck:
                alert = Alert(
                    event="recovered",
                    job_id=record.job_id,
                    job_name=record.name,
                    user=record.user,
                    cluster=self.watch.cluster_name,
                    reason="the job is no longer running",
                )
                self._recovered(alert)
                self.outcomes.append(
                    JobOutcome(record.job_id, "ended", record.name, record.user, alert.reason or "")
                )

    def _post_mortem(self, record: Any) -> bool:
        """A job we alerted about ended in failure: post why, with the report link, once."""
        if not self.db.stuck_alert_delivered(record.job_id):
            return False
        out_dir = report_out_dir(self.watch.report_dir, record.job_id, self.now())
        try:
            snapshot = self.dog._postmortem(record.job_id, out_dir, self.dog._runner)
        except SlurmdiagError as exc:
            self.errors.append(f"job {record.job_id}: no post-mortem: {exc.message}")
            return False
        state = (snapshot.job.state or "").upper()
        if state not in FAILED_END_STATES:
            return False  # completed or cancelled: "recovered" says it
        report_url = report_url_for(snapshot.report, self.watch.report_dir,
                                    self.watch.report_url_base)
        alert = Alert(
            event="postmortem",
            job_id=record.job_id,
            job_name=record.name,
            user=record.user,
            nodes=snapshot.job.nodes,
            verdicts=tuple(v for v in snapshot.verdicts if v.severity != "info")[:4],
            report_url=report_url,
            report_path=snapshot.report,
            cluster=self.watch.cluster_name,
            reason=f"the job ended {state}",
        )
        alert_id = self.db.claim_postmortem_alert(
            record.job_id, payload=alert.to_dict(), now=self.now(),
            deliver=self.notify_settings.enabled, report_path=snapshot.report,
        )
        self.outcomes.append(JobOutcome(
            record.job_id, "ended", record.name, record.user,
            (snapshot.verdicts[0].summary if snapshot.verdicts else alert.reason or ""),
            None, tuple(snapshot.verdicts), snapshot.report, report_url))
        if alert_id is not None and self.notify_settings.enabled:
            self._deliver(alert_id, alert, retry=False)
        return True

    def _cheap_signals(self, job: SlurmJob, mode: str) -> tuple[SlurmJob, float] | None:
        now = self.now()
        run_time = job_run_time(job, now)
        young = run_time is not None and run_time < self.watch.min_runtime
        # A young job is not judged yet: spare the stat (and, on old Slurm, the scontrol call).
        files = None if young else self.dog._output_files(job, mode)
        observation = self.db.observe_job(
            job.job_id, name=job.name, user=job.user, outputs=files, now=now
        )
        record = self.db.job(job.job_id)
        assert record is not None
        quiet_for = max(0.0, now - observation.quiet_since)
        if observation.changed and record.stuck_since is not None:
            self.db.clear_stuck(job.job_id, now=now)
            self._recovered(self._alert(job, "recovered", reason="its output is growing again"))
            self.outcomes.append(_outcome(job, "recovered", "output is growing again"))
            return None
        if young and run_time is not None:
            self.outcomes.append(
                _outcome(job, "young", f"running for {format_duration(round(run_time))}")
            )
            return None
        if quiet_for < self.watch.stale_after:
            self.outcomes.append(_outcome(job, "active", "", quiet_for))
            return None
        if record.last_checked is not None and now - record.last_checked < self.watch.stale_after:
            if record.stuck_since is not None:
                self.outcomes.append(
                    _outcome(job, "stuck", "still quiet; checked recently", quiet_for)
                )
            else:
                self.outcomes.append(_outcome(job, "checked_recently", "", quiet_for))
            return None
        return job, quiet_for

    def _confirm(self, job: SlurmJob, quiet_for: float) -> None:
        """Light attach; on a hang, the full attach with a report, then the alert."""
        record = self.db.job(job.job_id)
        was_stuck = record is not None and record.stuck_since is not None
        light, failure = self._attach(job, AttachOptions(
            samples=self.watch.confirm_samples,
            interval_s=self.watch.confirm_interval,
            strace_s=0.0,
            timeout_s=self.watch.attach_timeout,
        ))
        if light is None:
            self._attach_failed(job, quiet_for, failure)
            return
        stuck, hang = classify_verdicts(light.verdicts)
        if not stuck:
            self._not_stuck(job, light, quiet_for, was_stuck)
            return
        if self.db.open_stuck_fingerprint(job.job_id) == verdict_fingerprint(hang):
            self.db.mark_checked(job.job_id, now=self.now(), stuck=True, verdicts=hang)
            self.outcomes.append(
                _outcome(job, "stuck", "same verdict as already reported", quiet_for, hang)
            )
            return

        snapshot = light
        out_dir = report_out_dir(self.watch.report_dir, job.job_id, self.now())
        full, failure = self._attach(
            job, AttachOptions(timeout_s=self.watch.attach_timeout), out_dir=out_dir
        )
        if full is not None:
            full_stuck, full_hang = classify_verdicts(full.verdicts)
            if full_stuck:
                snapshot, hang = full, full_hang
            elif any(v.kind in PROGRESS_KINDS for v in full.verdicts):
                self._not_stuck(job, full, quiet_for, was_stuck)
                return
            else:
                snapshot = dataclasses.replace(light, report=full.report)
        elif failure is not None and failure.startswith("ended"):
            self.outcomes.append(_outcome(job, "inconclusive", failure, quiet_for))
            return
        else:
            # Confirmed stuck by the light attach: alert without a report rather than not at all.
            self.errors.append(f"job {job.job_id}: no report: {failure}")
        report = snapshot.report
        report_url = report_url_for(report, self.watch.report_dir, self.watch.report_url_base)
        now = self.now()
        self.db.mark_checked(job.job_id, now=now, stuck=True, verdicts=hang)
        alert = self._alert(
            job,
            "stuck",
            verdicts=alert_verdicts(snapshot.verdicts, hang),
            report=report,
            report_url=report_url,
            quiet_for=quiet_for,
        )
        alert_id = self.db.claim_stuck_alert(
            job.job_id,
            fingerprint=verdict_fingerprint(hang),
            payload=alert.to_dict(),
            now=now,
            cooldown_s=self.watch.cooldown,
            deliver=self.notify_settings.enabled,
            report_path=report,
        )
        detail = hang[0].summary if hang else ""
        if alert_id is None:
            detail = f"{detail} (alert already sent or in cooldown)".strip()
        self.outcomes.append(
            JobOutcome(
                job.job_id, "stuck", job.name, job.user, detail, quiet_for, hang, report, report_url
            )
        )
        if alert_id is not None and self.notify_settings.enabled:
            self._deliver(alert_id, alert, retry=False)

    def _attach(self, job: SlurmJob, options: AttachOptions, *, out_dir: Path | None = None
                ) -> tuple[Snapshot | None, str | None]:
        """(snapshot, None) or (None, why); a failure starting with "ended" means the job is gone."""
        began = time.monotonic()
        try:
            return self.dog._attach(attach_name(job), options, out_dir=out_dir), None
        except (JobNotRunning, JobNotFound) as exc:
            return None, f"ended meanwhile: {exc.message}"
        except SlurmdiagError as exc:
            return None, f"attach failed: {exc.message}"
        except Exception as exc:  # noqa: BLE001 - one job's failure must not end the watch run
            return None, f"attach failed: {type(exc).__name__}: {exc}"
        finally:
            spent = time.monotonic() - began
            self.attach_seconds[job.job_id] = self.attach_seconds.get(job.job_id, 0.0) + spent

    def _attach_failed(self, job: SlurmJob, quiet_for: float, failure: str | None) -> None:
        message = failure or "attach failed"
        self.outcomes.append(_outcome(job, "inconclusive", message, quiet_for))
        if not message.startswith("ended"):
            self.errors.append(f"job {job.job_id}: {message}")

    def _not_stuck(
        self, job: SlurmJob, snapshot: Snapshot, quiet_for: float, was_stuck: bool
    ) -> None:
        now = self.now()
        self.db.mark_checked(job.job_id, now=now, stuck=False, verdicts=snapshot.verdicts)
        moving = any(v.kind in PROGRESS_KINDS for v in snapshot.verdicts)
        unclear = [v for v in snapshot.verdicts if v.kind in INCONCLUSIVE_KINDS]
        if unclear and not moving:
            # The attach saw no ranks: neither stuck nor healthy. Look again next time.
            self.outcomes.append(_outcome(job, "inconclusive", unclear[0].summary, quiet_for))
            return
        if moving:
            detail = "stacks are moving"
        elif snapshot.verdicts:
            first = snapshot.verdicts[0]
            detail = f"no hang: {first.kind} ({first.severity}): {first.summary}"
        else:
            detail = "no hang verdict"
        if was_stuck:
            self.db.clear_stuck(job.job_id, now=now)
            self._recovered(self._alert(job, "recovered", reason=f"{detail} again"))
            self.outcomes.append(_outcome(job, "recovered", detail, quiet_for))
            return
        self.outcomes.append(_outcome(job, "not_stuck", detail, quiet_for))

    # -- alerts --------------------------------------------------------------------------

    def _alert(
        self,
        job: SlurmJob,
        event: str,
        *,
        verdicts: tuple[Verdict, ...] = (),
        report: str | None = None,
        report_url: str | None = None,
        quiet_for: float | None = None,
        reason: str | None = None,
    ) -> Alert:
        return Alert(
            event=event,
            job_id=job.job_id,
            job_name=job.name,
            user=job.user,
            partition=job.partition,
            nodes=tuple(job.nodes),
            verdicts=verdicts,
            report_url=report_url,
            report_path=report,
            quiet_for_s=quiet_for,
            run_time_s=job_run_time(job, self.now()),
            cluster=self.watch.cluster_name or job.raw.get("cluster") or None,
            reason=reason,
        )

    def _recovered(self, alert: Alert) -> None:
        deliver = self.notify_settings.enabled and self.watch.notify_recovered
        alert_id = self.db.claim_recovered_alert(
            alert.job_id, payload=alert.to_dict(), now=self.now(), deliver=deliver
        )
        if alert_id is not None:
            self._deliver(alert_id, alert, retry=False)

    def _deliver(self, alert_id: int, alert: Alert, *, retry: bool) -> None:
        if self.delivery_blocked is not None:
            error = f"not tried: {self.delivery_blocked} earlier in this run"
            self.db.release_claim(alert_id, error=error, now=self.now())
            self.notes.append(
                NotificationOutcome(alert_id, alert.job_id, alert.event, False, 0, error, retry)
            )
            return
        try:
            result = self.dog._send(alert, self.notify_settings)
        except Exception as exc:  # noqa: BLE001 - an injected sender may raise; the run goes on
            result = SendResult(False, 1, None, f"{type(exc).__name__}")
        self.db.finish_alert(
            alert_id, ok=result.ok, error=result.error, attempts=result.attempts, now=self.now()
        )
        if not result.ok:
            # The channel is down or refuses us: later posts of this run would only add delay.
            self.delivery_blocked = f"the webhook failed ({result.error})"
            self.dog._log(
                f"{alert.event} alert for job {alert.job_id} not delivered: {result.error}"
            )
        self.notes.append(
            NotificationOutcome(
                alert_id, alert.job_id, alert.event, result.ok, result.attempts, result.error, retry
            )
        )

    def _retry_earlier_alerts(self) -> None:
        if not self.notify_settings.enabled:
            return
        for record in self.db.retry_candidates(now=self.now(), created_before=self.started):
            if not self.db.claim_retry(record.id, now=self.now()):
                continue  # another run took it
            try:
                alert = Alert.from_dict(record.payload)
            except (KeyError, TypeError, ValueError) as exc:
                self.db.finish_alert(
                    record.id,
                    ok=False,
                    error=f"stored alert unreadable: {exc}",
                    attempts=0,
                    now=self.now(),
                )
                continue
            self._deliver(record.id, alert, retry=True)


def _outcome(
    job: SlurmJob,
    status: str,
    detail: str = "",
    quiet_for: float | None = None,
    verdicts: tuple[Verdict, ...] = (),
) -> JobOutcome:
    return JobOutcome(job.job_id, status, job.name, job.user, detail, quiet_for, verdicts)


def run_once(
    settings: Settings,
    *,
    attach: Attach | None = None,
    runner: Runner | None = None,
    now: Callable[[], float] = time.time,
    send: Sender | None = None,
    log: Callable[[str], None] | None = None,
    postmortem: Callable[[str, Path, Any], Snapshot] | None = None,
) -> WatchResult:
    """One watch pass with ``settings``; see ``Watchdog`` for the injectable parts."""
    return Watchdog(
        settings, attach=attach, runner=runner, clock=now, send=send, log=log,
        postmortem=postmortem,
    ).run_once()


__all__ = [
    "HANG_KINDS",
    "JobOutcome",
    "NotificationOutcome",
    "WatchResult",
    "Watchdog",
    "check_heartbeat",
    "classify_verdicts",
    "expand_output_path",
    "heartbeat_status",
    "parse_slurm_duration",
    "run_once",
    "skip_reason",
]
