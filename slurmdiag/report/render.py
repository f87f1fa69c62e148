"""The HTML report: one self-contained file an on-call engineer can open from file:// or a server.

``render_html`` is a pure function of (Snapshot, Analysis, source lines): it builds a small view
model here (all decisions: grouping, thresholds, caps) and hands it to ``templates/report.html.j2``
(jinja2, autoescape on, StrictUndefined), which only lays it out. ``write_report`` is the one place
that touches the disk. The page carries no JavaScript and a Content-Security-Policy that forbids
scripts and network fetches, so a hostile string in a stack can never run.

Scale: identical nodes (same status, same stack classes, same GPU/NIC health) collapse into one
row with a compressed node set; only culprit ranks, ranks of small classes and nodes that stand
out get per-rank rows. Every rank present and every node still gets an anchor (``#rank-37``,
``#node-node001``).
"""

from __future__ import annotations

import functools
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurmdiag import _version
from slurmdiag.analysis.model import Analysis, ClassifiedFrame, StackClass, TreeNode
from slurmdiag.analysis.nic import ib_port_active
from slurmdiag.analysis.stacks import is_user_file, job_code
from slurmdiag.hostlist import compress_hostlist, format_int_ranges
from slurmdiag.parsers.infiniband import IB_PHYS_LINK_UP, parse_sysfs_ib_phys_state
from slurmdiag.safeio import atomic_write, decimal_int, iter_job_lines, job_uid
from slurmdiag.slurm.parse import array_task_name
from slurmdiag.snapshot import Frame, Gpu, IbPort, Node, Rank, Snapshot, ThreadStack, Verdict
from slurmdiag.vocabulary import NodeStatus, known_severity, severity_rank

if TYPE_CHECKING:  # jinja2 loads when a page is rendered: the terminal summary never needs it
    import jinja2

__all__ = ["read_source_lines", "render_html", "render_report_file", "source_frames", "write_report"]

TEMPLATE = "report.html.j2"

# A class this small (and a minority) is interesting: its ranks get per-rank rows wherever they are.
SMALL_CLASS_MAX = 8
# Caps that keep a 32k-rank report readable and under 10 MB whatever the snapshot holds.
MAX_NODE_SECTIONS = 256
MAX_CLASS_ROWS = 500
MAX_CLASS_FRAME_DETAILS = 200
MAX_TREE_SEGMENTS = 400
MAX_RANK_DETAILS = 256
MAX_CULPRIT_DETAILS = 64
MAX_CULPRIT_LINKS = 16
MAX_LOG_FINDINGS = 500
MAX_TOP_SYSCALLS = 2
# Source text of the culprit's frames: never more than this read from a job-named file.
SOURCE_MAX_BYTES = 4 * 1024 * 1024
SOURCE_MAX_LINES = 200_000
SOURCE_LINE_CHARS = 1000

# GPU thresholds (cell colour): a hung NCCL kernel spins at ~100 %, an idle GPU is a rank not in it.
GPU_UTIL_IDLE_BELOW = 5.0
GPU_UTIL_BUSY_FROM = 95.0
GPU_MEMORY_WARN_FRACTION = 0.95
GPU_MEMORY_BAD_FRACTION = 0.99
GPU_TEMP_WARN_C = 83.0
GPU_TEMP_BAD_C = 90.0

# nvidia-smi clocks_event_reasons bit mask (nvml.h, nvmlClocksEventReason*): name and level.
_CLOCK_REASONS: tuple[tuple[int, str, str], ...] = (
    (0x1, "GpuIdle", "info"),
    (0x2, "ApplicationsClocksSetting", "ok"),
    (0x4, "SwPowerCap", "warn"),
    (0x8, "HwSlowdown", "bad"),
    (0x10, "SyncBoost", "ok"),
    (0x20, "SwThermalSlowdown", "warn"),
    (0x40, "HwThermalSlowdown", "bad"),
    (0x80, "HwPowerBrakeSlowdown", "bad"),
    (0x100, "DisplayClockSetting", "ok"),
)

_LEVEL_ORDER = {"ok": 0, "muted": 0, "busy": 1, "info": 1, "warn": 2, "bad": 3}
_ANCHOR_UNSAFE = re.compile(r"\s")


# --------------------------------------------------------------------------------------------
# View model: what the template lays out (plain values, no decisions left)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    text: str
    level: str = "ok"  # ok | muted | busy | info | warn | bad
    title: str = ""


@dataclass(frozen=True)
class FrameView:
    function: str
    location: str
    short_location: str  # last two path parts, for narrow table cells
    is_user: bool
    kind: str
    native: bool
    source: str | None


@dataclass(frozen=True)
class FrameRun:
    """Consecutive frames; a run of library frames is drawn collapsed."""

    collapsed: bool
    frames: tuple[FrameView, ...]
    summary: str


@dataclass(frozen=True)
class SiteView:
    site: str
    source: str | None


@dataclass(frozen=True)
class VerdictView:
    kind: str
    severity: str
    summary: str
    next_step: str | None
    evidence: tuple[str, ...]
    culprit_label: str
    culprit_count: int
    culprit_links: tuple[int, ...]
    culprit_nodes: str
    sites: tuple[SiteView, ...]


@dataclass(frozen=True)
class ClassView:
    index: int
    ranks_label: str
    count: int
    percent: str
    kind: str
    op: str
    stationary: bool
    has_culprit: bool
    top_user: FrameView | None
    top: FrameView | None
    frame_count: int
    runs: tuple[FrameRun, ...]


@dataclass(frozen=True)
class TreeSegment:
    """A chain of tree nodes shared by the same ranks, then its branches."""

    ranks_label: str
    count: int
    runs: tuple[FrameRun, ...]
    children: tuple[TreeSegment, ...]
    classes: tuple[tuple[int, bool], ...]  # (class index, stationary) ending here
    omitted_branches: int
    omitted_ranks: int


@dataclass(frozen=True)
class ThreadView:
    name: str
    thread_id: int
    flags: str
    runs: tuple[FrameRun, ...]


@dataclass(frozen=True)
class RankDetail:
    cmdline: str
    env: tuple[tuple[str, str], ...]
    sample_note: str
    threads: tuple[ThreadView, ...]
    connections: tuple[tuple[str, str, str, str], ...]
    workers: tuple[str, ...]


@dataclass(frozen=True)
class RankRow:
    rank: int | None
    anchor: str | None
    local_rank: str
    pid: int
    state: Cell
    cpu: str
    wchan: str
    class_index: int | None
    kind: str
    status: str
    stationary: bool | None
    is_culprit: bool
    top_user: FrameView | None
    top: FrameView | None
    strace: Cell
    interfaces: str
    errors: tuple[str, ...]
    detail: RankDetail | None


@dataclass(frozen=True)
class GpuRow:
    cells: tuple[Cell, ...]


@dataclass(frozen=True)
class GpuTable:
    status: Cell
    message: str | None
    header: tuple[str, ...]
    rows: tuple[GpuRow, ...]
    xid_events: tuple[str, ...]
    apps: tuple[tuple[str, str, str, str], ...]


