"""Subcommands ``slurmdiag watch`` and ``slurmdiag config``, hooked into cli.py's parser.

People read stderr (progress, problems, summaries); stdout carries data only (``--json``).
Errors are raised as SlurmdiagError and printed by ``cli.main`` with their exit code.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from slurmdiag.config import (
    ConfigProblem,
    bare_number,
    bare_number_note,
    check_config,
    find_config_path,
    load_settings,
    parse_duration,
)
from slurmdiag.errors import ConfigError, SlurmdiagError, UsageError
from slurmdiag.safeio import one_line
from slurmdiag.vocabulary import VerdictKind

WATCH_EPILOG = """\
examples:
  slurmdiag watch --once --config /etc/slurmdiag/config.toml    one pass (cron, scrontab, timer)
  slurmdiag watch --check-heartbeat 20m                          dead-man switch for monitoring

exit codes: 0 nothing stuck (or another run holds the lock), 1 stuck jobs found,
>= 2 the watchdog failed (5 Slurm unavailable, 7 configuration, 10 internal).
--check-heartbeat (monitoring-plugin convention, one status line on stdout):
0 OK fresh, 1 WARNING fresh but the last pass had errors or undelivered alerts,
2 CRITICAL stale or missing, 3 UNKNOWN unreadable heartbeat or a bad command line/config.
Schedule it with cron, scrontab or a systemd timer: see deploy/ and docs/watch.md."""


def add_watch_arguments(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``watch`` to the CLI's subparsers; ``args.handler`` runs it."""
    watch = subparsers.add_parser(
        "watch",
        help="find stuck jobs and notify the team chat (one pass, for cron/scrontab)",
        description="One pass of the stuck-job watchdog: list running jobs, find the stuck\n"
        "ones, write their reports, post alerts, write the heartbeat file.",
        epilog=WATCH_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    watch.add_argument("--once", action="store_true", help="run one pass and exit")
    watch.add_argument(
        "--config",
        metavar="FILE",
        help="TOML config (default: $SLURMDIAG_CONFIG, else /etc/slurmdiag/config.toml)",
    )
    watch.add_argument(
        "--check-heartbeat",
        metavar="MAXAGE",
        help="dead-man switch: exit 0 if the last good run is younger than MAXAGE",
    )
    watch.add_argument("--report-dir", metavar="DIR", help="overrides watch.report_dir")
    watch.add_argument("--state-db", metavar="FILE", help="overrides watch.state_db")
    watch.add_argument("--stale-after", metavar="DURATION", help="overrides watch.stale_after")
    watch.add_argument("--min-runtime", metavar="DURATION", help="overrides watch.min_runtime")
    watch.add_argument(
        "--no-notify", action="store_true", help="find and write reports, but post nothing"
    )
    watch.add_argument("--json", action="store_true", help="print the run's result as JSON")
    watch.add_argument(
        "--test-notify",
        action="store_true",
        help="post a clearly marked TEST alert through the configured webhook and exit "
        "(0 delivered, 6 not delivered, 7 no webhook configured)",
    )
    watch.set_defaults(handler=run_watch_command)
    return watch


def add_config_arguments(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``config check [FILE]`` and ``config show`` to the CLI's subparsers."""
    config = subparsers.add_parser(
        "config", help="check or show the watchdog configuration",
        epilog="examples:\n  slurmdiag config check /etc/slurmdiag/config.toml\n"
        "  slurmdiag config show --config /etc/slurmdiag/config.toml",
    )
    actions = config.add_subparsers(dest="config_command", metavar="{check,show}")
    check = actions.add_parser(
        "check", help="list every unknown key and bad value of a config file (exit 7 if any)",
        epilog="examples:\n  slurmdiag config check /etc/slurmdiag/config.toml\n"
        "  slurmdiag config check --json site.toml",
    )
    check.add_argument("file", nargs="?", metavar="FILE", help="the TOML file to check")
    check.add_argument("--json", action="store_true", help="print the problems as JSON")
    show = actions.add_parser(
        "show", help="print the effective settings as JSON (secrets hidden)",
        epilog="examples:\n  slurmdiag config show\n"
        "  slurmdiag config show --config /etc/slurmdiag/config.toml",
    )
    show.add_argument("--config", metavar="FILE", help="TOML config to read")
    config.set_defaults(handler=run_config_command)
    return config


def _err(line: str) -> None:
    print(one_line(line), file=sys.stderr)  # job names and paths: no control characters


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "watch.report_dir": getattr(args, "report_dir", None),
        "watch.state_db": getattr(args, "state_db", None),
        "watch.stale_after": getattr(args, "stale_after", None),
        "watch.min_runtime": getattr(args, "min_runtime", None),
    }


def run_watch_command(args: argparse.Namespace) -> int:
    """``slurmdiag watch --once`` / ``--check-heartbeat MAXAGE``; returns the exit code."""
    from slurmdiag.watch.watchdog import Watchdog

    if args.check_heartbeat is not None:
        return _check_heartbeat(args)
    settings = load_settings(args.config, overrides=_overrides(args))
    for warning in settings.warnings:
        _err(f"warning: {warning}")
    if args.test_notify:
        return _test_notify(settings)
    if not args.once:
        raise UsageError(
            "watch runs one pass per call: add --once",
            hint="schedule 'slurmdiag watch --once' with cron, scrontab or a systemd timer "
            "(deploy/ has recipes)",
        )
    if args.no_notify:
        settings = dataclasses.replace(
            settings, notify=dataclasses.replace(settings.notify, kind=None)
        )
    result = Watchdog(settings).run_once()
    for line in result.summary_lines():
        _err(line)
    if args.json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=1) + "\n")
    return result.exit_code


