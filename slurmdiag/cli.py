"""Command line: argparse wiring only. ``main(argv) -> int``.

Exit codes (every command):
    0   success (attach/report: the snapshot or report was produced; watch: nothing stuck)
    1   watch: stuck jobs were found; probe: a bad node, link or MTU was named
    2   usage error (bad arguments, bad job id form)
    3   job not found            4   job not running (pending, suspended, finished)
    5   Slurm unavailable        6   transport failed on every node
    7   configuration error      8   optional dependency missing
    9   unreadable input         10  any other failure of slurmdiag itself
    11  not permitted (another user's job)   12  doctor: a check failed (1: warnings only)
    130 interrupted (Ctrl-C)
watch --check-heartbeat has the monitoring-plugin codes instead: 0 OK, 1 WARNING, 2 CRITICAL,
3 UNKNOWN (a usage error there is 3).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from slurmdiag._version import __version__
from slurmdiag.errors import SlurmdiagError, TransportFailed, UsageError
from slurmdiag.options import DEFAULTS, TRANSPORTS, AttachOptions, SshSettings
from slurmdiag.safeio import one_line


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Epilogs as written (the examples), and every option's default in its help line."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (
            not action.option_strings
            or "default" in text.lower()
            or action.default in (None, False, argparse.SUPPRESS)
        ):
            return text
        return f"{text} (default: %(default)s)"


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of exiting, so main() owns every exit code.

    Every parser of the tree, subcommands too, shows defaults and its examples epilog as written.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["formatter_class"] = _HelpFormatter
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message, hint=f"run '{self.prog} --help'")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _seconds(text: str) -> float:
    """A time option in seconds: ``30``, or with a unit (``30s``, ``2m``, ``1h``).

    A bare number is seconds here, as each option's help says (Slurm would read minutes)."""
    from slurmdiag.config import parse_duration

    try:
        return parse_duration(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of seconds (e.g. 30, 30s or 2m)"
        ) from None


