"""The terminal summary ``slurmdiag attach`` prints: verdicts, stack classes, node problems, path.

``format_summary`` returns lines and never prints (only the CLI does); colour is an argument, and
``should_color`` is how the CLI decides it (a TTY, ``NO_COLOR`` unset, or ``FORCE_COLOR`` set).
Every string that came from the job (thread names, paths, messages) has its control characters
escaped, so a hostile stack cannot move the cursor or recolour the on-call engineer's terminal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TextIO

from slurmdiag.analysis.model import Analysis, StackClass
from slurmdiag.hostlist import compress_hostlist, format_int_ranges
from slurmdiag.report.render import group_node_problems, ordered_verdicts, short_location
from slurmdiag.safeio import one_line
from slurmdiag.slurm.parse import array_task_name
from slurmdiag.snapshot import Snapshot, Verdict
from slurmdiag.vocabulary import known_severity

__all__ = ["format_summary", "should_color"]

MAX_CLASSES = 15
MAX_PROBLEMS = 12
MAX_RANKS_WIDTH = 28
MAX_FRAME_WIDTH = 70

_RESET = "\x1b[0m"
_STYLES = {
    "critical": "\x1b[1;31m",
    "warning": "\x1b[1;33m",
    "info": "\x1b[1;36m",
    "bold": "\x1b[1m",
    "dim": "\x1b[2m",
    "bad": "\x1b[31m",
    "warn": "\x1b[33m",
}


def should_color(stream: TextIO, environ: Mapping[str, str]) -> bool:
    """Colour for a TTY unless NO_COLOR is set; FORCE_COLOR (not "0"/"false") forces it on.

    NO_COLOR wins over FORCE_COLOR: a user who asked for no colour never gets it.
    """
    if environ.get("NO_COLOR"):
        return False
    force = environ.get("FORCE_COLOR")
    if force is not None and force.strip().lower() not in ("0", "false", "no"):
        return True
    if environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or not a real stream
        return False


def format_summary(
    snapshot: Snapshot, analysis: Analysis, *, color: bool, report_path: str | None
) -> list[str]:
    """The summary as lines (no trailing newlines): who, where, why, what next, then the path."""
    paint = _painter(color)
    lines = [_header(snapshot, analysis), ""]
    lines += _verdict_lines(analysis, paint)
    lines.append("")
    lines += _class_lines(analysis, paint, het=snapshot.job.het_job_offset is not None)
    problems = _problem_lines(snapshot, paint)
    if problems:
        lines.append("")
        lines += problems
    if report_path is not None:
        lines += report_lines(report_path, color=color)
    return lines


def report_lines(report_path: str, *, color: bool) -> list[str]:
    """The summary's last lines: where the report is."""
    return ["", f"{_painter(color)('bold', 'Report:')} {clean(report_path)}"]


def clean(text: str) -> str:
    """Escape control characters (ESC, CR, BEL, bidi overrides...) so job-supplied text cannot
    drive the TTY (``safeio.one_line``)."""
    return one_line(text)


Paint = Callable[[str, str], str]


def _painter(color: bool) -> Paint:
    def paint(style: str, text: str) -> str:
        return f"{_STYLES[style]}{text}{_RESET}" if color and text else text

    return paint


def _header(snapshot: Snapshot, analysis: Analysis) -> str:
    job = snapshot.job
    # an array task as squeue shows it (1_0), its own job id after it: the two differ
    task = array_task_name(job.array_job_id, job.array_task_id)
    label = f"{clean(task)} (job id {clean(job.id)})" if task else clean(job.id)
    parts = [f"job {label}" + (f" ({clean(job.name)})" if job.name else "")]
    if job.user:
        parts.append(clean(job.user))
    nodes, ranks = len(snapshot.nodes), len(analysis.ranks)
    if snapshot.postmortem is not None:  # stacks only from cores: the job's own counts
        nodes = len(job.nodes) or nodes
        world = snapshot.postmortem.get("world_size")
        ranks = world if isinstance(world, int) and world > ranks else ranks
    parts.append(f"{nodes} node{'s' if nodes != 1 else ''}")
    parts.append(f"{ranks} rank{'s' if ranks != 1 else ''}")
    if snapshot.postmortem is not None:
        parts.append(f"ended {clean(job.state)}" + (f" after {clean(job.run_time)}" if job.run_time else ""))
    elif job.run_time:
        parts.append(f"running {clean(job.run_time)}")
    if snapshot.postmortem is None and (quiet := _output_quiet(job.output_quiet_s)):
        parts.append(quiet)
    if snapshot.created:
        parts.append(f"snapshot {clean(snapshot.created)}")
    return "slurmdiag: " + " · ".join(parts)


def _output_quiet(quiet_s: float | None) -> str | None:
    """``output quiet 47m`` from the minute the first verdict says it on: under that, a step's
    ordinary gap between two log lines."""
    from slurmdiag.analysis.verdicts import OUTPUT_SAID_S
    from slurmdiag.config import output_silence

    if quiet_s is None or quiet_s < OUTPUT_SAID_S:
        return None
    return f"output quiet {output_silence(quiet_s)}"