@dataclass(frozen=True)
class NicTable:
    message: str | None
    interfaces: tuple[tuple[Cell, ...], ...]
    ib_ports: tuple[tuple[Cell, ...], ...]


@dataclass(frozen=True)
class NodeSection:
    name: str
    anchor: str
    status: Cell
    message: str | None
    facts: tuple[tuple[str, str], ...]
    ranks: tuple[RankRow, ...]
    gpu: GpuTable | None
    nic: NicTable | None
    errors: tuple[str, ...]
    other_processes: tuple[str, ...]


@dataclass(frozen=True)
class NodeGroup:
    """Identical nodes drawn as one row; the first node stands for all in the detail."""

    names_label: str
    count: int
    node_anchors: tuple[str, ...]
    rank_anchors: tuple[str, ...]
    ranks_label: str
    rank_count: int
    status: Cell
    message: str | None
    classes: tuple[int, ...]
    gpu_summary: Cell
    nic_summary: Cell
    representative: NodeSection


@dataclass(frozen=True)
class ProblemView:
    level: str
    what: str
    message: str
    hosts_label: str
    count: int
    first_anchor: str


@dataclass(frozen=True)
class LogFindingView:
    where: str
    kind: str
    rank: str
    host: str
    text: str


@dataclass(frozen=True)
class ReportView:
    title: str
    verdicts: tuple[VerdictView, ...]
    facts: tuple[tuple[str, str], ...]
    notes: tuple[str, ...]
    problems: tuple[ProblemView, ...]
    classes: tuple[ClassView, ...]
    classes_omitted: int
    classes_omitted_ranks: int
    missing_ranks: str
    tree: tuple[TreeSegment, ...]
    sections: tuple[NodeSection, ...]
    groups: tuple[NodeGroup, ...]
    log_findings: tuple[LogFindingView, ...]
    log_findings_omitted: int
    generated_by: str
    probe: Any = None  # slurmdiag.probe.view.ProbeView when the snapshot has a probe section
    probe_only: bool = False  # a probe's snapshot: no stacks were collected


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


def render_html(
    snapshot: Snapshot, analysis: Analysis, *, source_lines: Mapping[str, str] | None = None
) -> str:
    """Render the self-contained HTML report (pure: no I/O, same input gives the same page)."""
    view = build_view(snapshot, analysis, source_lines=source_lines or {})
    return load_template().render(r=view)


def load_template() -> jinja2.Template:
    """The report's compiled template: compiled once a process (and kept between runs)."""
    return _environment().get_template(TEMPLATE)


def write_report(html: str, path: str | os.PathLike[str], mode: int = 0o640) -> Path:
    """Write the report atomically (``safeio.atomic_write``: mkstemp + fchmod + rename)."""
    if not isinstance(html, str):
        raise TypeError(f"the report is text, not {type(html).__name__}")
    return atomic_write(path, html, mode)


def read_source_lines(
    frames: Iterable[tuple[str, int | None]], *, owner_uid: int | None, max_files: int = 64
) -> dict[str, str]:
    """Read ``file:line`` source text for the frames, under the job-named-path rule (I/O edge).

    File names come from the job's frames: a file is read only when ``safeio`` allows it (a
    regular file of the job's user ``owner_uid``, outside /proc, /sys and /dev, no final
    symlink), at most ``SOURCE_MAX_BYTES`` and ``SOURCE_MAX_LINES`` lines; lines are cut to
    ``SOURCE_LINE_CHARS`` characters.
    """
    wanted: dict[str, set[int]] = {}
    for file, line in frames:
        if line is None or line <= 0 or line > SOURCE_MAX_LINES:
            continue
        if file not in wanted and len(wanted) >= max_files:
            continue
        wanted.setdefault(file, set()).add(line)
    found: dict[str, str] = {}
    for file, lines in wanted.items():
        try:
            last = max(lines)
            numbered = enumerate(
                iter_job_lines(
                    file, owner_uid=owner_uid, max_bytes=SOURCE_MAX_BYTES, max_lines=last
                ),
                start=1,
            )
            for number, text in numbered:
                if number in lines:
                    found[f"{file}:{number}"] = text[:SOURCE_LINE_CHARS]
        except (OSError, ValueError):
            continue
    return found


def write_snapshot_report(
    snapshot: Snapshot,
    out_path: str | os.PathLike[str],
    analysis: Analysis | None = None,
    mode: int = 0o640,
) -> Path:
    """Analyse (unless given), read the culprit source lines, render and write atomically."""
    if analysis is None:
        from slurmdiag.analysis import analyze  # the analysis package is heavier; load on use

        analysis = analyze(snapshot)
    source_lines = read_source_lines(
        source_frames(analysis), owner_uid=job_uid(snapshot.job.user)
    )
    return write_report(render_html(snapshot, analysis, source_lines=source_lines), out_path, mode)


def render_report_file(
    snapshot_path: str | os.PathLike[str], out_path: str | os.PathLike[str], mode: int = 0o640
) -> Path:
    """Load a saved snapshot and write its report (``slurmdiag report``)."""
    snapshot = Snapshot.from_json(Path(snapshot_path).read_text(encoding="utf-8"))
    return write_snapshot_report(snapshot, out_path, mode=mode)


def source_frames(analysis: Analysis) -> list[tuple[str, int | None]]:
    """(file, line) whose source text the report shows: verdict sites, classes' top user frames.

    The controller passes these to ``read_source_lines`` and the result to ``render_html``.
    """
    frames: list[tuple[str, int | None]] = []
    for verdict in analysis.verdicts:
        for site in verdict.sites:
            file, _, line = site.rpartition(":")
            if file and (number := decimal_int(line)) is not None:
                frames.append((file, number))
    for stack_class in analysis.classes:
        if stack_class.top_user_frame is not None:
            frames.append((stack_class.top_user_frame.file, stack_class.top_user_frame.line))
    return frames


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FunctionLoader(_load_template),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        bytecode_cache=_bytecode_cache(),
    )


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    """Compiled templates kept between runs: compiling the report's costs ~0.1 s a process.

    jinja2's per-user directory under the temp dir (``_jinja2-cache-UID``), which it refuses to
    use unless it is ours and mode 0700; entries are keyed by the template's source checksum. No
    usable directory: templates are compiled on every run, as without a cache.
    """
    import jinja2

    try:
        return jinja2.FileSystemBytecodeCache()
    except (OSError, RuntimeError):
        return None


def _load_template(name: str) -> str | None:
    """Read a template from the installed ``slurmdiag.templates`` package.

    pyproject.toml maps the top-level ``templates/`` to that package: a wheel ships it inside
    ``slurmdiag/``, an editable install (``make venv``) points the name at the source folder.
    """
    from importlib import resources

    try:
        return resources.files("slurmdiag.templates").joinpath(name).read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


# --------------------------------------------------------------------------------------------
# Building the view
# --------------------------------------------------------------------------------------------