def _file_mode(text: str) -> int:
    try:
        value = int(text, 8)
    except ValueError:
        raise argparse.ArgumentTypeError("an octal mode such as 0640") from None
    if not 0 <= value <= 0o777:
        raise argparse.ArgumentTypeError("an octal mode between 000 and 777")
    return value


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with ``command`` (one of COMMANDS), only that command's parser.

    Each command's arguments are built only when it runs: building every sub-parser imports the
    watchdog, doctor, probe and post-mortem modules, ~0.1 CPU-s that attach would pay before its
    srun starts (bench/README.md). ``slurmdiag --help``, an unknown command and the shell
    completion build them all."""
    parser = _Parser(
        prog="slurmdiag",
        description="Diagnose a hung multi-node PyTorch job on Slurm: which rank, where, why.",
        epilog="Exit codes: 0 ok, 1 stuck jobs found (watch) or a bad node or link (probe), 2 usage, 3 job not found, "
        "4 job not running, 5 Slurm unavailable, 6 transport failed, 7 config, "
        "8 missing extra, 9 unreadable input, 10 internal, 11 not permitted, 12 a doctor check failed "
        "(watch --check-heartbeat: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN).",
    )
    parser.add_argument("--version", action="version", version=f"slurmdiag {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    for name, add in _COMMANDS.items():
        if command is None or command == name:
            add(sub)
    return parser


def _add_attach(sub: Any) -> None:
    attach = sub.add_parser(
        "attach", help="inspect every rank of a running job",
        description="Find the job's ranks on every node through one srun step, sample their "
        "stacks, and name the culprit.",
        epilog=ATTACH_EPILOG,
    )
    attach.add_argument("job_id", help="job id: 123 (a het job: every component), 123_4 (array task) or 123+1 (one het component)")
    attach.add_argument("--samples", type=_positive_int, default=DEFAULTS.samples,
                        help="stack samples per rank")
    attach.add_argument("--interval", type=_seconds, default=DEFAULTS.interval_s,
                        metavar="SECONDS", help="seconds between samples")
    attach.add_argument(
        "--strace", type=_seconds, default=DEFAULTS.strace_s, metavar="SECONDS",
        help="strace -c window per rank after sampling (0: off)",
    )
    attach.add_argument(
        "--timeout", type=_seconds, default=DEFAULTS.timeout_s, metavar="SECONDS",
        help="global deadline in seconds (or 2m)",
    )
    attach.add_argument("--native", action="store_true", help="include native frames (slower)")
    attach.add_argument(
        "--flight-recorder", action="store_true",
        help="ask ranks hooked with slurmdiag.torch.install() for a Flight Recorder dump",
    )
    attach.add_argument("--transport", choices=TRANSPORTS, default=DEFAULTS.transport,
                        help="one srun step into the job, or ssh to each node")
    attach.add_argument("--out", metavar="DIR", help="write snapshot.json and report.html here")
    attach.add_argument("--json", action="store_true", help="print the snapshot JSON on stdout")
    attach.add_argument("--no-report", action="store_true", help="do not write the HTML report")
    attach.add_argument(
        "--file-mode", type=_file_mode, default=0o640, metavar="MODE",
        help="permissions of report.html and snapshot.json (octal, default 0640)",
    )
    attach.add_argument(
        "--node-python", default=DEFAULTS.node_python,
        help="python on the nodes (default: /usr/bin/python3 if 3.8+, else this interpreter if the "
        "node has it, else python3)",
    )
    attach.add_argument(
        "--node-cache", default=DEFAULTS.node_cache, metavar="DIR",
        help="node-local directory under which each node keeps the compiled collector in a "
        "private slurmdiag-UID directory ('' = compile every time)",
    )
    attach.add_argument("--py-spy", dest="pyspy_path", metavar="PATH",
                        help="py-spy path on the nodes")
    attach.add_argument("--nvidia-smi", dest="nvidia_smi_path", metavar="PATH",
                        help="nvidia-smi path on the nodes")
    ssh = attach.add_argument_group("ssh transport")
    ssh.add_argument("--ssh-user", default=DEFAULTS.ssh.user,
                     help="user name (default: current user)")
    ssh.add_argument("--ssh-port", type=int, default=DEFAULTS.ssh.port,
                     help="ssh port of the nodes")
    ssh.add_argument("--ssh-key", help="private key file (default: agent and ~/.ssh keys)")
    ssh.add_argument("--ssh-known-hosts", help="known_hosts file (default: ~/.ssh/known_hosts)")
    ssh.add_argument(
        "--ssh-accept-new", action="store_true", help="accept and remember unknown host keys"
    )


def _add_report(sub: Any) -> None:
    report = sub.add_parser(
        "report", help="re-render the HTML report from a saved snapshot", epilog=REPORT_EPILOG
    )
    report.add_argument("snapshot", help="snapshot.json written by attach")
    report.add_argument("-o", "--output", help="HTML file to write (default: beside the snapshot)")
    report.add_argument(
        "--file-mode", type=_file_mode, default=0o640, metavar="MODE",
        help="permissions of the report (octal, default 0640)",
    )


def _add_postmortem(sub: Any) -> None:
    from slurmdiag.post_mortem.cli import add_parser as add_postmortem_parser

    add_postmortem_parser(sub, _file_mode)


def _add_watch(sub: Any) -> None:
    from slurmdiag.watch.cli_support import add_watch_arguments

    add_watch_arguments(sub)


def _add_config(sub: Any) -> None:
    from slurmdiag.watch.cli_support import add_config_arguments

    add_config_arguments(sub)


def _add_probe(sub: Any) -> None:
    from slurmdiag.probe.cli import add_probe_arguments

    add_probe_arguments(sub)


ATTACH_EPILOG = """\
examples:
  slurmdiag attach 123456                   summary here; report + snapshot in ./slurmdiag-123456-*/
  slurmdiag attach 123_4 --json --out /tmp/d   an array task; the snapshot JSON on stdout"""

REPORT_EPILOG = """\
examples:
  slurmdiag report /tmp/d/snapshot.json              writes /tmp/d/report.html
  slurmdiag report snapshot.json -o ~/public/r.html --file-mode 0644"""


def _add_completion(sub: Any) -> None:
    from slurmdiag.completion import add_completion_arguments

    add_completion_arguments(sub)


def _add_doctor(sub: Any) -> None:
    from slurmdiag.doctor import add_doctor_arguments

    add_doctor_arguments(sub)


#: Every command, in the order ``slurmdiag --help`` lists them, with what builds its parser.
_COMMANDS: dict[str, Callable[[Any], None]] = {
    "attach": _add_attach,
    "report": _add_report,
    "postmortem": _add_postmortem,
    "watch": _add_watch,
    "config": _add_config,
    "doctor": _add_doctor,
    "completion": _add_completion,
    "probe": _add_probe,
}


def _live_progress(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """The live line on stderr: only on a terminal, and never with --json."""
    if args.json or not sys.stderr.isatty():
        return None
    from slurmdiag.report.progress import LiveProgress

    return LiveProgress(sys.stderr, args.timeout)


def attach_options(args: argparse.Namespace) -> AttachOptions:
    """The attach flags as the one options object (bad values: UsageError)."""
    return AttachOptions(
        samples=args.samples,
        interval_s=args.interval,
        strace_s=args.strace,
        timeout_s=args.timeout,
        native=args.native,
        flight_recorder=args.flight_recorder,
        pyspy_paths=(args.pyspy_path,) if args.pyspy_path else (),
        nvidia_smi_paths=(args.nvidia_smi_path,) if args.nvidia_smi_path else (),
        node_python=args.node_python,
        node_cache=args.node_cache,
        transport=args.transport,
        ssh=SshSettings(
            user=args.ssh_user,
            port=args.ssh_port,
            key_filename=args.ssh_key,
            known_hosts=args.ssh_known_hosts,
            accept_new=args.ssh_accept_new,
        ),
    )


def _run_attach(args: argparse.Namespace) -> int:
    options = attach_options(args)
    live = _live_progress(args)
    if live is not None:
        live.start()
    def show_verdict(snapshot: Any, analysis: Any) -> None:
        """The summary as soon as the verdict is known; the report's path follows once written."""
        if live is not None:
            live.close()
        from slurmdiag.report.terminal import format_summary, should_color

        lines = format_summary(snapshot, analysis, color=should_color(sys.stdout, os.environ),
                               report_path=None)
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()

    try:
        from slurmdiag.api import attach_job

        result = attach_job(
            args.job_id,
            options,
            out_dir=args.out,
            report=not args.no_report,
            file_mode=args.file_mode,
            progress=live.nodes if live is not None else None,
            on_phase=live.phase if live is not None else None,
            on_verdict=None if args.json else show_verdict,
        )
    finally:
        if live is not None:
            live.close()
    return _show_attach(args, result)


