"""The command line: exit codes and one-line errors, never a traceback (no cluster needed)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from slurmdiag import __version__
from slurmdiag.cli import main
from slurmdiag.slurm.discover import NO_CONFIG_HINT

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
    (["attach", "12.batch"], 2, "step batch of job 12"),
    (["attach", "123.0"], 2, "slurmdiag attach 123"),
    (["attach", "1", "--timeout", "abc"], 2, "'abc' is not a number of seconds"),
    (["attach"], 2, "job_id"),
    (["nonsense"], 2, "invalid choice"),
    (["attach", "1", "--samples", "0"], 2, "at least 1"),
    (["report", "/nonexistent/snapshot.json"], 9, "cannot read"),
])
def test_usage_errors_exit_2_with_a_hint(args, code, words, capsys):
    assert main(args) == code
    err = capsys.readouterr().err
    assert err.startswith("error: ") and words in err and "hint: " in err
    assert "Traceback" not in err and "_seconds" not in err
    assert len(err.splitlines()) == 2


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
    assert "please report" not in result.stderr and "slurmdiag attach" in result.stderr
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


def test_time_options_take_units_and_bare_seconds():
    from slurmdiag.cli import build_parser

    args = build_parser().parse_args(["attach", "1", "--timeout", "2m", "--interval", "0.5"])
    assert (args.timeout, args.interval) == (120.0, 0.5)


@pytest.mark.parametrize("argv", [["--check-heartbeat"], ["--check-heartbeat", "20m", "--bogus"]])
def test_heartbeat_check_bad_command_line_is_unknown_not_critical(argv, capsys):
    # GIVEN a monitoring system calling the dead-man switch with a broken command line
    # THEN exit 3 (UNKNOWN), never 2, which means CRITICAL to it
    assert main(["watch", *argv]) == 3


needs_slurm_client = pytest.mark.skipif(
    not shutil.which("scontrol") or Path("/etc/slurm/slurm.conf").exists(),
    reason="needs the Slurm client tools on a host without a system slurm.conf",
)


@needs_slurm_client
def test_no_slurm_config_attach_is_one_error_line_from_the_real_scontrol(tmp_path):
    # GIVEN the real scontrol without SLURM_CONF (this host has no Slurm DNS records)
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    result = run("attach", "123", env=env)
    # THEN exit 5 and exactly: the fatal line, then the hint
    assert result.returncode == 5
    assert result.stderr.splitlines() == [
        "error: scontrol: Could not establish a configuration source",
        "hint: " + NO_CONFIG_HINT,
    ]


@needs_slurm_client
def test_no_slurm_watch_once_prints_the_error_once(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    env["SLURMDIAG_CONFIG"] = str(tmp_path / "none.toml")
    (tmp_path / "none.toml").write_text(f'[watch]\nreport_dir = "{tmp_path}"\n')
    result = run("watch", "--once", env=env)
    assert result.returncode == 5
    assert result.stderr.count("Could not establish a configuration source") == 1, result.stderr


def test_slurm_conf_naming_no_file_exits_5_at_once(tmp_path):
    env = dict(os.environ, SLURM_CONF=str(tmp_path / "nope.conf"))
    result = run("attach", "123", env=env)
    assert result.returncode == 5 and "is not a file" in result.stderr
    assert result.stderr.count("\n") == 2


def _all_parsers(parser, path=()):
    import argparse

    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _all_parsers(sub, (*path, name))


def test_every_command_help_shows_defaults_and_two_examples():
    from slurmdiag.cli import build_parser

    commands = [(p, sub) for p, sub in _all_parsers(build_parser()) if p]
    assert {("attach",), ("report",), ("watch",), ("config", "check"), ("doctor",),
            ("completion",), ("probe",), ("postmortem",)} <= {p for p, _ in commands}
    for path, sub in commands:
        text = sub.format_help()
        examples = text.split("examples:\n", 1)
        assert len(examples) == 2, f"{' '.join(path)} has no examples"
        shown = [ln for ln in examples[1].splitlines() if ln.startswith("  slurmdiag ")]
        assert len(shown) >= 2, f"{' '.join(path)}: {shown}"
    attach = dict(commands)[("attach",)].format_help()
    assert "(default: 3)" in attach and "(default: srun)" in attach and "(default: 30.0)" in attach


def test_python_dash_m_slurmdiag_is_the_cli():
    done = subprocess.run([sys.executable, "-m", "slurmdiag", "--version"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.strip() == f"slurmdiag {__version__}"


@needs_slurm_client
def test_doctor_without_slurm_config_says_so_and_skips_the_nodes(tmp_path):
    # GIVEN the real Slurm client without SLURM_CONF (no DNS records here)
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    env["SLURMDIAG_CONFIG"] = str(tmp_path / "c.toml")
    (tmp_path / "c.toml").write_text(f'[watch]\nreport_dir = "{tmp_path}"\nstale_after = 600\n')
    result = subprocess.run([sys.executable, "-m", "slurmdiag", "doctor", "123", "--json"],
                            capture_output=True, text=True, timeout=60, env=env, check=False)
    # THEN exit 12 (a check failed); the JSON names the config failure, the fix, the bare number
    assert result.returncode == 12, result.stderr
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["slurm config"]["status"] == "failed"
    assert "Could not establish a configuration source" in checks["slurm config"]["detail"]
    assert "SLURM_CONF" in checks["slurm config"]["fix"]
    assert checks["nodes"]["status"] == "failed"
    assert checks["watch config"]["status"] == "warning" and "taken as" in checks[
        "watch config"]["detail"]
    assert checks["report dir"]["status"] == "ok"


def test_a_command_builds_only_its_own_parser_and_reads_its_arguments_the_same():
    # GIVEN a fresh interpreter that builds the parser `slurmdiag attach ...` needs
    probe = (
        "import json, sys\n"
        "from slurmdiag.cli import build_parser\n"
        "args = build_parser('attach').parse_args(['attach', '7', '--samples', '2'])\n"
        "print(json.dumps([vars(args)['samples'],"
        " sorted(m for m in sys.modules if m.startswith('slurmdiag'))]))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    samples, loaded = json.loads(out.stdout)
    # THEN none of the other commands' modules were imported before srun can start
    others = {"slurmdiag.watch.cli_support", "slurmdiag.doctor", "slurmdiag.probe.cli",
              "slurmdiag.post_mortem.cli", "slurmdiag.completion"}
    assert samples == 2 and set(loaded) & others == set()
    # AND the one-command parser reads attach's arguments exactly as the whole parser does
    from slurmdiag.cli import _COMMANDS, build_parser

    argv = ["attach", "1", "--timeout", "2m", "--strace", "0", "--transport", "ssh"]
    assert vars(build_parser("attach").parse_args(argv)) == vars(build_parser().parse_args(argv))
    # AND the whole parser (--help, completion) still lists every command
    whole = build_parser()
    listed = next(a for a in whole._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert set(listed) == set(_COMMANDS)


def test_the_attach_program_ends_without_the_interpreters_teardown() -> None:
    # GIVEN the program (main() with no argv, as the console script calls it) and an exit
    # handler that would print during the interpreter's teardown
    program = ("import atexit, sys; atexit.register(lambda: print('TEARDOWN', flush=True)); "
               "sys.argv = ['slurmdiag', *sys.argv[1:]]; from slurmdiag.cli import main; "
               "sys.exit(main())")
    attach = subprocess.run([sys.executable, "-c", program, "attach", "12x"],
                            check=False, capture_output=True, text=True, timeout=60)
    # THEN attach ends at once (no teardown) with its code and its output flushed
    assert attach.returncode == 2, attach.stderr
    assert attach.stderr.startswith("error: ") and "hint: " in attach.stderr
    assert "TEARDOWN" not in attach.stdout
    # AND every other command ends as programs do; a call with argv returns its code
    version = subprocess.run([sys.executable, "-c", program, "--version"],
                             check=False, capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and "TEARDOWN" in version.stdout
    called = subprocess.run([sys.executable, "-c", (
        "import atexit; atexit.register(lambda: print('TEARDOWN', flush=True)); "
        "from slurmdiag.cli import main; print('code', main(['attach', '12x']))")],
        check=False, capture_output=True, text=True, timeout=60)
    assert "code 2" in called.stdout and "TEARDOWN" in called.stdout
