"""The watchdog end to end, with real squeue output, real webhooks on loopback and real analysis.

Slurm is replaced by a runner replaying real ``squeue --json`` (22.05) / text output, and attach
by a fake that analyses snapshots built in code (so the verdicts come from the real analysis).
The chat server and the report web server are real ``http.server`` instances on 127.0.0.1.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import os
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from snapfactory import collective, in_user, job
from support.webhook import WebhookServer, closed_port_url

from slurmdiag.analysis import analyze
from slurmdiag.cli import main
from slurmdiag.config import NotifySettings, Settings, WatchSettings
from slurmdiag.errors import JobNotRunning, TransportFailed
from slurmdiag.options import AttachOptions
from slurmdiag.slurm.parse import SlurmJob, parse_squeue_json
from slurmdiag.snapshot import Snapshot, Verdict
from slurmdiag.transport.run import CommandResult
from slurmdiag.watch import state as state_module
from slurmdiag.watch.state import StateDB
from slurmdiag.watch.watchdog import (
    Watchdog,
    WatchResult,
    check_heartbeat,
    classify_verdicts,
    expand_output_path,
    heartbeat_status,
    parse_slurm_duration,
    report_url_for,
    run_once,
    skip_reason,
    whole_het_jobs,
)

if TYPE_CHECKING:
    from typing_extensions import Self

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
SQUEUE_JSON = FIXTURES / "local_22.05_squeue_json_states_running.json"
SCONTROL_ONE_LINER = FIXTURES / "local_22.05_show_job_d_o_2node.txt"
K = 3
T0 = 1_800_000_000.0  # the fake clock's start (2027-01-15)

HUNG, HEALTHY = "101", "102"


# --------------------------------------------------------------------------------------------
# Fakes: Slurm, attach, clock
# --------------------------------------------------------------------------------------------


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def job_record(job_id: str, name: str, stdout: str, start: float, **changes: Any) -> dict[str, Any]:
    """A running job as squeue --json (22.05) prints it, from the real capture."""
    document = json.loads(SQUEUE_JSON.read_text())
    template = next(j for j in document["jobs"] if j["job_state"] == "RUNNING")
    record = copy.deepcopy(template)
    record.update(
        job_id=int(job_id),
        name=name,
        user_name="alice",
        standard_output=stdout,
        standard_error="",
        start_time=int(start),
        end_time=int(start) + 86400,
    )
    record.update(changes)
    return record


class FakeSlurm:
    """Answers squeue (JSON or, on 'old' Slurm, text) and scontrol from real output shapes."""

    def __init__(self, *, json_supported: bool = True, down: bool = False) -> None:
        self.jobs: list[dict[str, Any]] = []
        self.json_supported = json_supported
        self.down = down
        self.calls: list[list[str]] = []
        document = json.loads(SQUEUE_JSON.read_text())
        # The real capture also lists a CANCELLED job although --states=RUNNING was given.
        self.finished = [j for j in document["jobs"] if j["job_state"] != "RUNNING"]

    def __call__(self, argv: list[str], timeout: float, **kwargs: Any) -> CommandResult:
        self.calls.append(list(argv))
        if self.down:
            return CommandResult(
                tuple(argv),
                1,
                "",
                "squeue: error: Unable to contact slurm controller (connect failure)\n",
            )
        if argv[0] == "squeue" and "--json" in argv:
            if not self.json_supported:
                return CommandResult(tuple(argv), 1, "", "squeue: unrecognized option '--json'\n")
            document = json.loads(SQUEUE_JSON.read_text())
            document["jobs"] = self.jobs + self.finished
            return CommandResult(tuple(argv), 0, json.dumps(document), "")
        if argv[0] == "squeue":
            lines = [
                f"{j['job_id']}|{j['job_id']}|{j['user_name']}|RUNNING|None|debug|2|4|1:00:00|"
                f"2:00:00|2026-11-22T00:35:56|2026-11-22T00:35:55|{j['nodes']}|{j['name']}"
                for j in self.jobs
            ]
            return CommandResult(tuple(argv), 0, "\n".join(lines) + "\n", "")
        if argv[:2] == ["scontrol", "--version"]:
            return CommandResult(tuple(argv), 0, "slurm 22.05.8\n", "")
        if argv[0] == "scontrol":
            job_id = argv[-1]
            record = next((j for j in self.jobs if str(j["job_id"]) == job_id), None)
            if record is None:
                error = "slurm_load_jobs error: Invalid job id specified\n"
                return CommandResult(tuple(argv), 1, "", error)
            text = SCONTROL_ONE_LINER.read_text()
            text = text.replace("JobId=2 ", f"JobId={job_id} ")
            text = text.replace("/tmp/parsecap-2.out", record["standard_output"])
            return CommandResult(tuple(argv), 0, text, "")
        return CommandResult(tuple(argv), 127, "", f"unexpected command {argv}")


def hung_snapshot(job_id: str) -> Snapshot:
    """2 nodes x 4 ranks; rank 5 waits in a barrier at line 53, the rest in all_reduce."""
    snap = job(
        2, 4, lambda r: [collective("barrier", 53) if r == 5 else collective("all_reduce")] * K
    )
    return dataclasses.replace(snap, job=dataclasses.replace(snap.job, id=job_id))


def healthy_snapshot(job_id: str) -> Snapshot:
    def stacks(r: int) -> list[Any]:
        return [in_user(44) if (i + r % 2) % 2 else collective("all_reduce") for i in range(K)]

    snap = job(2, 2, stacks)
    return dataclasses.replace(snap, job=dataclasses.replace(snap.job, id=job_id))


class FakeAttach:
    """Stands in for slurmdiag.api.attach: real analysis of snapshots built in code.

    With an ``out_dir`` it writes report.html and snapshot.json like the real one.
    """

    def __init__(self, snapshots: dict[str, Any], delay_s: float = 0.0) -> None:
        self.snapshots = snapshots
        self.delay_s = delay_s
        self.calls: list[tuple[str, AttachOptions, Path | None]] = []
        self._lock = threading.Lock()

    def __call__(self, job_id: str, options: AttachOptions, *, out_dir: Path | None = None
                 ) -> Snapshot:
        with self._lock:
            self.calls.append((job_id, options, out_dir))
        if self.delay_s:
            time.sleep(self.delay_s)
        make = self.snapshots[job_id]
        if isinstance(make, Exception):
            raise make
        snapshot = make(job_id)
        snapshot = dataclasses.replace(snapshot, verdicts=analyze(snapshot).verdicts)
        if out_dir is not None:
            out = Path(out_dir)
            out.mkdir(parents=True, exist_ok=True)
            report = out / "report.html"
            report.write_text(f"<html><body>report of job {job_id}</body></html>")
            snapshot = dataclasses.replace(snapshot, report=str(report))
            (out / "snapshot.json").write_text(snapshot.to_json())
        return snapshot

    def jobs(self) -> list[str]:
        return [job_id for job_id, _, _ in self.calls]


class ReportServer:
    """Serves report_dir read-only over HTTP, like the nginx recipe does."""

    def __init__(self, root: Path) -> None:
        handler = functools.partial(_QuietFiles, directory=str(root))
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/reports"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


class _QuietFiles(SimpleHTTPRequestHandler):
    def translate_path(self, path: str) -> str:
        return super().translate_path(path.removeprefix("/reports"))

    def log_message(self, format: str, *args: Any) -> None:
        pass


# --------------------------------------------------------------------------------------------
# A small world: two running jobs with silent logs
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class World:
    tmp: Path
    slurm: FakeSlurm
    attach: FakeAttach
    clock: Clock
    logs: list[str]

    def settings(
        self, webhook_url: str | None = None, kind: str = "slack", **watch: Any
    ) -> Settings:
        report_dir = self.tmp / "reports"
        values: dict[str, Any] = {
            "stale_after": 600.0,
            "min_runtime": 600.0,
            "report_dir": report_dir,
            "report_url_base": watch.pop("report_url_base", "https://reports.example.org/r"),
            "state_db": self.tmp / "state" / "watch.db",
            "heartbeat_file": self.tmp / "state" / "heartbeat.json",
            "confirm_interval": 0.1,
        }
        values.update(watch)
        notify = NotifySettings(
            kind=kind if webhook_url else None,
            webhook_url=webhook_url,
            timeout=1.0,
            retries=2,
            max_time=3.0,
        )
        return Settings(watch=WatchSettings(**values), notify=notify)

    def run(self, settings: Settings, **kwargs: Any) -> WatchResult:
        return run_once(
            settings,
            attach=kwargs.pop("attach", self.attach),
            runner=self.slurm,
            now=self.clock,
            log=self.logs.append,
            **kwargs,
        )

    def log_file(self, job_id: str) -> Path:
        return self.tmp / "logs" / f"train-{job_id}.out"

    def write_log(self, job_id: str, text: str) -> None:
        path = self.log_file(job_id)
        with path.open("a") as fh:
            fh.write(text)
        os.utime(path, (self.clock.now, self.clock.now))


@pytest.fixture
def world(tmp_path: Path) -> World:
    clock = Clock()
    slurm = FakeSlurm()
    (tmp_path / "logs").mkdir()
    for job_id, name in ((HUNG, "llm-pretrain"), (HEALTHY, "llm-finetune")):
        # Logs named by pattern, as sbatch --output=logs/train-%j.out leaves them in squeue --json.
        slurm.jobs.append(
            job_record(
                job_id,
                name,
                "logs/train-%j.out",
                T0 - 7200,
                current_working_directory=str(tmp_path),
            )
        )
        log = tmp_path / "logs" / f"train-{job_id}.out"
        log.write_text("step 1\nstep 2\n")
        os.utime(log, (T0 - 3600, T0 - 3600))  # silent for an hour
    attach = FakeAttach({HUNG: hung_snapshot, HEALTHY: healthy_snapshot})
    return World(tmp_path, slurm, attach, clock, [])


def posts_about(server: WebhookServer, job_id: str) -> list[dict[str, Any]]:
    return [body for body in server.delivered if job_id in json.dumps(body)]


def link_in(body: dict[str, Any], kind: str) -> str:
    if kind == "slack":
        (actions,) = [b for b in body["blocks"] if b["type"] == "actions"]
        return str(actions["elements"][0]["url"])
    if kind == "mattermost":
        return str(body["text"].split("[Open report](", 1)[1].split(")", 1)[0])
    if kind == "teams":
        return str(body["attachments"][0]["content"]["actions"][0]["url"])
    return str(body["report_url"])


# --------------------------------------------------------------------------------------------
# The "done when" of the issue
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["slack", "mattermost", "teams", "webhook"])
def test_one_post_for_the_hung_job_with_culprit_and_a_link_that_resolves(
    world: World, kind: str
) -> None:
    with WebhookServer() as chat, ReportServer(world.tmp / "reports") as reports:
        settings = world.settings(chat.url, kind=kind, report_url_base=reports.base_url)
        # WHEN the watchdog runs over a hung and a healthy job, both silent for an hour
        first = world.run(settings)
        # THEN exactly one post, about the hung job, naming its culprit rank
        assert first.exit_code == 1
        assert first.stuck_jobs == (HUNG,)
        assert len(chat.requests) == 1
        (body,) = chat.delivered
        text = json.dumps(body)
        assert HUNG in text and "llm-pretrain" in text
        assert "mismatched_collective" in text
        if kind == "webhook":
            assert body["verdicts"][0]["culprit_ranks"] == [5]
        else:
            assert "rank 5" in text or "ranks: *5*" in text or "ranks: **5**" in text
        assert "train.py:53" in text
        assert posts_about(chat, HEALTHY) == []
        # AND the link resolves to the report file
        url = link_in(body, kind)
        with urllib.request.urlopen(url, timeout=5) as response:
            assert f"report of job {HUNG}" in response.read().decode()
        assert url.startswith(f"{reports.base_url}/{HUNG}/")
        # WHEN it runs again (the clock moves on, nothing changed)
        world.clock.advance(300)
        second = world.run(settings)
        world.clock.advance(900)
        third = world.run(settings)  # re-attaches: same verdict, still no new post
        # THEN nothing new is posted, and the job is still reported stuck
        assert len(chat.requests) == 1
        assert second.exit_code == 1 and third.exit_code == 1
        assert third.stuck_jobs == (HUNG,)


def test_only_confirmed_stuck_jobs_get_a_report(world: World) -> None:
    result = world.run(world.settings())
    stuck = next(o for o in result.outcomes if o.job_id == HUNG)
    healthy = next(o for o in result.outcomes if o.job_id == HEALTHY)
    assert stuck.status == "stuck" and stuck.report is not None
    report = Path(stuck.report)
    assert report.is_file() and report.parent.parent == world.tmp / "reports" / HUNG
    assert report.parent.name == "20270115T080000Z"
    assert stuck.report_url == f"https://reports.example.org/r/{HUNG}/20270115T080000Z/report.html"
    assert healthy.status == "not_stuck" and healthy.detail == "stacks are moving"
    assert not (world.tmp / "reports" / HEALTHY).exists()
    # The light attach samples (>= 2) and writes nothing; only the stuck job gets a full attach.
    light = [o for _, o, out_dir in world.attach.calls if out_dir is None]
    assert {o.samples for o in light} == {3} and all(o.strace_s == 0.0 for o in light)
    assert {o.interval_s for o in light} == {0.1} and {o.timeout_s for o in light} == {60.0}
    full = [(j, o) for j, o, out_dir in world.attach.calls if out_dir is not None]
    assert [j for j, _ in full] == [HUNG] and full[0][1] == AttachOptions(timeout_s=60.0)


def test_500_then_200_is_retried_and_delivered_once(world: World) -> None:
    with WebhookServer(statuses=[500]) as chat:
        result = world.run(world.settings(chat.url))
    assert [r["status"] for r in chat.requests] == [500, 200]
    assert len(chat.delivered) == 1
    (note,) = result.notifications
    assert note.delivered and note.attempts == 2


def test_unreachable_webhook_is_bounded_recorded_and_delivered_next_run(world: World) -> None:
    # GIVEN the chat server is down (nothing listens on the port)
    url = closed_port_url()
    settings = world.settings(url)
    started = time.monotonic()
    first = world.run(settings)
    # THEN the run ends within its bound, still says "stuck", and records the failure
    assert time.monotonic() - started < settings.notify.max_time + 5
    assert first.exit_code == 1
    (note,) = first.notifications
    assert not note.delivered and "connection failed" in (note.error or "")
    assert first.pending_alerts == 1
    assert "SECRET" not in json.dumps(first.to_dict()) and all(
        "SECRET" not in m for m in world.logs
    )
    # WHEN the chat server is back (same port) and the next run comes
    port = int(url.split(":")[2].split("/")[0])
    with WebhookServer(port=port) as chat:
        world.clock.advance(300)
        second = world.run(settings)
    # THEN the earlier alert is delivered, once
    assert len(chat.delivered) == 1 and HUNG in json.dumps(chat.delivered[0])
    assert [n.retry for n in second.notifications] == [True]
    assert second.pending_alerts == 0


def test_two_runs_at_the_same_moment_send_one_alert(world: World) -> None:
    # GIVEN a slow attach, so that the two runs overlap
    world.attach.delay_s = 0.3
    with WebhookServer() as chat:
        settings = world.settings(chat.url)
        results: list[WatchResult] = []
        barrier = threading.Barrier(2)

        def one_run() -> None:
            barrier.wait()
            results.append(world.run(settings))

        threads = [threading.Thread(target=one_run) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    # THEN one run did the work, the other left quietly (exit 0), and one alert was posted
    assert len(chat.requests) == 1
    assert sorted(r.locked_out for r in results) == [False, True]
    assert sorted(r.exit_code for r in results) == [0, 1]
    assert any("another watch run holds the lock" in line for line in world.logs)


def test_without_the_lock_the_sqlite_claim_still_prevents_a_double_alert(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a file system where flock does not exclude (e.g. two login nodes on NFS)
    monkeypatch.setattr(state_module.WatchLock, "acquire", lambda self: True)
    monkeypatch.setattr("slurmdiag.watch.watchdog.WatchLock.acquire", lambda self: True)
    world.attach.delay_s = 0.3
    with WebhookServer() as chat:
        settings = world.settings(chat.url)
        barrier = threading.Barrier(2)
        results: list[WatchResult] = []

        def one_run() -> None:
            barrier.wait()
            results.append(world.run(settings))

        threads = [threading.Thread(target=one_run) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert [r.exit_code for r in results] == [1, 1]
    assert len(chat.requests) == 1


# --------------------------------------------------------------------------------------------
# Cheap signals, filters, budgets
# --------------------------------------------------------------------------------------------


def test_growing_output_and_young_jobs_are_not_attached(world: World) -> None:
    world.write_log(HEALTHY, "step 3\n")  # written just now
    world.slurm.jobs[0]["start_time"] = int(T0 - 120)  # the hung one started 2 minutes ago
    result = world.run(world.settings())
    statuses = {o.job_id: o.status for o in result.outcomes}
    assert statuses == {HUNG: "young", HEALTHY: "active"}
    assert world.attach.calls == []
    assert result.exit_code == 0


def test_first_sighting_of_a_fresh_log_is_not_stale(world: World) -> None:
    world.write_log(HUNG, "x")
    world.write_log(HEALTHY, "x")
    assert world.run(world.settings()).exit_code == 0
    assert world.attach.calls == []
    # ten minutes without growth later, the hung job is confirmed
    world.clock.advance(601)
    result = world.run(world.settings())
    assert result.stuck_jobs == (HUNG,)


def test_recently_checked_jobs_are_not_attached_again(world: World) -> None:
    world.run(world.settings())
    calls = len(world.attach.calls)
    world.clock.advance(60)
    result = world.run(world.settings())
    assert len(world.attach.calls) == calls
    statuses = {o.job_id: o.status for o in result.outcomes}
    assert statuses == {HUNG: "stuck", HEALTHY: "checked_recently"}
    assert result.exit_code == 1


def test_attach_budget_defers_the_rest(world: World) -> None:
    result = world.run(world.settings(max_jobs_per_run=1))
    assert sorted(o.status for o in result.outcomes) == ["deferred", "stuck"]
    assert len({j for j, _, _ in world.attach.calls}) == 1


def test_filters(world: World) -> None:
    result = world.run(world.settings(users=("bob",)))
    assert result.jobs_running == 2 and result.jobs_selected == 0 and world.attach.calls == []
    result = world.run(world.settings(exclude_job_name_patterns=("llm-pre*",)))
    assert {o.job_id for o in result.outcomes} == {HEALTHY}


def test_a_het_job_of_a_watched_partition_is_watched_through_its_leader(world: World) -> None:
    # GIVEN the hung job as a het job's leader on 1 node of partition cpu, with a component
    # of 1 node on partition gpu (squeue lists both rows), and a watch of gpu jobs of 2 nodes
    world.slurm.jobs = [j for j in world.slurm.jobs if str(j["job_id"]) == HUNG]
    leader = world.slurm.jobs[0]
    leader.update(partition="cpu", node_count=1, nodes="node001", het_job_id=int(HUNG),
                  het_job_offset=0)
    world.slurm.jobs.append(dict(leader, job_id=int(HUNG) + 1, partition="gpu",
                                 nodes="node002", het_job_offset=1))
    world.clock.now += 3600
    result = world.run(world.settings(partitions=("gpu",), min_nodes=2))
    # THEN the whole job is selected (its leader's row alone is neither gpu nor 2 nodes) and
    # attached by the leader's id alone
    assert result.jobs_selected == 1
    assert {j for j, _, _ in world.attach.calls} == {HUNG}


def test_skip_reasons() -> None:
    watch = WatchSettings(
        partitions=("gpu",),
        min_nodes=2,
        job_name_patterns=("train-*",),
        exclude_users=("root",),
        exclude_jobs=("77",),
    )
    base = SlurmJob(
        job_id="5", name="train-a", user="alice", state="RUNNING", partition="gpu", num_nodes=2
    )
    assert skip_reason(base, watch) is None
    assert "partition" in (skip_reason(dataclasses.replace(base, partition="cpu"), watch) or "")
    assert "min_nodes" in (skip_reason(dataclasses.replace(base, num_nodes=1), watch) or "")
    assert "job_name_patterns" in (skip_reason(dataclasses.replace(base, name="eval"), watch) or "")
    assert "excluded" in (skip_reason(dataclasses.replace(base, user="root"), watch) or "")
    task = dataclasses.replace(base, job_id="80", array_job_id="77", array_task_id="3")
    assert skip_reason(task, watch) == "listed in exclude_jobs"
    assert skip_reason(dataclasses.replace(base, state="PENDING"), watch) == "state PENDING"
    # a het job's leader (component 0) is watched, its id naming every component for attach;
    # the other components' rows are looked at with it
    leader = dataclasses.replace(base, het_job_id="5", het_job_offset=0)
    other = dataclasses.replace(base, job_id="6", het_job_id="5", het_job_offset=1)
    assert skip_reason(leader, watch) is None
    assert skip_reason(other, watch) == "component of het job 5, looked at with its leader"


def test_a_het_job_is_filtered_as_a_whole() -> None:
    # GIVEN a het job whose leader runs on 1 cpu node and its component on 1 gpu node, and a
    # watch of gpu jobs of 2 nodes or more
    watch = WatchSettings(partitions=("gpu",), min_nodes=2)
    leader = SlurmJob(job_id="5", name="train", user="alice", state="RUNNING", partition="cpu",
                      nodes=("node001",), num_nodes=1, het_job_id="5", het_job_offset=0)
    gpu = dataclasses.replace(leader, job_id="6", partition="gpu", nodes=("node002",),
                              het_job_offset=1)
    alone = SlurmJob(job_id="9", state="RUNNING", partition="cpu", num_nodes=1)
    whole = whole_het_jobs([gpu, alone, leader])
    # THEN the leader's row alone would be left out, the whole job is watched: a gpu job of 2
    # nodes, under the leader's id (which attach looks at every component by)
    assert "partition" in (skip_reason(leader, watch) or "")
    assert list(whole) == ["5"]
    assert (whole["5"].job_id, whole["5"].partition, whole["5"].num_nodes) == ("5", "cpu,gpu", 2)
    assert whole["5"].nodes == ("node001", "node002")
    assert skip_reason(whole["5"], watch) is None
    # AND components without their leader's row are filtered one by one
    assert whole_het_jobs([gpu]) == {}


def test_squeue_text_fallback_and_scontrol_for_log_paths(world: World) -> None:
    # GIVEN a Slurm without squeue --json
    world.slurm.json_supported = False
    for record in world.slurm.jobs:  # scontrol prints StdOut already expanded
        record["standard_output"] = str(world.log_file(str(record["job_id"])))
    dog = Watchdog(
        world.settings(),
        attach=world.attach,
        runner=world.slurm,
        clock=world.clock,
        log=world.logs.append,
    )
    result = dog.run_once()
    assert result.squeue_mode == "text" and result.stuck_jobs == (HUNG,)
    assert any(c[:2] == ["scontrol", "show"] for c in world.slurm.calls)
    # "check once": the next run of the same watchdog goes straight to the text form
    world.slurm.calls.clear()
    world.clock.advance(60)
    dog.run_once()
    assert not any("--json" in call for call in world.slurm.calls)


def test_slurm_down_is_a_watchdog_failure_without_heartbeat(world: World) -> None:
    world.slurm.down = True
    settings = world.settings()
    result = world.run(settings)
    assert result.exit_code == 5
    assert "Unable to contact slurm controller" in result.errors[0]
    assert not settings.watch.heartbeat_file.exists()


# --------------------------------------------------------------------------------------------
# Attach outcomes
# --------------------------------------------------------------------------------------------


def test_attach_failure_is_inconclusive_not_a_crash(world: World) -> None:
    world.attach.snapshots[HUNG] = TransportFailed("srun refused the step")
    world.attach.snapshots[HEALTHY] = JobNotRunning("job 102 has ended: COMPLETED")
    result = world.run(world.settings())
    assert result.exit_code == 0
    assert {o.status for o in result.outcomes} == {"inconclusive"}
    assert result.errors == (f"job {HUNG}: attach failed: srun refused the step",)
    assert world.settings().watch.heartbeat_file.exists()


def test_failed_full_attach_still_alerts_without_a_report(world: World) -> None:
    calls = {"n": 0}

    def flaky(job_id: str) -> Snapshot:
        calls["n"] += 1
        if calls["n"] > 1:
            raise TransportFailed("node001 did not answer")
        return hung_snapshot(job_id)

    world.attach.snapshots[HUNG] = flaky
    with WebhookServer() as chat:
        result = world.run(world.settings(chat.url))
    assert result.stuck_jobs == (HUNG,)
    body = chat.delivered[0]
    assert "report" not in json.dumps(body["blocks"]).lower() or "Open report" not in json.dumps(
        body
    )
    assert any("no report" in e for e in result.errors)


def test_notifications_off_still_finds_and_reports(world: World) -> None:
    settings = world.settings(None)
    result = world.run(settings)
    assert result.exit_code == 1 and result.notifications == ()
    with StateDB(settings.watch.state_db) as db:
        assert [a.status for a in db.alerts(HUNG)] == ["disabled"]


# --------------------------------------------------------------------------------------------
# Recovery
# --------------------------------------------------------------------------------------------


def test_recovered_message_when_the_stuck_job_writes_again(world: World) -> None:
    with WebhookServer() as chat:
        settings = world.settings(chat.url, kind="webhook")
        world.run(settings)
        world.clock.advance(300)
        world.write_log(HUNG, "step 3\n")
        result = world.run(settings)
        assert [b["event"] for b in chat.delivered] == ["stuck_job", "job_recovered"]
        assert chat.delivered[1]["job"]["id"] == HUNG
        assert "growing again" in chat.delivered[1]["reason"]
        assert result.exit_code == 0
        # stuck again later with the same verdict: a new incident, posted again
        world.clock.advance(3600)
        again = world.run(settings)
        assert again.stuck_jobs == (HUNG,)
        assert [b["event"] for b in chat.delivered] == ["stuck_job", "job_recovered", "stuck_job"]


def test_recovered_message_when_the_stuck_job_ends(world: World) -> None:
    with WebhookServer() as chat:
        settings = world.settings(chat.url, kind="webhook")
        world.run(settings)
        world.slurm.jobs = [j for j in world.slurm.jobs if str(j["job_id"]) != HUNG]
        world.clock.advance(300)
        result = world.run(settings)
    assert [b["event"] for b in chat.delivered] == ["stuck_job", "job_recovered"]
    assert chat.delivered[1]["reason"] == "the job is no longer running"
    assert [(o.job_id, o.status) for o in result.outcomes if o.job_id == HUNG] == [(HUNG, "ended")]


def _fixture_postmortem(calls: list[str]):  # type: ignore[no-untyped-def]
    """The real post-mortem of a real segfaulted job (sacct and log captured on the local cluster)."""
    from slurmdiag.post_mortem.build import postmortem_job

    pm = Path(__file__).resolve().parents[1] / "fixtures" / "postmortem"

    def sacct(argv: list[str], timeout: float, **kwargs: Any) -> CommandResult:
        name = "sacct_22.05_json_seg.json" if "--json" in argv else "sacct_22.05_parsable2_seg.txt"
        return CommandResult(tuple(argv), 0, (pm / name).read_text(), "")

    def postmortem(job_id: str, out_dir: Path, runner: Any) -> Snapshot:
        calls.append(job_id)
        return postmortem_job("703602", out_dir=out_dir, runner=sacct, cores=False,
                              logs=(str(pm / "local_seg_job.out"),)).snapshot

    return postmortem


def test_postmortem_posted_once_when_an_alerted_job_ends_in_failure(world: World) -> None:
    # GIVEN a job the watchdog alerted about as stuck
    calls: list[str] = []
    postmortem = _fixture_postmortem(calls)
    with WebhookServer() as chat:
        settings = world.settings(chat.url, kind="webhook")
        world.run(settings, postmortem=postmortem)
        # WHEN it ends (in failure: a rank segfaulted) and the next pass runs
        world.slurm.jobs = [j for j in world.slurm.jobs if str(j["job_id"]) != HUNG]
        world.clock.advance(300)
        result = world.run(settings, postmortem=postmortem)
        # THEN one post-mortem is posted instead of "recovered", naming the culprit, with a link
        # to the post-mortem report
        assert [b["event"] for b in chat.delivered] == ["stuck_job", "job_postmortem"]
        body = chat.delivered[1]
        assert body["job"]["id"] == HUNG and body["reason"] == "the job ended FAILED"
        assert body["verdicts"][0]["kind"] == "rank_crashed"
        assert body["verdicts"][0]["culprit_ranks"] == [3]
        assert body["report_url"].startswith("https://reports.example.org/r/")
        assert Path(body["report_path"]).is_file()
        assert [(o.job_id, o.status) for o in result.outcomes if o.job_id == HUNG] == [(HUNG, "ended")]
        # AND a later pass posts nothing more (the state records it)
        world.clock.advance(300)
        world.run(settings, postmortem=postmortem)
        assert len(chat.delivered) == 2 and calls == [HUNG]
    alerts = StateDB(settings.watch.state_db).alerts(HUNG)
    assert [a.event for a in alerts] == ["stuck", "postmortem"]


def test_no_postmortem_for_a_job_never_alerted_about(world: World) -> None:
    # GIVEN a healthy job (never alerted) that ends
    calls: list[str] = []
    with WebhookServer() as chat:
        settings = world.settings(chat.url, kind="webhook")
        world.run(settings, postmortem=_fixture_postmortem(calls))
        world.slurm.jobs = [j for j in world.slurm.jobs if str(j["job_id"]) != HEALTHY]
        world.clock.advance(300)
        world.run(settings, postmortem=_fixture_postmortem(calls))
    # THEN no post-mortem is run or posted for it
    assert HEALTHY not in calls
    assert all(b["event"] != "job_postmortem" for b in chat.delivered)


def test_a_stuck_job_missing_from_squeue_but_running_is_not_recovered(world: World) -> None:
    # GIVEN a stuck job that squeue leaves out once, while scontrol still shows it running
    with WebhookServer() as chat:
        settings = world.settings(chat.url, kind="webhook")
        world.run(settings)
        hung = world.slurm.jobs[0]

        def squeue_without_it(argv: list[str], timeout: float, **kwargs: Any) -> CommandResult:
            if argv[0] == "squeue":
                jobs, world.slurm.jobs = world.slurm.jobs, world.slurm.jobs[1:]
                try:
                    return world.slurm(argv, timeout)
                finally:
                    world.slurm.jobs = jobs
            return world.slurm(argv, timeout)

        world.clock.advance(300)
        run_once(settings, attach=world.attach, runner=squeue_without_it, now=world.clock)
        assert str(hung["job_id"]) == HUNG
    # THEN no "recovered" message
    assert [b["event"] for b in chat.delivered] == ["stuck_job"]


def test_no_recovered_message_when_disabled(world: World) -> None:
    with WebhookServer() as chat:
        settings = world.settings(chat.url, notify_recovered=False)
        world.run(settings)
        world.slurm.jobs = world.slurm.jobs[1:]
        world.clock.advance(300)
        world.run(settings)
    assert len(chat.delivered) == 1


# --------------------------------------------------------------------------------------------
# Heartbeat (dead-man switch) and CLI
# --------------------------------------------------------------------------------------------


def test_heartbeat_written_after_a_good_run(world: World) -> None:
    settings = world.settings()
    path = settings.watch.heartbeat_file
    assert check_heartbeat(path, 1200, now=T0) == 2  # missing: CRITICAL
    world.run(settings)
    data = json.loads(path.read_text())
    assert data["epoch"] == T0 and data["summary"]["stuck_jobs"] == [HUNG]
    assert check_heartbeat(path, 1200, now=T0 + 60) == 0
    assert check_heartbeat(path, 1200, now=T0 + 1201) == 2  # stale: CRITICAL
    path.write_text("{not json")
    assert check_heartbeat(path, 1200, now=T0) == 3  # unreadable: UNKNOWN


def test_heartbeat_of_a_pass_with_errors_is_a_warning(world: World) -> None:
    # GIVEN a pass whose attach of one job failed (an error, not a dead watchdog)
    world.attach.snapshots[HUNG] = TransportFailed("srun refused the step")
    settings = world.settings()
    world.run(settings)
    # THEN the fresh heartbeat is a WARNING (1) naming the error, not OK and not CRITICAL
    code, message = heartbeat_status(settings.watch.heartbeat_file, 1200, now=T0 + 60)
    assert code == 1 and "srun refused the step" in message


def test_cli_watch_once_and_check_heartbeat(
    world: World, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a config file and the fakes behind the real CLI
    config = world.tmp / "config.toml"
    config.write_text(
        f'[watch]\nreport_dir = "{world.tmp / "reports"}"\nstale_after = "10m"\nmin_runtime = "0s"\n'
        'confirm_interval = "0.1s"\n'
    )
    real_watchdog = Watchdog

    def fake_watchdog(settings: Settings, **kwargs: Any) -> Watchdog:
        return real_watchdog(settings, attach=world.attach, runner=world.slurm, clock=world.clock)

    monkeypatch.setattr("slurmdiag.watch.watchdog.Watchdog", fake_watchdog)
    # WHEN a pass finds the hung job  THEN exit 1, the result as JSON on stdout, people on stderr
    assert main(["watch", "--once", "--config", str(config), "--json"]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["stuck_jobs"] == [HUNG]
    assert f"job {HUNG} (llm-pretrain) stuck" in captured.err
    # The fake clock is ahead of the real one, so the heartbeat it wrote reads as fresh.
    assert main(["watch", "--check-heartbeat", "20m", "--config", str(config)]) == 0
    assert capsys.readouterr().out.startswith("SLURMDIAG WATCH OK - heartbeat fresh")
    heartbeat = world.tmp / "reports" / ".slurmdiag" / "heartbeat.json"
    data = json.loads(heartbeat.read_text())
    data["epoch"] = time.time() - 3600
    heartbeat.write_text(json.dumps(data))
    assert main(["watch", "--check-heartbeat", "20m", "--config", str(config)]) == 2  # stale
    assert "CRITICAL - heartbeat is stale" in capsys.readouterr().out
    heartbeat.unlink()
    assert main(["watch", "--check-heartbeat", "20m", "--config", str(config)]) == 2
    assert main(["watch", "--config", str(config)]) == 2  # --once is required: a usage error
    # A bad MAXAGE or config is UNKNOWN (3): the monitoring convention, never CRITICAL.
    capsys.readouterr()
    assert main(["watch", "--check-heartbeat", "soon", "--config", str(config)]) == 3
    assert "UNKNOWN" in capsys.readouterr().out
    assert main(["watch", "--check-heartbeat", "20m", "--config", str(world.tmp / "no")]) == 3


# --------------------------------------------------------------------------------------------
# Pure helpers
# --------------------------------------------------------------------------------------------


def test_parse_slurm_duration() -> None:
    assert parse_slurm_duration("0:49") == 49
    assert parse_slurm_duration("1:00:00") == 3600
    assert parse_slurm_duration("2-03:04:05") == 2 * 86400 + 3 * 3600 + 4 * 60 + 5
    assert parse_slurm_duration("13-06:37:11") == 13 * 86400 + 6 * 3600 + 37 * 60 + 11
    assert parse_slurm_duration("INVALID") is None and parse_slurm_duration(None) is None


def test_expand_output_path_on_the_real_22_05_record() -> None:
    (running,) = [j for j in parse_squeue_json(SQUEUE_JSON.read_text()) if j.state == "RUNNING"]
    assert running.stdout == "/tmp/simple-%j.out"  # squeue --json does not expand it
    assert expand_output_path(running.stdout, running) == "/tmp/simple-4.out"
    job_ = dataclasses.replace(
        running, array_job_id="40", array_task_id="7", work_dir="/w", name="n", user="u"
    )
    assert expand_output_path("%x-%A_%3a.%u.log", job_) == "/w/n-40_007.u.log"
    assert expand_output_path("out-%N.txt", job_) == "/w/out-node001.txt"
    assert expand_output_path("rank-%t.out", job_) is None  # per task: unknowable here
    assert expand_output_path("/dev/null", job_) is None
    assert expand_output_path("100%%.log", job_) == "/w/100%.log"


def test_classify_verdicts() -> None:
    hang = Verdict("mismatched_collective", "critical", "x", (5,), ("t.py:1",))
    nic = Verdict("nic_mismatch", "warning", "ranks on different interfaces")
    moving = Verdict("progressing", "info", "stacks move")
    assert classify_verdicts([hang, nic]) == (True, (hang,))
    assert classify_verdicts([hang, moving]) == (False, ())
    assert classify_verdicts([nic]) == (False, ())
    assert classify_verdicts([Verdict("idle", "info", "sleeping")]) == (False, ())
    # "a slow step or a hang, cannot tell" (info): in a job whose output has not grown for
    # stale_after (the only jobs the watchdog confirms), the hang
    slow = Verdict("slow_step", "info", "a slow step or a hang, cannot tell: ...", (3,))
    assert classify_verdicts([slow, nic]) == (True, (slow,))
    assert classify_verdicts([slow, moving]) == (False, ())
    assert classify_verdicts(analyze(hung_snapshot("1")).verdicts)[0] is True
    assert classify_verdicts(analyze(healthy_snapshot("1")).verdicts)[0] is False


def test_report_url_for(tmp_path: Path) -> None:
    report = tmp_path / "r" / "12_3" / "20270101T000000Z" / "report.html"
    assert (
        report_url_for(str(report), tmp_path / "r", "https://x.org/reports/")
        == "https://x.org/reports/12_3/20270101T000000Z/report.html"
    )
    assert report_url_for(str(report), tmp_path / "elsewhere", "https://x.org") is None
    assert report_url_for(str(report), tmp_path / "r", None) is None


@pytest.fixture(autouse=True)
def _bounded(request: pytest.FixtureRequest) -> Iterator[None]:
    # Every test here must finish well within the watchdog's own bounds.
    started = time.monotonic()
    yield
    assert time.monotonic() - started < 30, f"{request.node.name} took too long"