TEST_JOB_NAME = "TEST MESSAGE from slurmdiag watch --test-notify"


def test_alert(cluster: str | None) -> Any:
    """An alert laid out as a real stuck-job alert, marked as a test in its name and verdict."""
    from slurmdiag.snapshot import Verdict
    from slurmdiag.watch.notify import Alert

    return Alert(
        event="stuck",
        job_id="TEST",
        job_name=TEST_JOB_NAME,
        user=None,
        cluster=cluster,
        verdicts=(
            Verdict(
                kind=VerdictKind.TEST_MESSAGE,
                severity="info",
                summary="TEST: this is how a stuck-job alert will look in this channel. "
                "No job is stuck; nothing needs doing.",
            ),
        ),
        reason="test",
    )


def _test_notify(settings: Any) -> int:
    """``watch --test-notify``: one post through the configured webhook, its outcome on stderr."""
    from slurmdiag.errors import TransportFailed
    from slurmdiag.watch.notify import notify

    if not settings.notify.enabled:
        raise ConfigError(
            "no webhook is configured: nothing to test",
            hint="set notify.kind and notify.webhook_url (or webhook_url_env) in the config",
        )
    result = notify(test_alert(settings.watch.cluster_name), settings.notify)
    if result.ok:
        _err(f"watch: test message delivered to the {settings.notify.kind} webhook "
             f"(HTTP {result.status}, {result.attempts} attempt(s))")
        return 0
    raise TransportFailed(
        f"the test message was not delivered to the {settings.notify.kind} webhook: {result.error}",
        hint="check notify.webhook_url and that this host reaches it (proxy, firewall)",
    )


def _check_heartbeat(args: argparse.Namespace) -> int:
    """The dead-man switch as a monitoring plugin: one status line on stdout, exit 0/1/2/3.

    Every problem of the check itself (a bad MAXAGE, an invalid config) is UNKNOWN (3), never
    CRITICAL (2), so a typo does not page anyone as a dead watchdog would."""
    from slurmdiag.watch.watchdog import HEARTBEAT_LABELS, HEARTBEAT_UNKNOWN, heartbeat_status

    try:
        max_age = parse_duration(args.check_heartbeat)
        settings = load_settings(args.config, overrides=_overrides(args))
    except ValueError as exc:
        code, message = HEARTBEAT_UNKNOWN, f"--check-heartbeat: {exc}"
    except SlurmdiagError as exc:
        code, message = HEARTBEAT_UNKNOWN, " ".join(exc.message.split())
    else:
        if bare_number(args.check_heartbeat):
            _err(f"warning: --check-heartbeat {bare_number_note(args.check_heartbeat)}")
        code, message = heartbeat_status(settings.watch.heartbeat_file, max_age)
    print(f"SLURMDIAG WATCH {HEARTBEAT_LABELS[code]} - {message}")
    return code


def run_config_command(args: argparse.Namespace) -> int:
    """``slurmdiag config check [FILE]`` and ``slurmdiag config show``."""
    if args.config_command == "check":
        return _config_check(args)
    if args.config_command == "show":
        settings = load_settings(args.config)
        sys.stdout.write(json.dumps(settings.to_dict(), indent=1) + "\n")
        return 0
    raise UsageError("say what to do: 'slurmdiag config check FILE' or 'slurmdiag config show'")


def format_problems(problems: list[ConfigProblem], source: str) -> list[str]:
    return [f"{source}: {p.severity}: {p}" for p in problems]


def _config_check(args: argparse.Namespace) -> int:
    path = find_config_path(args.file)
    source = str(path) if path else "(built-in defaults)"
    problems = check_config(args.file)
    if args.json:
        data = [dataclasses.asdict(p) for p in problems]
        sys.stdout.write(json.dumps({"file": source, "problems": data}, indent=1) + "\n")
    for line in format_problems(problems, source):
        _err(line)
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        _err(f"{source}: {len(errors)} error(s), {len(problems) - len(errors)} warning(s)")
        return ConfigError.exit_code
    if path is None:
        _err(
            "no config file given or found ($SLURMDIAG_CONFIG, /etc/slurmdiag/config.toml); "
            "the built-in defaults are valid"
        )
    else:
        _err(f"{source}: OK" + (f" ({len(problems)} warning(s))" if problems else ""))
    return 0