class _Context:
    """Lookups shared by the builders, computed once per render."""

    def __init__(self, snapshot: Snapshot, analysis: Analysis, source_lines: Mapping[str, str]):
        self.snapshot = snapshot
        self.analysis = analysis
        self.source_lines = source_lines
        self.views = {(view.node, view.pid): view for view in analysis.ranks}
        self.class_of = {view.rank: view.class_index for view in analysis.ranks}
        self.node_of = {view.rank: view.node for view in analysis.ranks}
        self.verdicts = ordered_verdicts(analysis)
        self.culprits = {rank for verdict in self.verdicts for rank in verdict.culprit_ranks}
        total = len(analysis.ranks)
        self.small_classes = {
            index
            for index, stack_class in enumerate(analysis.classes)
            if len(stack_class.ranks) <= SMALL_CLASS_MAX and 2 * len(stack_class.ranks) < total
        }
        self.mtu_majority = _mtu_majority(snapshot.nodes)
        self._gpu_issue_cache: dict[tuple[Any, ...], frozenset[tuple[int, str]]] = {}

    def gpu_issues(self, gpu: Gpu) -> frozenset[tuple[int, str]]:
        """(column, level) of the GPU's warn/bad cells; memoised, GPUs of a job look alike."""
        key = (
            gpu.utilization_gpu, gpu.utilization_memory, gpu.memory_used_mib, gpu.memory_total_mib,
            gpu.temperature_c, gpu.power_w, gpu.clocks_event_reasons, gpu.ecc_uncorrected_volatile,
            gpu.pcie_gen, gpu.pcie_width, gpu.retired_pending, gpu.remapped_pending,
            tuple(item for item in gpu.raw.items() if item[1].startswith("[")),
        )
        issues = self._gpu_issue_cache.get(key)
        if issues is None:
            issues = frozenset(
                (position, cell.level)
                for position, cell in enumerate(gpu_cells(gpu))
                if cell.level in ("warn", "bad")
            )
            self._gpu_issue_cache[key] = issues
        return issues

    def frame_view(self, frame: Frame, *, is_user: bool, kind: str) -> FrameView:
        location = frame.file if frame.line is None else f"{frame.file}:{frame.line}"
        source = self.source_lines.get(location) if frame.line is not None else None
        return FrameView(
            function=frame.function,
            location=location,
            short_location=short_location(frame),
            is_user=is_user,
            kind=kind,
            native=frame.native,
            source=source.strip() if source is not None else None,
        )

    def user_frame_view(self, frame: Frame | None) -> FrameView | None:
        return None if frame is None else self.frame_view(frame, is_user=True, kind="user")

    def top_frame_view(self, frame: Frame | None) -> FrameView | None:
        if frame is None:
            return None
        return self.frame_view(frame, is_user=_looks_like_user_file(frame), kind="")


def build_view(
    snapshot: Snapshot, analysis: Analysis, *, source_lines: Mapping[str, str]
) -> ReportView:
    """Turn snapshot + analysis into the plain values the template draws."""
    with job_code(snapshot):  # the analysis' own rule for the job's installed package
        return _build_view(snapshot, analysis, source_lines)


def _build_view(
    snapshot: Snapshot, analysis: Analysis, source_lines: Mapping[str, str]
) -> ReportView:
    ctx = _Context(snapshot, analysis, source_lines)
    sections, groups = _node_views(ctx)
    classes = tuple(_class_view(ctx, i, c) for i, c in enumerate(analysis.classes[:MAX_CLASS_ROWS]))
    omitted = analysis.classes[MAX_CLASS_ROWS:]
    findings = snapshot.log_findings
    job = snapshot.job
    label = array_task_name(job.array_job_id, job.array_task_id) or job.id
    title = f"slurmdiag: job {label}" + (f" ({job.name})" if job.name else "")
    return ReportView(
        title=title,
        verdicts=tuple(_verdict_view(ctx, v) for v in ctx.verdicts),
        facts=_job_facts(snapshot, analysis),
        notes=tuple(analysis.notes),
        problems=_problems(snapshot),
        classes=classes,
        classes_omitted=len(omitted),
        classes_omitted_ranks=sum(len(c.ranks) for c in omitted),
        missing_ranks=_ranges(analysis.missing_ranks),
        tree=_tree_view(ctx),
        sections=sections,
        groups=groups,
        log_findings=tuple(
            LogFindingView(
                where=f"{f.source}:{f.line_no}",
                kind=f.kind,
                rank="" if f.rank is None else str(f.rank),
                host=f.host or "",
                text=f.text,
            )
            for f in findings[:MAX_LOG_FINDINGS]
        ),
        log_findings_omitted=max(0, len(findings) - MAX_LOG_FINDINGS),
        generated_by=f"slurmdiag {_version.__version__}",
        **_probe_fields(snapshot),
    )


def _probe_fields(snapshot: Snapshot) -> dict[str, Any]:
    if snapshot.probe is None:
        return {}
    from slurmdiag.probe.view import probe_view

    return {"probe": probe_view(snapshot.probe), "probe_only": not snapshot.nodes}


def ordered_verdicts(analysis: Analysis) -> list[Verdict]:
    """The analysis' verdicts, most severe first (stable within a severity)."""
    return sorted(analysis.verdicts, key=lambda v: severity_rank(v.severity))


def _verdict_view(ctx: _Context, verdict: Verdict) -> VerdictView:
    culprits = sorted(set(verdict.culprit_ranks))
    nodes = [ctx.node_of[r] for r in culprits if r in ctx.node_of]
    sites = tuple(
        SiteView(site=site, source=(ctx.source_lines.get(site) or "").strip() or None)
        for site in verdict.sites
    )
    return VerdictView(
        kind=verdict.kind,
        severity=known_severity(verdict.severity),
        summary=verdict.summary,
        next_step=verdict.next_step,
        evidence=tuple(verdict.evidence),
        culprit_label=_ranges(culprits),
        culprit_count=len(culprits),
        culprit_links=tuple(culprits[:MAX_CULPRIT_LINKS]),
        culprit_nodes=compress_hostlist(dict.fromkeys(nodes)) if nodes else "",
        sites=sites,
    )


def _job_facts(snapshot: Snapshot, analysis: Analysis) -> tuple[tuple[str, str], ...]:
    job = snapshot.job
    node_names = job.nodes or tuple(node.name for node in snapshot.nodes)
    world_size = analysis.world_size
    if world_size is None:
        world_sizes = Counter(
            rank.world_size for _, rank in snapshot.all_ranks() if rank.world_size is not None
        )
        world_size = world_sizes.most_common(1)[0][0] if world_sizes else None
    ranks = f"{len(analysis.ranks)} seen"
    if world_size is not None:
        ranks += f" of world size {world_size}"
    if analysis.missing_ranks:
        ranks += f"; missing {_ranges(analysis.missing_ranks)}"
    if analysis.unknown_ranks:
        why = "other het components" if job.het_job_offset is not None else "node did not report"
        ranks += f"; unknown ({why}) {_ranges(analysis.unknown_ranks)}"
    status_counts = Counter(node.status for node in snapshot.nodes)
    collected = ", ".join(f"{count} {status}" for status, count in sorted(status_counts.items()))
    facts: list[tuple[str, str | None]] = [
        ("Job", job.id),
        ("Name", job.name),
        ("User", job.user),
        ("State", job.state),
        ("Partition", job.partition),
        ("Nodes", f"{compress_hostlist(node_names)} ({len(node_names)})" if node_names else None),
        ("Ranks", ranks),
        ("Collected", collected or None),
        ("Samples", f"up to {analysis.samples} per rank" if analysis.samples else None),
        ("Array", array_task_name(job.array_job_id, job.array_task_id)),
        ("Het job", (f"{job.het_job_id}+{job.het_job_offset}" if job.het_job_offset is not None
                     else f"{job.het_job_id} (every component)") if job.het_job_id else None),
        ("Start", job.start_time),
        ("Run time", job.run_time),
        ("Time limit", job.time_limit),
        ("Snapshot", snapshot.created),
        ("Collection took", _seconds(snapshot.duration_s)),
        ("Transport", snapshot.transport),
        ("slurmdiag", snapshot.slurmdiag_version or None),
        ("Work dir", job.work_dir),
        ("Stdout", job.stdout),
        ("Stderr", job.stderr if job.stderr != job.stdout else None),
        ("Output last written", _output_written(job.output_quiet_s)),
        *_postmortem_facts(snapshot.postmortem),
    ]
    return tuple((label, value) for label, value in facts if value)


