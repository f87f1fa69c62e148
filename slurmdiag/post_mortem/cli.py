"""The ``postmortem`` subcommand: its arguments and what it prints."""

from __future__ import annotations

import argparse
import os
import sys


def add_parser(sub: argparse._SubParsersAction, file_mode: object) -> None:
    """Register ``slurmdiag postmortem``; ``file_mode`` is the CLI's --file-mode type."""
    parser = sub.add_parser(
        "postmortem", help="explain why a finished job ended (sacct, logs, cores, Flight Recorder)",
        epilog="examples:\n"
        "  slurmdiag postmortem 123456              why a FAILED or TIMEOUT job ended\n"
        "  slurmdiag postmortem 123456 --json --log slurm-123456.out   the snapshot on stdout",
    )
    parser.add_argument("job_id", help="job id of a finished job: 123, 123_4 or 123+1")
    parser.add_argument("--out", metavar="DIR", help="write snapshot.json and report.html here")
    parser.add_argument("--json", action="store_true", help="print the snapshot JSON on stdout")
    parser.add_argument("--no-report", action="store_true", help="do not write the HTML report")
    parser.add_argument("--file-mode", type=file_mode, default=0o640, metavar="MODE",
                        help="permissions of report.html and snapshot.json (octal, default 0640)")
    parser.add_argument("--log", dest="logs", action="append", default=[], metavar="FILE",
                        help="a log of the job (default: its StdOut/StdErr, submitit's per-task "
                        "files); several allowed")
    parser.add_argument("--flight-recorder", dest="flight_recorder", action="append", default=[],
                        metavar="PREFIX", help="TORCH_FR_DUMP_TEMP_FILE the job used "
                        "(dumps are PREFIX<rank>; default /tmp/nccl_trace_rank_)")
    parser.add_argument("--core-dir", dest="core_dirs", action="append", default=[],
                        metavar="DIR", help="another directory to look for core files in")
    parser.add_argument("--no-cores", action="store_true", help="do not look for core files")
    parser.set_defaults(handler=run)


def summary_lines(snapshot, analysis, color: bool) -> list[str]:  # type: ignore[no-untyped-def]
    """The attach summary plus what only a post-mortem has: its sources and what it missed."""
    from slurmdiag.report.terminal import format_summary

    lines = format_summary(snapshot, analysis, color=color, report_path=snapshot.report)
    section = snapshot.postmortem or {}
    job = section.get("job") or {}
    exit_text = "" if job.get("exit_code") is None else f", exit code {job['exit_code']}"
    if job.get("signal"):
        exit_text += f" ({job['signal']})"
    lines.append(f"Slurm's record ({section.get('source')}): {snapshot.job.state}{exit_text}")
    for step in section.get("steps") or ():
        extra = f" by {step['cancelled_by']}" if step.get("cancelled_by") else ""
        code = "" if step.get("exit_code") is None else f" exit {step['exit_code']}"
        sig = f" {step['signal']}" if step.get("signal") else ""
        lines.append(f"  step {step['id']}: {step['state']}{extra}{code}{sig} on {step.get('nodes')}")
    for core in section.get("cores") or ():
        lines.append(f"core: {core['path']} (rank {core.get('rank')}, {core.get('tool') or 'no stack'})")
        frames = core.get("frames") or ()
        python = [f for f in frames if ".py:" in f]  # the Python frames first: they name the code
        lines.extend(f"    {frame}" for frame in (python or list(frames))[:6])
    logs = section.get("logs") or {}
    if logs.get("read"):
        lines.append("logs read: " + ", ".join(logs["read"][:4]))
    for note in section.get("notes") or ():
        lines.append(f"note: {note}")
    return lines


def run(args: argparse.Namespace) -> int:
    from slurmdiag.post_mortem.build import postmortem_job
    from slurmdiag.report.terminal import should_color

    result = postmortem_job(
        args.job_id, out_dir=args.out, report=not args.no_report, file_mode=args.file_mode,
        logs=tuple(args.logs), flight_recorder=tuple(args.flight_recorder),
        cores=not args.no_cores, core_dirs=tuple(args.core_dirs),
    )
    snapshot = result.snapshot
    if args.json:
        sys.stdout.write(snapshot.to_json(indent=1) + "\n")
    else:
        lines = summary_lines(snapshot, result.analysis, should_color(sys.stdout, os.environ))
        sys.stdout.write("\n".join(lines) + "\n")
    if result.out_dir is not None:
        print(f"snapshot: {result.out_dir / 'snapshot.json'}", file=sys.stderr)
        if snapshot.report:
            print(f"report:   {snapshot.report}", file=sys.stderr)
    return 0
