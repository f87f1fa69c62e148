"""The watchdog's Prometheus metrics, written as a text file after every pass.

node-exporter's textfile collector reads ``*.prom`` files from one directory; ``write_to_textfile``
of prometheus_client writes a temporary file and renames it, so a scrape never sees half a file.
Names (all gauges, one pass each):

    slurmdiag_watch_pass_duration_seconds          how long the last pass took
    slurmdiag_watch_pass_exit_code                 its exit code (0 ok, 1 stuck found, >= 2 failed)
    slurmdiag_watch_last_success_timestamp_seconds end of the last pass that completed (epoch)
    slurmdiag_watch_jobs{state}                    running | watched | stuck | inconclusive
    slurmdiag_watch_alerts{result}                 sent | failed (this pass) | pending (queued)
    slurmdiag_watch_attach_seconds{job_id}         time spent attaching to each job this pass
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from slurmdiag.errors import MissingExtra

if TYPE_CHECKING:
    from slurmdiag.watch.watchdog import WatchResult


def build_registry(result: WatchResult, last_success: float | None):  # type: ignore[no-untyped-def]
    try:
        from prometheus_client import CollectorRegistry, Gauge
    except ImportError:  # pragma: no cover - a runtime dependency
        raise MissingExtra("watch", "prometheus_client") from None

    registry = CollectorRegistry()

    def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
        return Gauge(name, doc, labels, registry=registry)

    gauge("slurmdiag_watch_pass_duration_seconds", "Duration of the last watch pass").set(
        max(0.0, result.finished - result.started)
    )
    gauge("slurmdiag_watch_pass_exit_code", "Exit code of the last watch pass").set(
        result.exit_code
    )
    success = gauge(
        "slurmdiag_watch_last_success_timestamp_seconds",
        "End of the last watch pass that completed (Unix time)",
    )
    if last_success is not None:
        success.set(last_success)
    counts = result.counts()
    jobs = gauge("slurmdiag_watch_jobs", "Jobs of the last pass, by state", ("state",))
    jobs.labels("running").set(result.jobs_running)
    jobs.labels("watched").set(result.jobs_selected)
    jobs.labels("stuck").set(counts.get("stuck", 0))
    jobs.labels("inconclusive").set(counts.get("inconclusive", 0))
    alerts = gauge("slurmdiag_watch_alerts", "Alerts of the last pass, by result", ("result",))
    alerts.labels("sent").set(sum(1 for n in result.notifications if n.delivered))
    alerts.labels("failed").set(sum(1 for n in result.notifications if not n.delivered))
    alerts.labels("pending").set(result.pending_alerts)
    attach = gauge(
        "slurmdiag_watch_attach_seconds", "Time spent attaching to a job in the last pass",
        ("job_id",),
    )
    for job_id, seconds in result.attach_seconds:
        attach.labels(job_id).set(seconds)
    return registry


def write_metrics(path: Path, result: WatchResult, last_success: float | None) -> None:
    """Replace ``path`` atomically with the metrics of ``result``."""
    from prometheus_client import write_to_textfile

    path.parent.mkdir(parents=True, exist_ok=True)
    write_to_textfile(str(path), build_registry(result, last_success))