def _output_written(quiet_s: float | None) -> str | None:
    if quiet_s is None:
        return None
    from slurmdiag.config import output_silence

    return f"{output_silence(quiet_s)} before the look ended"


def _postmortem_facts(section: dict[str, Any] | None) -> list[tuple[str, str | None]]:
    """A post-mortem's sources, its first error, its cores and what it could not read."""
    if not section:
        return []
    job = section.get("job") or {}
    ended = str(job.get("state") or "?")
    if job.get("exit_code") is not None:
        ended += f", exit code {job['exit_code']}"
    if job.get("signal"):
        ended += f" ({job['signal']})"
    if job.get("cancelled_by"):
        ended += f", cancelled by {job['cancelled_by']}"
    first = section.get("first_error") or {}
    facts: list[tuple[str, str | None]] = [
        ("Post-mortem from", str(section.get("source"))),
        ("Ended", ended),
        ("First error", f"rank {first.get('rank')}: {first.get('text')} "
                        f"({first.get('source')}:{first.get('line')})" if first else None),
        ("Logs read", ", ".join((section.get("logs") or {}).get("read") or ()) or "none"),
    ]
    for step in section.get("steps") or ():
        code = "" if step.get("exit_code") is None else f" exit {step['exit_code']}"
        facts.append((f"Step {step.get('id')}", f"{step.get('state')}{code}"
                      + (f" {step['signal']}" if step.get("signal") else "")
                      + f" on {step.get('nodes')}"))
    for core in section.get("cores") or ():
        facts.append(("Core file", (f"{core.get('path')} (rank {core.get('rank')}, "
                                   f"{core.get('tool') or core.get('message') or 'no stack'})")))
    for index, note in enumerate(section.get("notes") or (), start=1):
        facts.append((f"Note {index}", str(note)))
    return facts


def _problems(snapshot: Snapshot) -> tuple[ProblemView, ...]:
    return tuple(
        ProblemView(
            level=problem.level,
            what=problem.what,
            message=problem.message,
            hosts_label=compress_hostlist(problem.nodes),
            count=len(problem.nodes),
            first_anchor=_node_anchor(problem.nodes[0]),
        )
        for problem in group_node_problems(snapshot.nodes)
    )


@dataclass(frozen=True)
class NodeProblem:
    level: str  # bad | warn | info
    what: str
    message: str
    nodes: tuple[str, ...]


def group_node_problems(nodes: Iterable[Node]) -> list[NodeProblem]:
    """Failed nodes and collector errors; one entry per problem with the nodes that share it.

    Messages that differ only by their node's name ("no answer from node041") count as one,
    shown with ``<node>`` in place of the name; the worst and most widespread come first.
    """
    found: dict[tuple[str, str, str], list[tuple[str, str]]] = {}
    for node in nodes:
        for level, what, message in node_problems(node):
            generic = message.replace(node.name, "<node>") if node.name else message
            found.setdefault((level, what, generic), []).append((node.name, message))
    problems = []
    for (level, what, generic), seen in found.items():
        names = tuple(dict.fromkeys(name for name, _ in seen))
        messages = {message for _, message in seen}
        problems.append(NodeProblem(level, what, messages.pop() if len(messages) == 1 else generic,
                                    names))
    problems.sort(key=lambda p: (-_LEVEL_ORDER.get(p.level, 0), -len(p.nodes)))
    return problems


# The collector's note on a rank numbered from its launcher's task and its place among its
# siblings (discovery's inferences: no RANK in its environment)
_INFERRED = re.compile(r"rank \d+ inferred as ")


def node_problems(node: Node) -> list[tuple[str, str, str]]:
    """(level, what, message) for everything that went wrong collecting one node."""
    problems: list[tuple[str, str, str]] = []
    if node.status != NodeStatus.OK:
        problems.append(("bad", f"node {node.status}", node.message or "(no message)"))
    problems.extend(("warn", "collector error", error) for error in node.errors)
    for rank in node.ranks:
        who = f"rank {rank.rank}" if rank.rank is not None else f"pid {rank.pid}"
        for error in rank.errors:
            if _INFERRED.match(error):  # how discovery numbered a rank: said, not an error
                problems.append(("info", f"{who} identity", error))
            else:
                problems.append(("warn", f"{who} error", error))
        for sample in rank.samples:
            if sample.error:
                problems.append(("warn", "py-spy error", sample.error))
        if rank.strace is not None and rank.strace.status == "error":
            problems.append(("warn", "strace error", rank.strace.message or "(no message)"))
    if node.gpus is not None and node.gpus.status == "error":
        problems.append(("warn", "nvidia-smi error", node.gpus.message or "(no message)"))
    if node.nics is not None and node.nics.message:
        problems.append(("info", "NIC collection", node.nics.message))
    return problems


# --- classes and tree --------------------------------------------------------------------------


def _class_view(ctx: _Context, index: int, stack_class: StackClass) -> ClassView:
    total = max(1, len(ctx.analysis.ranks))
    runs: tuple[FrameRun, ...] = ()
    if index < MAX_CLASS_FRAME_DETAILS:
        runs = _frame_runs(ctx, stack_class.frames)
    return ClassView(
        index=index,
        ranks_label=stack_class.label or _ranges(stack_class.ranks),
        count=len(stack_class.ranks),
        percent=f"{100.0 * len(stack_class.ranks) / total:.1f}%",
        kind=stack_class.kind,
        op=stack_class.op or "",
        stationary=stack_class.stationary,
        has_culprit=not ctx.culprits.isdisjoint(stack_class.ranks),
        top_user=ctx.user_frame_view(stack_class.top_user_frame),
        top=ctx.top_frame_view(stack_class.top_frame),
        frame_count=len(stack_class.frames),
        runs=runs,
    )


def _frame_runs(ctx: _Context, frames: Sequence[ClassifiedFrame]) -> tuple[FrameRun, ...]:
    """Group frames; library runs collapse, but the innermost frame always stays in sight."""
    runs: list[FrameRun] = []
    pending: list[FrameView] = []

    def flush() -> None:
        if pending:
            runs.append(FrameRun(collapsed=True, frames=tuple(pending), summary=_run_summary(pending)))
            pending.clear()

    for position, classified in enumerate(frames):
        view = ctx.frame_view(classified.frame, is_user=classified.is_user, kind=classified.kind)
        if classified.is_user or position == 0:
            flush()
            runs.append(FrameRun(collapsed=False, frames=(view,), summary=""))
        else:
            pending.append(view)
    flush()
    return tuple(runs)


