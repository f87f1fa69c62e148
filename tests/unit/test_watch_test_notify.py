"""`slurmdiag watch --test-notify`: a marked test post through the configured webhook (real HTTP)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.webhook import SECRET_PATH, WebhookServer, closed_port_url


def run_cli(config: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURMDIAG_")}
    env["SLURMDIAG_CONFIG"] = str(config)
    return subprocess.run([sys.executable, "-m", "slurmdiag", "watch", "--test-notify"],
                          capture_output=True, text=True, timeout=60, env=env, check=False)


def write_config(tmp_path: Path, kind: str, url: str) -> Path:
    config = tmp_path / "config.toml"
    config.write_text(
        f'[watch]\nreport_dir = "{tmp_path}"\ncluster_name = "sd-test"\n'
        f'[notify]\nkind = "{kind}"\nwebhook_url = "{url}"\nmax_time = "5s"\ntimeout = "2s"\nretries = 1\n'
    )
    return config


@pytest.mark.parametrize("kind", ["slack", "mattermost", "teams", "webhook"])
def test_test_notify_posts_one_marked_message_per_kind(tmp_path: Path, kind: str) -> None:
    # GIVEN a real webhook receiver and a config of this chat kind
    with WebhookServer() as server:
        result = run_cli(write_config(tmp_path, kind, server.url))
    # THEN exactly one post, to the secret path, clearly marked as a test; exit 0
    assert result.returncode == 0, result.stderr
    assert [r["path"] for r in server.requests] == [SECRET_PATH]
    body = json.dumps(server.delivered[0])
    assert "TEST MESSAGE" in body and "No job is stuck" in body
    assert f"test message delivered to the {kind} webhook" in result.stderr
    assert "SECRET" not in result.stderr + result.stdout


def test_test_notify_failure_is_exit_6_without_the_url(tmp_path: Path) -> None:
    result = run_cli(write_config(tmp_path, "slack", closed_port_url()))
    assert result.returncode == 6
    assert result.stderr.startswith("error: the test message was not delivered")
    assert "SECRET" not in result.stderr


def test_test_notify_without_a_webhook_is_a_config_error(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f'[watch]\nreport_dir = "{tmp_path}"\n')
    result = run_cli(config)
    assert result.returncode == 7 and "no webhook is configured" in result.stderr
