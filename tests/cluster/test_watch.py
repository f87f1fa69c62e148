"""The watchdog end to end: real squeue, real hung and healthy jobs, real webhook and web server."""

from __future__ import annotations

import functools
import subprocess
import sys
import threading
import urllib.request
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from support.webhook import WebhookServer

pytestmark = [pytest.mark.cluster, pytest.mark.scenario("rank_gated_collective", "healthy_slow")]

REPO = Path(__file__).resolve().parents[2]


class ReportServer:
    """Serves report_dir read-only on loopback, like the nginx recipe in deploy/."""

    def __init__(self, root: Path) -> None:
        handler = functools.partial(SimpleHTTPRequestHandler, directory=str(root))
        handler.log_message = lambda *a, **k: None  # type: ignore[method-assign]
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/reports"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def write_config(path: Path, report_dir: Path, url_base: str, webhook_url: str) -> Path:
    path.write_text(
        "[watch]\n"
        'stale_after = "0s"\nmin_runtime = "0s"\n'
        f'report_dir = "{report_dir}"\nreport_url_base = "{url_base}"\n'
        'job_name_patterns = ["slurmdiag-rank_gated_collective", "slurmdiag-healthy_slow"]\n'
        'confirm_samples = 2\nconfirm_interval = "0.5s"\nattach_timeout = "30s"\n'
        "[notify]\n"
        f'kind = "webhook"\nwebhook_url = "{webhook_url}"\ntimeout = "5s"\nretries = 2\n'
    )
    return path


def watch_once(config: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slurmdiag.cli", "watch", "--once",
                           "--config", str(config)],
                          capture_output=True, text=True, timeout=240, cwd=REPO, check=False)


@pytest.fixture
def servers(tmp_path):
    report_dir = tmp_path / "reports"
    report_dir.mkdir()
    web = ReportServer(tmp_path)
    with WebhookServer() as hook:
        yield report_dir, web, hook
    web.close()


def test_one_post_for_the_hung_job_none_for_the_healthy_one(scenario_run, servers, tmp_path):
    # GIVEN a hung job (rank 0 in a rank-gated barrier) and a healthy slow job, both running
    hung = scenario_run("rank_gated_collective")
    healthy = scenario_run("healthy_slow")
    report_dir, web, hook = servers
    config = write_config(tmp_path / "config.toml", report_dir, web.base, hook.url)
    # WHEN the watchdog runs once
    first = watch_once(config)
    # THEN it exits 1 (stuck jobs found) and posted exactly once, for the hung job
    assert first.returncode == 1, first.stderr
    posts = hook.delivered
    assert len(posts) == 1, posts
    body = posts[0]
    assert body["job"]["id"] == hung.job_id
    assert healthy.job_id != hung.job_id
    culprit = hung.truth["culprit_ranks"][0]
    assert any(culprit in v.get("culprit_ranks", ()) for v in body["verdicts"]), body["verdicts"]
    # AND the link resolves to the written report, which names the culprit site
    with urllib.request.urlopen(body["report_url"], timeout=10) as answer:
        page = answer.read().decode()
    assert answer.status == 200
    assert Path(hung.truth["culprit_site"].split(":")[0]).name in page
    assert hook.url not in first.stderr and "T0SECRET" not in first.stderr
    # WHEN it runs again THEN nothing new is posted
    second = watch_once(config)
    assert second.returncode == 1, second.stderr
    assert len(hook.delivered) == 1


def test_two_runs_at_the_same_moment_alert_once(scenario_run, servers, tmp_path):
    # GIVEN a fresh state and the hung job
    scenario_run("rank_gated_collective")
    scenario_run("healthy_slow")
    report_dir, web, hook = servers
    config = write_config(tmp_path / "config.toml", report_dir, web.base, hook.url)
    # WHEN two watch runs start together (a slow cron)
    argv = [sys.executable, "-m", "slurmdiag.cli", "watch", "--once", "--config", str(config)]
    procs = [subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    codes = [p.wait(timeout=240) for p in procs]
    # THEN exactly one alert was posted, and neither run failed
    assert len(hook.delivered) == 1
    assert sorted(codes) in ([0, 1], [1, 1]), [p.stderr.read() for p in procs]


def test_unreachable_webhook_is_recorded_and_the_next_run_delivers_through_a_500(
    scenario_run, tmp_path
):
    # GIVEN a hung job, and a webhook URL on a loopback port nobody listens on yet
    from support.webhook import closed_port_url

    scenario_run("rank_gated_collective")
    scenario_run("healthy_slow")
    url = closed_port_url()
    port = int(url.split(":")[2].split("/")[0])
    report_dir = tmp_path / "reports"
    report_dir.mkdir()
    web = ReportServer(tmp_path)
    config = write_config(tmp_path / "config.toml", report_dir, web.base, url)
    try:
        # WHEN the watchdog runs with the webhook down
        first = watch_once(config)
        # THEN the run still ends (stuck found), saying the post failed, without the URL
        assert first.returncode == 1, first.stderr
        assert "T0SECRET" not in first.stderr
        # WHEN the webhook comes up answering 500 once, then 200, and the watchdog runs again
        with WebhookServer(statuses=[500], port=port) as hook:
            second = watch_once(config)
            # THEN the pending alert was retried through the 500 and delivered exactly once
            assert second.returncode == 1, second.stderr
            assert [r["status"] for r in hook.requests] == [500, 200]
            assert len(hook.delivered) == 1
    finally:
        web.close()