def _tree_frame_runs(ctx: _Context, nodes: Sequence[TreeNode]) -> tuple[FrameRun, ...]:
    """Like _frame_runs for a chain of tree nodes (outermost first); keep the chain's last frame."""
    runs: list[FrameRun] = []
    pending: list[FrameView] = []
    last = len(nodes) - 1
    for position, node in enumerate(nodes):
        if node.frame is None:
            continue
        view = ctx.frame_view(node.frame, is_user=node.is_user, kind=node.kind)
        if node.is_user or position == last:
            if pending:
                runs.append(FrameRun(True, tuple(pending), _run_summary(pending)))
                pending = []
            runs.append(FrameRun(False, (view,), ""))
        else:
            pending.append(view)
    if pending:
        runs.append(FrameRun(True, tuple(pending), _run_summary(pending)))
    return tuple(runs)


def _run_summary(frames: Sequence[FrameView]) -> str:
    noun = "library frame" if len(frames) == 1 else "library frames"
    packages = dict.fromkeys(_package_of(f.location) for f in frames)
    shown = ", ".join(p for p in list(packages)[:3] if p)
    return f"{len(frames)} {noun}" + (f" ({shown})" if shown else "")


def _package_of(location: str) -> str:
    path = location.rsplit(":", 1)[0]
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1].split("/", 1)[0]
    if "dist-packages/" in path:
        return path.split("dist-packages/", 1)[1].split("/", 1)[0]
    if path.startswith("<"):
        return path
    return path.rsplit("/", 1)[-1]


def _tree_view(ctx: _Context) -> tuple[TreeSegment, ...]:
    root = ctx.analysis.tree
    if root is None:
        return ()
    budget = [MAX_TREE_SEGMENTS]
    if root.frame is None:
        return tuple(_segments(ctx, _sorted_children(root.children), budget)[0])
    return tuple(_segments(ctx, (root,), budget)[0])


def _sorted_children(children: Sequence[TreeNode]) -> list[TreeNode]:
    return sorted(children, key=lambda n: (-len(n.ranks), min(n.ranks, default=0)))


def _segments(
    ctx: _Context, starts: Sequence[TreeNode], budget: list[int]
) -> tuple[list[TreeSegment], int, int]:
    """Segments for sibling subtrees, largest first, within the shared segment budget."""
    segments: list[TreeSegment] = []
    omitted = omitted_ranks = 0
    for start in starts:
        if budget[0] <= 0:
            omitted += 1
            omitted_ranks += len(start.ranks)
            continue
        budget[0] -= 1
        chain = [start]
        while len(chain[-1].children) == 1 and chain[-1].children[0].ranks == chain[-1].ranks:
            chain.append(chain[-1].children[0])
        end = chain[-1]
        children, child_omitted, child_omitted_ranks = _segments(
            ctx, _sorted_children(end.children), budget
        )
        # Ranks that end here (no deeper frame) are the classes this segment closes.
        deeper = {r for child in end.children for r in child.ranks}
        ending = [r for r in end.ranks if r not in deeper]
        classes = sorted({c for c in (ctx.class_of.get(r) for r in ending) if c is not None})
        segments.append(
            TreeSegment(
                ranks_label=_ranges(start.ranks),
                count=len(start.ranks),
                runs=_tree_frame_runs(ctx, chain),
                children=tuple(children),
                classes=tuple(
                    (i, ctx.analysis.classes[i].stationary)
                    for i in classes
                    if 0 <= i < len(ctx.analysis.classes)
                ),
                omitted_branches=child_omitted,
                omitted_ranks=child_omitted_ranks,
            )
        )
    return segments, omitted, omitted_ranks


# --- nodes -------------------------------------------------------------------------------------


def _node_views(ctx: _Context) -> tuple[tuple[NodeSection, ...], tuple[NodeGroup, ...]]:
    """Split nodes into individual sections and collapsed groups of identical nodes."""
    nodes = ctx.snapshot.nodes
    notable = _notable_nodes(ctx, nodes)
    # Coarser keys until the page stays bounded: first drop the class set, then health.
    for detail in (2, 1, 0):
        keyed: dict[tuple[Any, ...], list[Node]] = {}
        for node in nodes:
            key = ("notable", node.name) if node.name in notable else _node_key(ctx, node, detail)
            keyed.setdefault(key, []).append(node)
        singles = sum(1 for members in keyed.values() if len(members) == 1)
        if singles <= MAX_NODE_SECTIONS:
            break
    budget = _DetailBudget(culprits=MAX_CULPRIT_DETAILS, others=MAX_RANK_DETAILS)
    sections: list[NodeSection] = []
    groups: list[NodeGroup] = []
    for members in keyed.values():
        if len(members) == 1:
            sections.append(_node_section(ctx, members[0], with_ranks=True, budget=budget))
        else:
            groups.append(_node_group(ctx, members))
    sections.sort(key=lambda s: (-_LEVEL_ORDER.get(s.status.level, 0), s.name))
    return tuple(sections), tuple(groups)


@dataclass
class _DetailBudget:
    """How many more ranks get their threads/env/sockets drawn (culprits have their own share)."""

    culprits: int
    others: int

    def take(self, is_culprit: bool) -> bool:
        if is_culprit and self.culprits > 0:
            self.culprits -= 1
            return True
        if self.others > 0:
            self.others -= 1
            return True
        return False


def _notable_nodes(ctx: _Context, nodes: Sequence[Node]) -> set[str]:
    """Nodes never collapsed: those of culprit ranks first, then of small classes, up to a cap."""
    culprit_nodes: list[str] = []
    small_class_nodes: list[str] = []
    for node in nodes:
        ranks = [r.rank for r in node.ranks if r.rank is not None]
        if any(r in ctx.culprits for r in ranks):
            culprit_nodes.append(node.name)
        elif any(ctx.class_of.get(r) in ctx.small_classes for r in ranks):
            small_class_nodes.append(node.name)
    return set((culprit_nodes + small_class_nodes)[:MAX_NODE_SECTIONS])


def _node_key(ctx: _Context, node: Node, detail: int) -> tuple[Any, ...]:
    # Failure messages often name their node; without the name, identical failures group.
    message = node.message.replace(node.name, "<node>") if node.message else None
    key: tuple[Any, ...] = (node.status, message if node.status != NodeStatus.OK else None)
    if detail >= 1:
        key += (_gpu_health(ctx, node), _nic_health(ctx, node), _error_shape(node), len(node.ranks))
    if detail >= 2:
        key += (frozenset(ctx.class_of.get(r.rank) for r in node.ranks if r.rank is not None),)
    return key


def _error_shape(node: Node) -> tuple[bool, bool, frozenset[str]]:
    strace = frozenset(r.strace.status for r in node.ranks if r.strace is not None)
    return bool(node.errors), any(r.errors for r in node.ranks), strace


