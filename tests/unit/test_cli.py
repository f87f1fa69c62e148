"""The command line: exit codes and one-line errors, never a traceback (no cluster needed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurmdiag import __version__
from slurmdiag.cli import main

FIXTURE = Path(__file__).parent.parent / "fixtures" / "snapshots" / "synthetic_rank_gated.json"


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slurmdiag.cli", *args], capture_output=True,
                          text=True, timeout=60, env=env, check=False)


def test_version_and_help():
    assert run("--version").stdout.strip() == f"slurmdiag {__version__}"
    helped = run("--help")
    assert helped.returncode == 0
    for command in ("attach", "report", "watch", "config"):
        assert command in helped.stdout


@pytest.mark.parametrize("args, code, words", [
    (["attach", "12.batch"], 2, "invalid job id"),
    (["attach"], 2, "job_id"),
    (["nonsense"], 2, "invalid choice"),
    (["attach", "1", "--samples", "0"], 2, "at least 1"),
    (["report", "/nonexistent/snapshot.json"], 2, "cannot read"),
])
def test_usage_errors_exit_2_with_a_hint(args, code, words, capsys):
    assert main(args) == code
    err = capsys.readouterr().err
    assert err.startswith("error: ") and words in err and "hint: " in err
    assert "Traceback" not in err


def test_report_rerenders_a_saved_snapshot(tmp_path):
    # GIVEN a saved snapshot WHEN `slurmdiag report` re-renders it
    out = tmp_path / "r.html"
    result = run("report", str(FIXTURE), "-o", str(out))
    # THEN the report is written, mode 0640, and its path printed
    assert result.returncode == 0, result.stderr
    assert out.read_text().lstrip().lower().startswith("<!doctype html>")
    assert out.stat().st_mode & 0o777 == 0o640
    assert str(out) in result.stderr


def test_report_file_mode_is_configurable(tmp_path):
    out = tmp_path / "r.html"
    assert run("report", str(FIXTURE), "-o", str(out), "--file-mode", "0604").returncode == 0
    assert out.stat().st_mode & 0o777 == 0o604
    bad = run("report", str(FIXTURE), "--file-mode", "rw-r")
    assert bad.returncode == 2 and "octal" in bad.stderr


def test_unreadable_snapshot_exits_9(tmp_path):
    bad = tmp_path / "s.json"
    bad.write_text('{"schema": 1, "nodes": []}')
    result = run("report", str(bad))
    assert result.returncode == 9
    assert result.stderr.startswith(f"error: {bad}: not a slurmdiag snapshot")
    newer = tmp_path / "n.json"
    newer.write_text('{"schema": 99, "job": {"id": "1", "state": "RUNNING"}}')
    result = run("report", str(newer))
    assert result.returncode == 9 and "upgrade slurmdiag" in result.stderr


def test_without_slurm_tools_attach_exits_5(tmp_path):
    # GIVEN a PATH with no scontrol
    env = dict(os.environ, PATH=str(tmp_path))
    result = run("attach", "123", env=env)
    assert result.returncode == 5
    assert "scontrol" in result.stderr and "hint:" in result.stderr
