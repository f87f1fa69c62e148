"""Command line: argparse wiring only. ``main(argv) -> int``.

Exit codes (every command):
    0   success (attach/report: the snapshot or report was produced; watch: nothing stuck)
    1   watch only: stuck jobs were found
    2   usage error (bad arguments, bad job id form)
    3   job not found            4   job not running (pending, suspended, finished)
    5   Slurm unavailable        6   transport failed on every node
    7   configuration error      8   optional dependency missing
    9   unreadable input         10  any other failure of slurmdiag itself
    130 interrupted (Ctrl-C)
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import traceback
from collections.abc import Sequence
from pathlib import Path

from slurmdiag._version import __version__
from slurmdiag.errors import SlurmdiagError, TransportFailed, UsageError
from slurmdiag.safeio import one_line


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of exiting, so main() owns every exit code."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message, hint=f"run '{self.prog} --help'")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return value


def _file_mode(text: str) -> int:
    try:
        value = int(text, 8)
    except ValueError:
        raise argparse.ArgumentTypeError("an octal mode such as 0640") from None
    if not 0 <= value <= 0o777:
        raise argparse.ArgumentTypeError("an octal mode between 000 and 777")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="slurmdiag",
        description="Diagnose a hung multi-node PyTorch job on Slurm: which rank, where, why.",
        epilog="Exit codes: 0 ok, 1 stuck jobs found (watch), 2 usage, 3 job not found, "
        "4 job not running, 5 Slurm unavailable, 6 transport failed, 7 config, "
        "8 missing extra, 9 unreadable input, 10 internal.",
    )
    parser.add_argument("--version", action="version", version=f"slurmdiag {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    attach = sub.add_parser("attach", help="inspect every rank of a running job")
    attach.add_argument("job_id", help="job id: 123, 123_4 (array task) or 123+1 (het component)")
    attach.add_argument("--samples", type=_positive_int, default=3, help="stack samples per rank")
    attach.add_argument("--interval", type=_seconds, default=1.0, help="seconds between samples")
    attach.add_argument(
        "--strace", type=_seconds, default=2.0, metavar="SECONDS",
        help="strace -c window per rank after sampling (0: off)",
    )
    attach.add_argument(
        "--timeout", type=_seconds, default=30.0, help="global deadline in seconds (default 30)"
    )
    attach.add_argument("--native", action="store_true", help="include native frames (slower)")
    attach.add_argument(
        "--flight-recorder", action="store_true",
        help="ask ranks hooked with slurmdiag.torch.install() for a Flight Recorder dump",
    )
    attach.add_argument("--transport", choices=("srun", "ssh"), default="srun")
    attach.add_argument("--out", metavar="DIR", help="write snapshot.json and report.html here")
    attach.add_argument("--json", action="store_true", help="print the snapshot JSON on stdout")
    attach.add_argument("--no-report", action="store_true", help="do not write the HTML report")
    attach.add_argument(
        "--file-mode", type=_file_mode, default=0o640, metavar="MODE",
        help="permissions of report.html and snapshot.json (octal, default 0640)",
    )
    attach.add_argument(
        "--node-python", default=None,
        help="python on the nodes (default: /usr/bin/python3 if 3.8+, else this interpreter if the "
        "node has it, else python3)",
    )
    attach.add_argument(
        "--node-cache", default=None, metavar="DIR",
        help="node-local directory under which each node keeps the compiled collector in a "
        "private slurmdiag-UID directory (default /dev/shm; '' = compile every time)",
    )
    attach.add_argument("--py-spy", dest="pyspy_path", help="py-spy path on the nodes")
    attach.add_argument("--nvidia-smi", dest="nvidia_smi_path", help="nvidia-smi path on the nodes")
    ssh = attach.add_argument_group("ssh transport")
    ssh.add_argument("--ssh-user", help="user name (default: current user)")
    ssh.add_argument("--ssh-port", type=int, default=22)
    ssh.add_argument("--ssh-key", help="private key file (default: agent and ~/.ssh keys)")
    ssh.add_argument("--ssh-known-hosts", help="known_hosts file (default: ~/.ssh/known_hosts)")
    ssh.add_argument(
        "--ssh-accept-new", action="store_true", help="accept and remember unknown host keys"
    )

    report = sub.add_parser("report", help="re-render the HTML report from a saved snapshot")
    report.add_argument("snapshot", help="snapshot.json written by attach")
    report.add_argument("-o", "--output", help="HTML file to write (default: beside the snapshot)")
    report.add_argument(
        "--file-mode", type=_file_mode, default=0o640, metavar="MODE",
        help="permissions of the report (octal, default 0640)",
    )

    try:
        from slurmdiag.watch.cli_support import add_config_arguments, add_watch_arguments
    except ImportError:  # pragma: no cover - the watch package is part of every install
        pass
    else:
        add_watch_arguments(sub)
        add_config_arguments(sub)
    return parser


def _progress_printer():
    if not sys.stderr.isatty():
        return None

    def show(done: int, total: int) -> None:
        sys.stderr.write(f"\rnodes answered: {done}/{total}")
        sys.stderr.flush()
        if done == total:
            sys.stderr.write("\n")

    return show


def _run_attach(args: argparse.Namespace) -> int:
    from slurmdiag.api import attach_job

    ssh_options = None
    if args.transport == "ssh":
        ssh_options = {
            "user": args.ssh_user,
            "port": args.ssh_port,
            "key_filename": args.ssh_key,
            "known_hosts": args.ssh_known_hosts,
            "accept_new": args.ssh_accept_new,
        }
    result = attach_job(
        args.job_id,
        out_dir=args.out,
        report=not args.no_report,
        file_mode=args.file_mode,
        samples=args.samples,
        interval=args.interval,
        strace_s=args.strace,
        timeout_s=args.timeout,
        native=args.native,
        transport=args.transport,
        node_python=args.node_python,
        node_cache=args.node_cache,
        pyspy_path=args.pyspy_path,
        nvidia_smi_path=args.nvidia_smi_path,
        flight_recorder=args.flight_recorder,
        ssh_options=ssh_options,
        progress=_progress_printer(),
    )
    from slurmdiag.report.terminal import format_summary, should_color  # loaded during attach

    for warning in result.warnings:
        print(f"warning: {one_line(warning)}", file=sys.stderr)
    snapshot = result.snapshot
    if args.json:
        sys.stdout.write(snapshot.to_json(indent=1) + "\n")
    else:
        lines = format_summary(
            snapshot,
            result.analysis,
            color=should_color(sys.stdout, os.environ),
            report_path=snapshot.report,
        )
        sys.stdout.write("\n".join(lines) + "\n")
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
    try:
        text = source.read_text()
    except OSError as exc:
        raise UsageError(f"cannot read {source}: {exc.strerror}", hint="give a snapshot.json path")
    try:
        snapshot = Snapshot.from_json(text)
    except ParseError as exc:
        raise ParseError(f"{source}: {exc.message}", hint=exc.hint) from None
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
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