def _node_group(ctx: _Context, members: list[Node]) -> NodeGroup:
    first = members[0]
    rank_numbers = [r.rank for node in members for r in node.ranks if r.rank is not None]
    classes = sorted({c for c in (ctx.class_of.get(r) for r in rank_numbers) if c is not None})
    representative = _node_section(ctx, first, with_ranks=False, budget=_DetailBudget(0, 0))
    return NodeGroup(
        names_label=compress_hostlist(node.name for node in members),
        count=len(members),
        node_anchors=tuple(_node_anchor(node.name) for node in members),
        rank_anchors=tuple(f"rank-{r}" for r in rank_numbers),
        ranks_label=_ranges(rank_numbers),
        rank_count=sum(len(node.ranks) for node in members),
        status=representative.status,
        message=first.message if first.status != NodeStatus.OK else None,
        classes=tuple(classes),
        gpu_summary=_gpu_summary(first),
        nic_summary=_nic_summary(first),
        representative=representative,
    )


def _node_section(
    ctx: _Context, node: Node, *, with_ranks: bool, budget: _DetailBudget
) -> NodeSection:
    facts: list[tuple[str, str | None]] = [
        ("hostname", node.hostname if node.hostname and node.hostname != node.name else None),
        ("collector", node.collector_version),
        ("took", _seconds(node.duration_s)),
        ("collector CPU", None if node.collector_cpu_s is None else f"{node.collector_cpu_s * 1000:.0f} ms"),
        ("python", node.python),
        ("tools", ", ".join(f"{k} {v}" if v else f"{k} (missing)" for k, v in node.tools.items())),
    ]
    rows: tuple[RankRow, ...] = ()
    if with_ranks:
        rows = tuple(_rank_row(ctx, node, rank, budget) for rank in node.ranks)
    # The node's own status and message head its section; list only the other problems.
    errors = tuple(
        f"{what}: {message}"
        for _, what, message in node_problems(node)
        if what != f"node {node.status}"
    )
    return NodeSection(
        name=node.name,
        anchor=_node_anchor(node.name),
        status=Cell(node.status, "ok" if node.status == NodeStatus.OK else "bad"),
        message=node.message,
        facts=tuple((k, v) for k, v in facts if v),
        ranks=rows,
        gpu=_gpu_table(node),
        nic=_nic_table(ctx, node),
        errors=errors,
        other_processes=tuple(
            f"{p.pid} {p.role}" + (f" ({p.state})" if p.state else "") + f": {_cmdline(p.cmdline)}"
            for p in node.other_processes
        ),
    )


def _rank_row(ctx: _Context, node: Node, rank: Rank, budget: _DetailBudget) -> RankRow:
    view = ctx.views.get((node.name, rank.pid))
    is_culprit = rank.rank is not None and rank.rank in ctx.culprits
    class_index = view.class_index if view is not None else None
    detail = _rank_detail(ctx, rank) if budget.take(is_culprit) else None
    interfaces = Counter(c.interface for c in rank.connections if c.interface)
    return RankRow(
        rank=rank.rank,
        anchor=f"rank-{rank.rank}" if rank.rank is not None else None,
        local_rank="" if rank.local_rank is None else str(rank.local_rank),
        pid=rank.pid,
        state=_state_cell(rank.state),
        cpu=_percent(rank.cpu_percent),
        wchan=rank.wchan or "",
        class_index=class_index,
        kind=view.kind if view is not None else "",
        status=(view.status or "") if view is not None else "",
        stationary=view.stationary if view is not None else None,
        is_culprit=is_culprit,
        top_user=ctx.user_frame_view(view.top_user_frame) if view is not None else None,
        top=ctx.top_frame_view(view.top_frame) if view is not None else None,
        strace=_strace_cell(rank),
        interfaces=", ".join(f"{name} ({count})" for name, count in sorted(interfaces.items())),
        errors=tuple(rank.errors),
        detail=detail,
    )


def _rank_detail(ctx: _Context, rank: Rank) -> RankDetail:
    last = rank.samples[-1] if rank.samples else None
    note = "no py-spy sample"
    threads: tuple[ThreadView, ...] = ()
    if last is not None:
        note = f"last of {len(rank.samples)} samples (t={last.t:.2f}s)"
        if last.same_as is not None:
            note += f", the same as sample {last.same_as + 1}: none of its threads ran since"
        if last.error:
            note += f"; error: {last.error}"
        threads = tuple(_thread_view(ctx, thread) for thread in last.threads)
    return RankDetail(
        cmdline=_cmdline(rank.cmdline),
        env=tuple(sorted(rank.env.items())),
        sample_note=note,
        threads=threads,
        connections=tuple((c.local, c.remote, c.state, c.interface or "") for c in rank.connections),
        workers=tuple(
            f"{w.pid} {w.role}"
            + (f" state {w.state}" if w.state else "")
            + (f" cpu {_percent(w.cpu_percent)}" if w.cpu_percent is not None else "")
            for w in rank.workers
        ),
    )


def _thread_view(ctx: _Context, thread: ThreadStack) -> ThreadView:
    flags = [f for f, on in (("active", thread.active), ("gil", thread.owns_gil)) if on]
    classified = [
        ClassifiedFrame(frame=f, kind="user" if _looks_like_user_file(f) else "library",
                        is_user=_looks_like_user_file(f))
        for f in thread.frames
    ]
    return ThreadView(
        name=thread.name if thread.name is not None else "(unnamed)",
        thread_id=thread.thread_id,
        flags="+".join(flags) or "idle",
        runs=_frame_runs(ctx, classified),
    )


def _looks_like_user_file(frame: Frame) -> bool:
    """The analysis' own user/library rule, for frames it did not classify (thread listings)."""
    return not frame.native and is_user_file(frame.file)


def _state_cell(state: str | None) -> Cell:
    if not state:
        return Cell("?", "muted")
    level = {"D": "warn", "Z": "bad", "T": "warn", "t": "warn"}.get(state[0], "ok")
    titles = {"R": "running", "S": "sleeping", "D": "uninterruptible (I/O)", "Z": "zombie",
              "T": "stopped", "t": "traced"}
    return Cell(state, level, titles.get(state[0], ""))


def _strace_cell(rank: Rank) -> Cell:
    strace = rank.strace
    if strace is None:
        return Cell("", "muted")
    if strace.status != "ok":
        return Cell(f"{strace.status}: {strace.message or ''}".rstrip(": "), "muted")
    top = sorted(strace.syscalls, key=lambda s: (-s.percent, -s.seconds, -s.calls))[:MAX_TOP_SYSCALLS]
    text = ", ".join(f"{s.syscall} {s.percent:.1f}%" for s in top) or "no syscalls"
    calls = "; ".join(f"{s.syscall}: {s.calls} calls, {s.errors} errors, {s.seconds:.3f} s" for s in top)
    return Cell(text, "ok", f"strace -c over {strace.window_s:.1f} s: {calls}")


# --- GPU -----------------------------------------------------------------------------------------

_GPU_HEADER = (
    "GPU", "name", "util", "mem util", "memory", "temp", "power", "throttle", "ECC uncorr.",
    "PCIe", "pending retire/remap", "other raw",
)