def _verdict_lines(analysis: Analysis, paint: Paint) -> list[str]:
    verdicts = ordered_verdicts(analysis)
    if not verdicts:
        return [paint("info", "NO VERDICT") + " the analysis named no culprit; see the classes below"]
    node_of = {view.rank: view.node for view in analysis.ranks}
    lines: list[str] = []
    for verdict in verdicts:
        lines += _one_verdict(verdict, node_of, paint)
    return lines


def _one_verdict(verdict: Verdict, node_of: Mapping[int, str], paint: Paint) -> list[str]:
    severity = known_severity(verdict.severity)
    unsure = ""
    if verdict.confidence == "low":  # why, when the analysis said why (its "unsure:" evidence)
        why = next((line[len("unsure: "):].split(" on the stacks")[0] for line in verdict.evidence
                    if line.startswith("unsure: ")), None)
        unsure = f" (low confidence: {why})" if why else " (low confidence)"
    lines = [f"{paint(severity, severity.upper())} {paint('bold', clean(verdict.kind))}{unsure}",
             f"  {clean(verdict.summary)}"]
    if verdict.culprit_ranks:
        culprits = sorted(set(verdict.culprit_ranks))
        nodes = [node_of[r] for r in culprits if r in node_of]
        where = f" on {clean(compress_hostlist(dict.fromkeys(nodes)))}" if nodes else ""
        label = format_int_ranges(culprits)
        lines.append(f"  culprit ranks: {paint('bad', label)}{where}")
    if verdict.sites:
        lines.append("  site: " + ", ".join(clean(site) for site in verdict.sites))
    if verdict.next_step:
        lines.append(f"  next step: {clean(verdict.next_step)}")
    return lines


def _class_lines(analysis: Analysis, paint: Paint, het: bool = False) -> list[str]:
    classes = analysis.classes
    count = len(analysis.ranks)
    title = (f"Stack classes ({count} rank{'s' if count != 1 else ''} in {len(classes)} "
             f"class{'es' if len(classes) != 1 else ''}):")
    lines = [paint("bold", title)]
    if not classes:
        lines.append("  no stacks were collected")
    culprits = {rank for verdict in analysis.verdicts for rank in verdict.culprit_ranks}
    rows = [("#", "RANKS", "COUNT", "KIND", "MOTION", "TOP USER FRAME")]
    marks: list[bool] = [False]
    for index, stack_class in enumerate(classes[:MAX_CLASSES]):
        rows.append(_class_row(index, stack_class))
        marks.append(not culprits.isdisjoint(stack_class.ranks))
    if classes:
        widths = [max(len(row[i]) for row in rows) for i in range(5)]
        for row, culprit in zip(rows, marks):
            cells = [row[0].ljust(widths[0]), row[1].ljust(widths[1]), row[2].rjust(widths[2]),
                     row[3].ljust(widths[3]), row[4].ljust(widths[4]), row[5]]
            line = "  " + "  ".join(cells).rstrip()
            if row is rows[0]:
                line = paint("dim", line)
            elif culprit:
                line += "  " + paint("bad", "<- culprit")
            lines.append(line)
    if len(classes) > MAX_CLASSES:
        rest = classes[MAX_CLASSES:]
        lines.append(f"  … {len(rest)} more classes ({sum(len(c.ranks) for c in rest)} ranks)")
    if analysis.missing_ranks:
        missing = format_int_ranges(analysis.missing_ranks)
        lines.append("  " + paint("warn", f"missing ranks (no process on their node): {missing}"))
    if analysis.unknown_ranks:
        unknown = format_int_ranges(analysis.unknown_ranks)
        why = "other het components" if het else "their node did not report"
        lines.append("  " + paint("warn", f"unknown ranks ({why}): {unknown}"))
    return lines


def _class_row(index: int, stack_class: StackClass) -> tuple[str, str, str, str, str, str]:
    label = stack_class.label or format_int_ranges(stack_class.ranks)
    if len(label) > MAX_RANKS_WIDTH:
        label = label[: MAX_RANKS_WIDTH - 1] + "…"
    frame = stack_class.top_user_frame or stack_class.top_frame
    where = "—" if frame is None else f"{frame.function} ({short_location(frame)})"
    where = clean(where)
    if len(where) > MAX_FRAME_WIDTH:
        where = where[: MAX_FRAME_WIDTH - 1] + "…"
    motion = "stationary" if stack_class.stationary else "moving"
    kind = stack_class.kind if not stack_class.op else f"{stack_class.kind}:{stack_class.op}"
    return (f"#{index}", clean(label), str(len(stack_class.ranks)), clean(kind), motion, where)


def _problem_lines(snapshot: Snapshot, paint: Paint) -> list[str]:
    problems = group_node_problems(snapshot.nodes)
    if not problems:
        return []
    lines = [paint("bold", "Node problems:")]
    for problem in problems[:MAX_PROBLEMS]:
        hosts = clean(compress_hostlist(problem.nodes))
        count = f" ({len(problem.nodes)} nodes)" if len(problem.nodes) > 1 else ""
        style = {"bad": "bad", "warn": "warn"}.get(problem.level, "dim")
        lines.append(f"  {paint(style, problem.what)} on {hosts}{count}: {clean(problem.message)}")
    if len(problems) > MAX_PROBLEMS:
        lines.append(f"  … {len(problems) - MAX_PROBLEMS} more kinds of problems (see the report)")
    return lines
