"""The watchdog's Prometheus text file after real passes on the real cluster."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.slurm_jobs import cancel, submit_running

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
JOB_NAME = "slurmdiag-metrics-test"


def samples(path: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the file as {(name, labels): value}, through prometheus_client's parser."""
    out = {}
    for family in text_string_to_metric_families(path.read_text()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


@pytest.fixture
def quiet_job(local_cluster, tmp_path):
    job = submit_running("-N1", "--time=10", "-J", JOB_NAME, f"--output={tmp_path}/out",
                         "--wrap", "srun sleep 300")
    yield job
    cancel(job)


def test_a_real_pass_writes_metrics_that_parse_with_the_right_values(quiet_job, tmp_path):
    # GIVEN a quiet job (sleep: no ranks) and a config with a metrics file
    metrics = tmp_path / "textfile" / "slurmdiag_watch.prom"
    config = tmp_path / "config.toml"
    config.write_text(
        f'[watch]\nreport_dir = "{tmp_path / "reports"}"\nmetrics_file = "{metrics}"\n'
        f'stale_after = "0s"\nmin_runtime = "0s"\njob_name_patterns = ["{JOB_NAME}"]\n'
        'confirm_samples = 2\nconfirm_interval = "0.5s"\nattach_timeout = "30s"\n'
    )
    running = subprocess.run(["squeue", "-h", "--states=RUNNING", "-o", "%i"],
                             capture_output=True, text=True, check=True).stdout.split()
    before = time.time()
    # WHEN one real pass runs
    done = subprocess.run([sys.executable, "-m", "slurmdiag", "watch", "--once",
                           "--config", str(config)],
                          capture_output=True, text=True, timeout=240, cwd=REPO, check=False)
    after = time.time()
    assert done.returncode == 0, done.stderr
    # THEN the file parses, and says what the pass saw: the job watched, attached, inconclusive
    values = samples(metrics)
    assert values[("slurmdiag_watch_jobs", (("state", "running"),))] == len(running)
    assert values[("slurmdiag_watch_jobs", (("state", "watched"),))] == 1
    assert values[("slurmdiag_watch_jobs", (("state", "inconclusive"),))] == 1
    assert values[("slurmdiag_watch_jobs", (("state", "stuck"),))] == 0
    assert values[("slurmdiag_watch_pass_exit_code", ())] == 0
    assert 0 < values[("slurmdiag_watch_pass_duration_seconds", ())] < after - before
    success = values[("slurmdiag_watch_last_success_timestamp_seconds", ())]
    assert before <= success <= after
    attach = values[("slurmdiag_watch_attach_seconds", (("job_id", quiet_job),))]
    assert 0 < attach < after - before
    assert values[("slurmdiag_watch_alerts", (("result", "sent"),))] == 0
    assert values[("slurmdiag_watch_alerts", (("result", "pending"),))] == 0
    assert not list(metrics.parent.glob("*.tmp*")), "the atomic write left its temporary file"

    # WHEN the next pass fails (Slurm unreachable: SLURM_CONF names no file)
    env = dict(os.environ, SLURM_CONF=str(tmp_path / "missing.conf"))
    failed = subprocess.run([sys.executable, "-m", "slurmdiag", "watch", "--once",
                             "--config", str(config)],
                            capture_output=True, text=True, timeout=60, cwd=REPO, env=env,
                            check=False)
    # THEN the file still parses: exit code 5, and the last success is the earlier pass
    assert failed.returncode == 5
    values = samples(metrics)
    assert values[("slurmdiag_watch_pass_exit_code", ())] == 5
    assert values[("slurmdiag_watch_last_success_timestamp_seconds", ())] == success
