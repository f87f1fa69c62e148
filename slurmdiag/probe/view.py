"""The probe's node-by-node matrix as plain values for the report and the terminal (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from slurmdiag.probe.analysis import slow_directions
from slurmdiag.snapshot import Probe, ProbeLink

MAX_MATRIX_NODES = 128  # beyond this the matrix lists only the nodes in a verdict


@dataclass(frozen=True)
class MatrixCell:
    label: str  # short text in the cell
    kind: str  # self | ok | slow | mtu | fail | none
    style: str  # inline background colour (the heat map)
    title: str  # the measurements, shown on hover


@dataclass(frozen=True)
class MatrixRow:
    name: str
    status: str
    cells: tuple[MatrixCell, ...]


@dataclass(frozen=True)
class ProbeView:
    names: tuple[str, ...]
    rows: tuple[MatrixRow, ...]
    facts: tuple[tuple[str, str], ...]
    collective: tuple[tuple[str, str, str], ...]  # (level, members, result)
    omitted: int


def _heat(rate: float, best: float) -> str:
    """Green for the best rate down to yellow-orange for a tenth of it and below."""
    share = max(0.0, min(1.0, rate / best)) if best > 0 else 1.0
    return f"background:hsl({int(30 + 90 * share)},65%,{int(80 - 8 * share)}%)"


def _cell(link: ProbeLink | None, best: float, slow: set[tuple[str, str]]) -> MatrixCell:
    if link is None:
        return MatrixCell("·", "none", "background:#eceff3", "not tested")
    title = (f"{link.source} → {link.target}: "
             + (f"connected in {link.connect_ms:.1f} ms" if link.connect_ms is not None else "no connection")
             + (f"; up {link.up_mbps:.1f} MB/s" if link.up_mbps is not None else "")
             + (f"; down {link.down_mbps:.1f} MB/s" if link.down_mbps is not None else "")
             + (f"; {link.mtu_size}-byte DF probe {'answered' if link.mtu_ok else 'lost'}"
                if link.mtu_ok is not None else "")
             + (f"; error: {link.error}" if link.error else ""))
    if not link.connect or link.error:
        return MatrixCell("✗", "fail", "background:#d7263d;color:#fff", title)
    if link.mtu_ok is False:
        return MatrixCell("MTU", "mtu", "background:#f08a24;color:#fff", title)
    rate = min(r for r in (link.up_mbps, link.down_mbps, best) if r is not None)
    # slow as the verdicts say it (every round of a direction), not one round's dip
    kind = "slow" if {(link.source, link.target), (link.target, link.source)} & slow else "ok"
    return MatrixCell(f"{rate:.0f}" if rate >= 10 else f"{rate:.2f}", kind, _heat(rate, best), title)


def probe_view(probe: Probe, named_nodes: frozenset[str] = frozenset()) -> ProbeView:
    names = [n.name for n in probe.nodes]
    omitted = 0
    if len(names) > MAX_MATRIX_NODES:
        keep = [n for n in names if n in named_nodes] or names[:MAX_MATRIX_NODES]
        omitted, names = len(names) - len(keep), keep
    tests = {(x.source, x.target): x for x in probe.links}
    rates = sorted(r for x in probe.links for r in (x.up_mbps, x.down_mbps) if r is not None)
    best = rates[-1] if rates else 0.0
    median = rates[len(rates) // 2] if rates else 0.0
    status = {n.name: n.status for n in probe.nodes}
    slow = slow_directions(probe)
    rows = []
    for a in names:
        cells = tuple(MatrixCell("—", "self", "background:#fff", a) if a == b
                      else _cell(tests.get((a, b)), best, slow) for b in names)
        rows.append(MatrixRow(a, status.get(a, "?"), cells))
    facts = (("mode", "inside the job's allocation" if probe.mode == "job" else "fresh allocation"),
             ("nodes", str(len(probe.nodes))), ("rounds", str(probe.rounds)),
             ("tests", str(len(probe.links))),
             ("duration", f"{probe.duration_s or 0:.1f} s"),
             ("median rate", f"{median:.1f} MB/s"))
    collective: list[tuple[str, str, str]] = []
    if probe.collective is not None:
        for g in probe.collective.groups:
            collective.append((str(g.level), ", ".join(g.members),
                               "ok" if g.ok else "; ".join(g.errors) or "failed"))
        if not probe.collective.groups:
            collective.append(("-", "-", f"{probe.collective.status}: {probe.collective.message or ''}"))
    return ProbeView(tuple(names), tuple(rows), facts, tuple(collective), omitted)


def matrix_lines(probe: Probe) -> list[str]:
    """The matrix for a terminal: one letter per directed test (. ok, s slow, M MTU, X failed)."""
    view = probe_view(probe)
    if not view.names or len(view.names) > 40:
        return []
    letters = {"self": "-", "ok": ".", "slow": "s", "mtu": "M", "fail": "X", "none": "?"}
    width = max(7, *(len(n) for n in view.names))
    head = "from/to"
    out = [f"  {head:<{width}} " + " ".join(str(i % 10) for i in range(len(view.names)))]
    for i, row in enumerate(view.rows):
        out.append(f"  {row.name:<{width}} " + " ".join(letters[c.kind] for c in row.cells)
                   + f"   {i % 10}")
    return out