def _show_attach(args: argparse.Namespace, result: Any) -> int:
    """What follows the summary (printed by show_verdict once the verdict was known): the
    snapshot with --json, else where the report went; then warnings, errors, the exit code."""
    from slurmdiag.report.terminal import report_lines, should_color  # loaded during attach

    for warning in result.warnings:
        print(f"warning: {one_line(warning)}", file=sys.stderr)
    snapshot = result.snapshot
    if args.json:
        sys.stdout.write(snapshot.to_json(indent=1) + "\n")
    elif snapshot.report:
        color = should_color(sys.stdout, os.environ)
        sys.stdout.write("\n".join(report_lines(snapshot.report, color=color)) + "\n")
    if result.write_error is not None:
        # Nothing collected is lost: the snapshot is on stdout (--json), kept elsewhere, or
        # printed now.
        failure = result.write_error
        if failure.kept is None and not args.json:
            sys.stdout.write(snapshot.to_json(indent=1) + "\n")
            print("the snapshot was written to stdout instead", file=sys.stderr)
        print(f"error: {one_line(failure.message)}", file=sys.stderr)
        print(f"hint: {failure.hint}", file=sys.stderr)
        return failure.exit_code
    if result.out_dir is not None:
        print(f"snapshot: {result.out_dir / 'snapshot.json'}", file=sys.stderr)
        if snapshot.report:
            print(f"report:   {snapshot.report}", file=sys.stderr)
    if snapshot.options.get("interrupted"):
        print("error: interrupted; what the nodes sent until then was kept", file=sys.stderr)
        print("hint: attach again for a complete snapshot", file=sys.stderr)
        return 130
    if snapshot.nodes and all(node.status != "ok" for node in snapshot.nodes):
        # Written and shown above (each node's reason is data), yet nothing was collected.
        first = snapshot.nodes[0]
        print(f"error: no node answered ({one_line(f'{first.name}: {first.message}')})",
              file=sys.stderr)
        hint = TransportFailed("").hint
        if args.transport == "ssh":
            hint = "check ssh access to the nodes (keys, known_hosts, --ssh-user/--ssh-port)"
        print(f"hint: {hint}", file=sys.stderr)
        return TransportFailed.exit_code
    return 0