_RAW_KEYS: dict[str, tuple[str, ...]] = {
    "utilization_gpu": ("utilization.gpu",),
    "utilization_memory": ("utilization.memory",),
    "memory_used_mib": ("memory.used",),
    "memory_total_mib": ("memory.total",),
    "temperature_c": ("temperature.gpu",),
    "power_w": ("power.draw", "power.draw.average", "power.draw.instant"),
    "clocks_event_reasons": ("clocks_event_reasons.active", "clocks_throttle_reasons.active"),
    "ecc_uncorrected_volatile": (
        "ecc.errors.uncorrected.volatile.total", "ecc.errors.uncorrected.volatile"),
    "pcie_gen": ("pcie.link.gen.current", "pcie.link.gen.gpucurrent"),
    "pcie_width": ("pcie.link.width.current",),
    "retired_pending": ("retired_pages.pending",),
    "remapped_pending": ("remapped_rows.pending",),
}


def _raw_for(gpu: Gpu, field_name: str) -> str | None:
    for key in _RAW_KEYS.get(field_name, ()):
        if key in gpu.raw:
            return gpu.raw[key]
    return None


def _bracket_cell(gpu: Gpu, field_name: str) -> Cell:
    """A value nvidia-smi did not give as a number, shown verbatim."""
    raw = _raw_for(gpu, field_name)
    if raw is None or not raw.strip():
        return Cell("—", "muted")
    level = "muted" if raw.strip() in ("[N/A]", "[Not Supported]", "N/A") else "warn"
    return Cell(raw, level, "value as nvidia-smi printed it")


def gpu_cells(gpu: Gpu) -> tuple[Cell, ...]:
    """One table row of a GPU with each threshold applied."""
    util = _bracket_cell(gpu, "utilization_gpu")
    if gpu.utilization_gpu is not None:
        value = gpu.utilization_gpu
        # Utilisation is state, not health: marked (idle/busy), never a warning by itself.
        level = "info" if value < GPU_UTIL_IDLE_BELOW else "busy" if value >= GPU_UTIL_BUSY_FROM else "ok"
        title = ("idle: no kernel running on this GPU" if level == "info"
                 else "busy: a hung NCCL kernel spins at 100%" if level == "busy" else "")
        util = Cell(f"{value:.0f}%", level, title)
    mem_util = _bracket_cell(gpu, "utilization_memory")
    if gpu.utilization_memory is not None:
        mem_util = Cell(f"{gpu.utilization_memory:.0f}%")
    memory = _memory_cell(gpu)
    temp = _bracket_cell(gpu, "temperature_c")
    if gpu.temperature_c is not None:
        t = gpu.temperature_c
        temp = Cell(f"{t:.0f} °C", "bad" if t >= GPU_TEMP_BAD_C else "warn" if t >= GPU_TEMP_WARN_C else "ok")
    power = _bracket_cell(gpu, "power_w")
    if gpu.power_w is not None:
        power = Cell(f"{gpu.power_w:.0f} W")
    throttle = _throttle_cell(gpu)
    ecc = _bracket_cell(gpu, "ecc_uncorrected_volatile")
    if gpu.ecc_uncorrected_volatile is not None:
        errors = gpu.ecc_uncorrected_volatile
        ecc = Cell(f"{errors:.0f}", "bad" if errors > 0 else "ok")
    pcie = Cell("—", "muted")
    if gpu.pcie_gen is not None or gpu.pcie_width is not None:
        gen = "?" if gpu.pcie_gen is None else f"{gpu.pcie_gen:.0f}"
        width = "?" if gpu.pcie_width is None else f"{gpu.pcie_width:.0f}"
        pcie = Cell(f"gen{gen} x{width}")
    elif _raw_for(gpu, "pcie_gen") is not None:
        pcie = _bracket_cell(gpu, "pcie_gen")
    pending = _pending_cell(gpu)
    shown = {key for keys in _RAW_KEYS.values() for key in keys}
    other = [f"{k}: {v}" for k, v in gpu.raw.items() if k not in shown and v.strip().startswith("[")]
    return (
        Cell("?" if gpu.index is None else str(gpu.index), "ok", gpu.uuid or ""),
        Cell(gpu.name or "?"),
        util, mem_util, memory, temp, power, throttle, ecc, pcie, pending,
        Cell("; ".join(other), "warn" if other else "muted"),
    )


def _memory_cell(gpu: Gpu) -> Cell:
    used, total = gpu.memory_used_mib, gpu.memory_total_mib
    if used is None:
        return _bracket_cell(gpu, "memory_used_mib")
    if not total:
        return Cell(f"{used:.0f} MiB")
    fraction = used / total
    level = ("bad" if fraction >= GPU_MEMORY_BAD_FRACTION
             else "warn" if fraction >= GPU_MEMORY_WARN_FRACTION else "ok")
    return Cell(f"{used:.0f} / {total:.0f} MiB ({100 * fraction:.0f}%)", level)


def _throttle_cell(gpu: Gpu) -> Cell:
    reasons = gpu.clocks_event_reasons
    if reasons is None or not reasons.strip():
        return _bracket_cell(gpu, "clocks_event_reasons")
    text = reasons.strip()
    if text.startswith("["):
        return Cell(text, "muted" if text in ("[N/A]", "[Not Supported]") else "warn")
    try:
        mask = int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        lowered = text.lower()
        level = "bad" if "hw" in lowered and "slowdown" in lowered else (
            "warn" if "slowdown" in lowered or "thermal" in lowered or "cap" in lowered else "ok")
        return Cell(text, level)
    if mask == 0:
        return Cell("none", "ok", text)
    names = [name for bit, name, _ in _CLOCK_REASONS if mask & bit]
    levels = [level for bit, _, level in _CLOCK_REASONS if mask & bit]
    unknown = mask & ~sum(bit for bit, _, _ in _CLOCK_REASONS)
    if unknown:
        names.append(f"0x{unknown:x}")
        levels.append("warn")
    return Cell(", ".join(names), max(levels, key=lambda lv: _LEVEL_ORDER[lv]), text)


def _pending_cell(gpu: Gpu) -> Cell:
    values = [(label, value) for label, value in
              (("retire", gpu.retired_pending), ("remap", gpu.remapped_pending)) if value]
    if not values:
        raws = [r for r in (_raw_for(gpu, "retired_pending"), _raw_for(gpu, "remapped_pending")) if r]
        return Cell(" / ".join(raws), "muted") if raws else Cell("—", "muted")
    bad = any(value.strip().lower() in ("yes", "1", "true") for _, value in values)
    return Cell(" / ".join(f"{label}: {value}" for label, value in values), "bad" if bad else "ok")


def _gpu_table(node: Node) -> GpuTable | None:
    state = node.gpus
    if state is None:
        return None
    level = {"ok": "ok", "absent": "muted"}.get(state.status, "bad")
    return GpuTable(
        status=Cell(state.status, level),
        message=state.message,
        header=_GPU_HEADER,
        rows=tuple(GpuRow(gpu_cells(gpu)) for gpu in state.gpus),
        xid_events=tuple(state.xid_events),
        apps=tuple(
            (app.gpu_uuid or "", "" if app.pid is None else str(app.pid), app.process_name or "",
             "" if app.used_memory_mib is None else f"{app.used_memory_mib:.0f} MiB")
            for app in state.apps
        ),
    )