def _run_report(args: argparse.Namespace) -> int:
    from slurmdiag.errors import ParseError
    from slurmdiag.report.render import write_snapshot_report
    from slurmdiag.snapshot import Snapshot

    source = Path(args.snapshot)
    # Exit 9 (unreadable input) for a missing file too, as for one that is not a snapshot.
    hint = "give the snapshot.json that 'slurmdiag attach' wrote (or its --json output)"
    try:
        text = source.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or "not UTF-8 text"
        raise ParseError(f"cannot read {source}: {reason}", hint=hint) from None
    try:
        snapshot = Snapshot.from_json(text)
    except ParseError as exc:
        # Input that is not a snapshot is the user's to fix, not a bug to report.
        better = hint if exc.hint == ParseError.default_hint else exc.hint
        raise ParseError(f"{source}: {exc.message}", hint=better) from None
    output = Path(args.output) if args.output else source.with_name("report.html")
    try:
        written = write_snapshot_report(snapshot, output, mode=args.file_mode)
    except OSError as exc:
        raise SlurmdiagError(f"cannot write {output}: {exc.strerror}",
                             hint="choose another file with -o") from None
    print(f"report: {written}", file=sys.stderr)
    return 0


def _run_attach_interruptible(args: argparse.Namespace) -> int:
    """SIGTERM (a scheduler, a service manager) ends attach like Ctrl-C: the srun step is
    ended, what the nodes sent is written, no collector or step is left behind."""
    if threading.current_thread() is not threading.main_thread():
        return _run_attach(args)
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        return _run_attach(args)
    finally:
        signal.signal(signal.SIGTERM, previous)


HEARTBEAT_UNKNOWN = 3  # watch --check-heartbeat: the monitoring-plugin code for "cannot tell"


def _is_heartbeat_check(argv: Sequence[str]) -> bool:
    return any(a == "--check-heartbeat" or a.startswith("--check-heartbeat=") for a in argv)


def _exit_now(code: int) -> NoReturn:
    """End the program at once, its output flushed: the interpreter's own teardown (every loaded
    module's, ~16 ms of CPU after attach) does nothing a finished attach needs."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """The program (``argv`` None: sys.argv; an attach then ends the process itself) or, with
    ``argv``, a call that returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    code = _main(args)
    if argv is None and args[:1] == ["attach"]:
        _exit_now(code)
    return code


def _main(argv: list[str]) -> int:
    # the command is the first argument (the only option before it is --version/--help)
    parser = build_parser(argv[0] if argv and argv[0] in _COMMANDS else None)
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help(sys.stderr)
            return 2
        if args.command == "attach":
            return _run_attach_interruptible(args)
        if args.command == "report":
            return _run_report(args)
        return int(args.handler(args))
    except SlurmdiagError as exc:
        print(f"error: {one_line(exc.message)}", file=sys.stderr)
        if exc.hint:
            print(f"hint: {one_line(exc.hint)}", file=sys.stderr)
        if isinstance(exc, UsageError) and _is_heartbeat_check(argv):
            return HEARTBEAT_UNKNOWN  # a monitoring plugin's bad command line is UNKNOWN, not 2
        return exc.exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the last line of defence: no traceback for users
        print(f"error: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        if os.environ.get("SLURMDIAG_DEBUG"):
            traceback.print_exc()
        print("hint: rerun with SLURMDIAG_DEBUG=1 and report the traceback", file=sys.stderr)
        return 10


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