def _gpu_health(ctx: _Context, node: Node) -> tuple[Any, ...]:
    """What must match for two nodes' GPUs to count as equally healthy (values may differ)."""
    state = node.gpus
    if state is None:
        return ("none",)
    issues = frozenset(issue for gpu in state.gpus for issue in ctx.gpu_issues(gpu))
    return (state.status, len(state.gpus), issues, bool(state.xid_events))


def _gpu_summary(node: Node) -> Cell:
    state = node.gpus
    if state is None:
        return Cell("not collected", "muted")
    if state.status != "ok":
        return Cell(f"{state.status}" + (f": {state.message}" if state.message else ""),
                    "muted" if state.status == "absent" else "bad")
    names = Counter(gpu.name or "?" for gpu in state.gpus)
    text = ", ".join(f"{count}× {name}" for name, count in names.items()) or "no GPUs"
    issues = Counter(
        (_GPU_HEADER[position], cell.level)
        for gpu in state.gpus
        for position, cell in enumerate(gpu_cells(gpu))
        if cell.level in ("warn", "bad")
    )
    if state.xid_events:
        issues[("Xid", "bad")] += len(state.xid_events)
    if not issues:
        return Cell(text + " — healthy")
    worst = max((level for _, level in issues), key=lambda lv: _LEVEL_ORDER[lv])
    detail = ", ".join(f"{column} {level} ×{count}" for (column, level), count in issues.items())
    return Cell(f"{text} — {detail}", worst)


# --- NIC -----------------------------------------------------------------------------------------


def _mtu_majority(nodes: Sequence[Node]) -> dict[str, int]:
    """Most common MTU of each interface name across the job (a mismatch is worth a colour)."""
    seen: dict[str, Counter[int]] = {}
    for node in nodes:
        if node.nics is None:
            continue
        for interface in node.nics.interfaces:
            if interface.mtu is not None and interface.kind != "loopback":
                seen.setdefault(interface.name, Counter())[interface.mtu] += 1
    return {name: counts.most_common(1)[0][0] for name, counts in seen.items()}


def _interface_users(node: Node) -> dict[str, list[int]]:
    users: dict[str, list[int]] = {}
    for rank in node.ranks:
        for interface in dict.fromkeys(c.interface for c in rank.connections if c.interface):
            if interface is not None and rank.rank is not None:
                users.setdefault(interface, []).append(rank.rank)
    return users


def _link_level(state: str | None) -> str:
    if not state:
        return "muted"
    upper = state.upper()
    if "UP" in upper or "ACTIVE" in upper or "LINKUP" in upper:
        return "ok"
    if "UNKNOWN" in upper:
        return "muted"
    return "bad"


def _phys_level(port: IbPort) -> str:
    code = port.phys_state_code
    if code is None:
        code = parse_sysfs_ib_phys_state(port.phys_state).code
    return "muted" if code is None else "ok" if code == IB_PHYS_LINK_UP else "bad"


def _nic_table(ctx: _Context, node: Node) -> NicTable | None:
    nics = node.nics
    if nics is None:
        return None
    users = _interface_users(node)
    interfaces = []
    for interface in nics.interfaces:
        majority = ctx.mtu_majority.get(interface.name)
        mtu_level = "warn" if majority is not None and interface.mtu not in (None, majority) else "ok"
        ranks = users.get(interface.name, [])
        interfaces.append((
            Cell(interface.name),
            Cell(interface.kind or "", "muted"),
            Cell(interface.state or "?", _link_level(interface.state)),
            Cell("—" if interface.speed_mbps is None else _speed(interface.speed_mbps),
                 "muted" if interface.speed_mbps is None else "ok"),
            Cell("—" if interface.mtu is None else str(interface.mtu), mtu_level,
                 f"most nodes use {majority}" if mtu_level == "warn" else ""),
            Cell(", ".join(interface.addresses)),
            Cell(_ranges(ranks) if ranks else "", "info" if ranks else "muted"),
        ))
    ports = tuple(
        (
            Cell(port.device),
            Cell(str(port.port)),
            Cell(port.state or "?", "ok" if ib_port_active(port) else "bad"),
            Cell(port.phys_state or "?", _phys_level(port)),
            Cell(port.rate or ""),
            Cell(port.link_layer or ""),
        )
        for port in nics.ib_ports
    )
    return NicTable(message=nics.message, interfaces=tuple(interfaces), ib_ports=ports)


def _nic_health(ctx: _Context, node: Node) -> tuple[Any, ...]:
    nics = node.nics
    if nics is None:
        return ("none",)
    interfaces = tuple(
        (i.name, i.kind, i.state, i.speed_mbps, i.mtu) for i in nics.interfaces if i.kind != "loopback"
    )
    ports = tuple((p.device, p.port, p.state, p.phys_state, p.rate) for p in nics.ib_ports)
    used = frozenset(_interface_users(node))
    return (interfaces, ports, bool(nics.message), used)


def _nic_summary(node: Node) -> Cell:
    nics = node.nics
    if nics is None:
        return Cell("not collected", "muted")
    parts = []
    worst = "ok"
    for interface in nics.interfaces:
        if interface.kind == "loopback":
            continue
        speed = "" if interface.speed_mbps is None else f" {_speed(interface.speed_mbps)}"
        mtu = "" if interface.mtu is None else f" mtu {interface.mtu}"
        parts.append(f"{interface.name} {interface.state or '?'}{speed}{mtu}")
        level = _link_level(interface.state)
        if _LEVEL_ORDER.get(level, 0) > _LEVEL_ORDER[worst]:
            worst = level
    states = Counter((p.state or "?") for p in nics.ib_ports)
    if states:
        parts.append("IB ports " + ", ".join(f"{count}× {state}" for state, count in states.items()))
        if not all(ib_port_active(p) for p in nics.ib_ports):
            worst = "bad"
    return Cell("; ".join(parts) or "no interfaces", worst)


# --- small formatting helpers -------------------------------------------------------------------


def _ranges(ranks: Iterable[int]) -> str:
    return format_int_ranges(r for r in ranks if r >= 0)


def short_location(frame: Frame) -> str:
    """``.../torch/distributed/distributed_c10d.py:2810`` -> ``distributed/distributed_c10d.py:2810``."""
    parts = frame.file.rsplit("/", 2)
    path = "/".join(parts[-2:]) if len(parts) > 2 else frame.file
    return path if frame.line is None else f"{path}:{frame.line}"


def _node_anchor(name: str) -> str:
    return "node-" + _ANCHOR_UNSAFE.sub("_", name)


def _seconds(value: float | None) -> str | None:
    return None if value is None else f"{value:.1f} s"


def _percent(value: float | None) -> str:
    return "" if value is None else f"{value:.0f}%"


def _speed(mbps: int) -> str:
    return f"{mbps // 1000} Gb/s" if mbps >= 1000 and mbps % 1000 == 0 else f"{mbps} Mb/s"


def _cmdline(argv: Sequence[str]) -> str:
    return " ".join(argv)
