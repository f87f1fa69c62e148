"""The HTML report, checked by parsing the page (html.parser), never by matching strings."""

from __future__ import annotations

import dataclasses
import os
import stat
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest
from support.synthetic import (
    HOSTILE_DIR,
    HOSTILE_ENV,
    HOSTILE_JOB_NAME,
    HOSTILE_THREAD,
    JobShape,
    rank_gated_job,
    with_hostile_strings,
)

from slurmdiag.analysis import analyze
from slurmdiag.analysis.model import Analysis
from slurmdiag.report import render
from slurmdiag.report.render import gpu_cells, read_source_lines, render_html, write_report
from slurmdiag.snapshot import Gpu, Job, Node, Snapshot

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "snapshots" / "synthetic_rank_gated.json"
REGEN = os.environ.get("SLURMDIAG_REGEN_GOLDEN") == "1"


# --------------------------------------------------------------------------------------------
# A tiny DOM: enough to ask "which elements, with which attributes and text"
# --------------------------------------------------------------------------------------------

_VOID = {"meta", "br", "hr", "img", "input", "link", "col", "area", "base", "wbr", "source"}


@dataclasses.dataclass
class El:
    tag: str
    attrs: dict[str, str]
    children: list[El | str] = dataclasses.field(default_factory=list)
    parent: El | None = None

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def iter(self) -> Iterator[El]:
        yield self
        for child in self.children:
            if isinstance(child, El):
                yield from child.iter()

    def find_all(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list[El]:
        return [
            el for el in self.iter()
            if (tag is None or el.tag == tag)
            and (cls is None or cls in el.classes)
            and all(el.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())
        ]

    def find(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> El:
        found = self.find_all(tag, cls, **attrs)
        assert found, f"no <{tag} class={cls} {attrs}>"
        return found[0]


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = El("#document", {})
        self.current = self.root

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        el = El(tag, {k: v or "" for k, v in attrs}, parent=self.current)
        self.current.children.append(el)
        if tag not in _VOID:
            self.current = el

    def handle_endtag(self, tag: str) -> None:
        node: El | None = self.current
        while node is not None and node.tag != tag:
            node = node.parent
        assert node is not None and node.parent is not None, f"stray </{tag}>"
        self.current = node.parent

    def handle_data(self, data: str) -> None:
        self.current.children.append(data)


def parse(html: str) -> El:
    builder = _Builder()
    builder.feed(html)
    builder.close()
    assert builder.current is builder.root, f"unclosed <{builder.current.tag}>"
    return builder.root


def pinned(snapshot: Snapshot) -> Analysis:
    """The real analysis with the snapshot's fixed verdicts, so tests do not follow its wording."""
    return dataclasses.replace(analyze(snapshot), verdicts=snapshot.verdicts)


# --------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------


def test_fixture_snapshot_is_the_synthetic_job() -> None:
    # GIVEN the synthetic 2-node x 2-rank job the browser test renders
    expected = rank_gated_job(JobShape()).to_json(indent=1) + "\n"
    if REGEN:
        FIXTURE.write_text(expected, encoding="utf-8")
    # THEN the saved fixture is exactly that job (SLURMDIAG_REGEN_GOLDEN=1 rewrites it)
    assert FIXTURE.read_text(encoding="utf-8") == expected


def test_banner_names_the_culprit_with_site_source_and_next_step() -> None:
    # GIVEN a job where rank 3 skipped the all_reduce, with the source of its site readable
    snapshot = rank_gated_job(JobShape())
    site = snapshot.verdicts[0].sites[0]
    # WHEN the report is rendered
    page = parse(render_html(snapshot, pinned(snapshot), source_lines={site: "    dist.barrier()"}))
    # THEN the first banner is the critical verdict naming rank 3, linked to its row
    banners = page.find_all("div", cls="verdict")
    assert [b.attrs["data-kind"] for b in banners] == ["divergent_collective", "gpu_query_error"]
    critical = banners[0]
    assert "sev-critical" in critical.classes
    assert critical.attrs["data-culprits"] == "3"
    culprits = critical.find("dd", cls="culprits")
    assert [a.attrs["href"] for a in culprits.find_all("a")] == ["#rank-3"]
    assert "node002" in culprits.text()
    sites = critical.find("dd", cls="sites")
    assert sites.find("code", cls="source").text() == "dist.barrier()"
    assert "every rank" in critical.find("dd", cls="next").text()
    assert len(critical.find("ul", cls="evidence").find_all("li")) == 3


def test_job_facts_list_the_job() -> None:
    snapshot = rank_gated_job(JobShape())
    page = parse(render_html(snapshot, pinned(snapshot)))
    facts = {
        div.find("dt").text(): div.find("dd").text()
        for div in page.find("dl", cls="facts").find_all("div")
    }
    assert facts["Job"] == "4242"
    assert facts["Nodes"] == "node[001-002] (2)"
    assert facts["User"] == "alice"
    assert facts["Ranks"] == "4 seen of world size 4"
    for label in ("Start", "Run time", "Snapshot", "slurmdiag", "Transport"):
        assert facts[label]


def test_every_rank_and_node_has_an_anchor_and_every_link_resolves() -> None:
    snapshot = rank_gated_job(JobShape())
    page = parse(render_html(snapshot, pinned(snapshot)))
    ids = [el.attrs["id"] for el in page.iter() if "id" in el.attrs]
    assert len(ids) == len(set(ids)), "duplicate ids"
    for rank in range(4):
        assert f"rank-{rank}" in ids
    assert {"node-node001", "node-node002"} <= set(ids)
    for link in page.find_all("a"):
        href = link.attrs["href"]
        assert href.startswith("#"), f"external link {href}"
        assert href[1:] in ids, f"dangling link {href}"


def test_classes_table_has_one_row_per_class_and_the_tree_branches() -> None:
    snapshot = rank_gated_job(JobShape())
    analysis = pinned(snapshot)
    page = parse(render_html(snapshot, analysis))
    rows = page.find("table", cls="classes").find_all("tr", cls="class-row")
    assert len(rows) == len(analysis.classes) == 2
    culprit_row = page.find("tr", id="class-1")
    assert culprit_row.find_all("span", cls="culprit")
    assert culprit_row.find_all("span", cls="stationary")
    # the innermost frame shows; library frames fold into <details class="lib">
    assert culprit_row.find_all("details", cls="lib")
    user_frames = [f.text() for f in culprit_row.find_all("div", cls="user")]
    assert any("train_step" in text for text in user_frames)
    tree = page.find("div", cls="tree")
    top = [el for el in tree.children if isinstance(el, El) and "seg" in el.classes]
    assert len(top) == 1
    branches = [el for el in top[0].children if isinstance(el, El) and "seg" in el.classes]
    assert [b.find("div", cls="seg-head").find("span", cls="mono").text() for b in branches] == [
        "0-2", "3"]


def test_identical_nodes_collapse_into_one_row_with_a_node_set() -> None:
    # GIVEN 16 nodes: rank 3 (node002) is the culprit, node006 timed out, node013 has a hot GPU
    snapshot = rank_gated_job(JobShape(nodes=16, failed_nodes=(5,), hot_gpu_nodes=(12,)))
    page = parse(render_html(snapshot, pinned(snapshot)))
    # THEN the healthy look-alikes are one row (node016's GPU answered [Unknown Error]: its own)
    groups = page.find_all("tr", cls="group-row")
    assert len(groups) == 1
    assert groups[0].find("b", cls="nodeset").text() == "node[001,003-005,007-012,014-015]"
    assert groups[0].find("td", cls="num").text() == "12"
    # AND the nodes that stand out have their own sections, the failed one first with its message
    sections = page.find_all("section", cls="node")
    assert [s.attrs["id"] for s in sections] == [
        "node-node006", "node-node002", "node-node013", "node-node016"]
    assert "failed" in sections[0].classes
    assert "no answer from the collector" in sections[0].find("div", cls="failmsg").text()
    # AND collapsed nodes and their ranks can still be linked to
    ids = {el.attrs["id"] for el in page.iter() if "id" in el.attrs}
    assert {"node-node001", "node-node015", "rank-0", "rank-29"} <= ids
    # AND the collapsed ranks have no rows of their own
    rank_rows = {r.attrs["id"] for r in page.find_all("tr", cls="rank-row")}
    assert rank_rows == {f"rank-{r}" for r in (2, 3, 24, 25, 30, 31)}


def test_gpu_thresholds_colour_cells_and_keep_bracketed_values() -> None:
    hot = Gpu(index=0, name="H100", utilization_gpu=100.0, memory_used_mib=80000.0,
              memory_total_mib=81559.0, temperature_c=91.0, clocks_event_reasons="0x48",
              ecc_uncorrected_volatile=2.0, remapped_pending="Yes",
              raw={"power.draw": "[Unknown Error]", "fan.speed": "[N/A]", "serial": "[Unknown Error]"})
    cells = dict(zip(render._GPU_HEADER, gpu_cells(hot)))
    assert cells["util"].level == "busy"
    assert cells["memory"].level == "warn"
    assert cells["temp"].level == "bad"
    assert cells["throttle"].text == "HwSlowdown, HwThermalSlowdown"
    assert cells["throttle"].level == "bad"
    assert cells["ECC uncorr."].level == "bad"
    assert cells["pending retire/remap"].level == "bad"
    assert (cells["power"].text, cells["power"].level) == ("[Unknown Error]", "warn")
    assert cells["other raw"].text == "fan.speed: [N/A]; serial: [Unknown Error]"
    cool = Gpu(index=1, utilization_gpu=0.0, temperature_c=40.0, clocks_event_reasons="0x1")
    cells = dict(zip(render._GPU_HEADER, gpu_cells(cool)))
    assert (cells["util"].level, cells["temp"].level) == ("info", "ok")
    assert (cells["throttle"].text, cells["throttle"].level) == ("GpuIdle", "info")


def test_hostile_strings_are_text_not_markup() -> None:
    # GIVEN markup in a thread name, a file path, an env value and the job name
    snapshot = with_hostile_strings(rank_gated_job(JobShape()))
    page = parse(render_html(snapshot, pinned(snapshot)))
    # THEN nothing became an element ...
    assert not page.find_all("script")
    assert not page.find_all("img")
    assert not [b for b in page.find_all("b") if b.text() == "\"x\" & 'y'"]
    assert not [el for el in page.iter() if any(k.startswith("on") for k in el.attrs)]
    # ... and each shows as the literal text
    thread_names = {el.text() for el in page.find_all("span", cls="thread-name")}
    assert HOSTILE_THREAD in thread_names
    env_values = [td.text() for table in page.find_all("table", cls="env")
                  for td in table.find_all("td")]
    assert HOSTILE_ENV in env_values
    assert HOSTILE_JOB_NAME in page.find("title").text()
    assert HOSTILE_JOB_NAME in page.find("h1").text()
    locations = {el.text() for el in page.find_all("span", cls="loc")}
    assert f"{HOSTILE_DIR}/launch.py:7" in locations


def test_hostile_strings_in_attributes_stay_inside_the_attribute() -> None:
    snapshot = with_hostile_strings(rank_gated_job(JobShape()))
    snapshot = dataclasses.replace(snapshot, nodes=tuple(
        dataclasses.replace(node, name=f'{node.name}" onmouseover="alert(1)') for node in snapshot.nodes))
    page = parse(render_html(snapshot, pinned(snapshot)))
    assert not [el for el in page.iter() if any(k.startswith("on") for k in el.attrs)]
    ids = {el.attrs["id"] for el in page.iter() if "id" in el.attrs}
    assert 'node-node001"_onmouseover="alert(1)' in ids


def test_page_is_self_contained() -> None:
    snapshot = rank_gated_job(JobShape())
    page = parse(render_html(snapshot, pinned(snapshot)))
    assert not page.find_all("script")
    assert not page.find_all("link")
    for el in page.iter():
        for name in ("src", "href", "action"):
            assert not el.attrs.get(name, "#").split("#")[0], f"<{el.tag} {name}=...> fetches"
    csp = page.find("meta", http_equiv="Content-Security-Policy").attrs["content"]
    assert "default-src 'none'" in csp
    assert page.find_all("style")


def test_no_verdict_and_no_stacks_still_render() -> None:
    snapshot = Snapshot(job=Job(id="7", state="RUNNING"),
                        nodes=(Node(name="n1", status="unreachable", message="ssh: no route"),))
    page = parse(render_html(snapshot, Analysis()))
    banner = page.find("div", cls="verdict")
    assert banner.attrs["data-kind"] == "none"
    assert page.find("section", id="node-n1").find("div", cls="failmsg").text() == "ssh: no route"
    assert not page.find("table", cls="classes").find_all("tr", cls="class-row")


def test_scale_4096_nodes_stays_small_and_linkable() -> None:
    # GIVEN 512 nodes x 8 ranks (the 4096-node figures are in bench/bench_report.py)
    snapshot = rank_gated_job(JobShape(nodes=512, ranks_per_node=8, gpus_per_node=8,
                                       culprit=2000, failed_nodes=(7,)))
    html = render_html(snapshot, pinned(snapshot))
    page = parse(html)
    # THEN the look-alikes are one row, only the standing-out nodes get sections
    assert len(page.find_all("tr", cls="group-row")) == 1
    assert len(page.find_all("section", cls="node")) == 3  # node008, culprit node251, node512
    ids = {el.attrs["id"] for el in page.iter() if "id" in el.attrs}
    present = {r.rank for _, r in snapshot.all_ranks()}
    assert {f"rank-{r}" for r in present} <= ids
    assert len(html) < 512 * 8 * 200  # a few hundred bytes per rank at most


def test_write_report_is_atomic_with_the_mode_asked(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    target.write_text("old", encoding="utf-8")
    written = write_report("<p>new</p>", target)
    assert written == target
    assert target.read_text(encoding="utf-8") == "<p>new</p>"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    write_report("<p>again</p>", target, mode=0o600)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]


def test_write_report_failure_keeps_the_old_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    target.write_text("old", encoding="utf-8")
    with pytest.raises(TypeError):
        write_report(b"not text", target)  # type: ignore[arg-type]
    assert target.read_text(encoding="utf-8") == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]


def test_read_source_lines_reads_regular_files_only(tmp_path: Path) -> None:
    source = tmp_path / "train.py"
    source.write_text("import torch\n\n    dist.barrier()\n", encoding="utf-8")
    fifo = tmp_path / "fifo.py"
    os.mkfifo(fifo)
    found = read_source_lines([(str(source), 3), (str(source), 1), (str(fifo), 1),
                               (str(tmp_path / "gone.py"), 2), (str(source), None)],
                              owner_uid=os.geteuid())
    assert found == {f"{source}:3": "    dist.barrier()", f"{source}:1": "import torch"}


def test_render_report_file_re_renders_a_saved_snapshot(tmp_path: Path) -> None:
    # GIVEN a saved snapshot WHEN `slurmdiag report` re-renders it
    out = render.render_report_file(FIXTURE, tmp_path / "r.html")
    # THEN the page carries the analysis' verdicts (computed afresh, not read from the file)
    page = parse(out.read_text(encoding="utf-8"))
    kinds = [b.attrs["data-kind"] for b in page.find_all("div", cls="verdict")]
    snapshot = Snapshot.from_json(FIXTURE.read_text(encoding="utf-8"))
    expected = [v.kind for v in render.ordered_verdicts(analyze(snapshot))]
    assert kinds == expected
    assert stat.S_IMODE(out.stat().st_mode) == 0o640


@pytest.mark.parametrize("mode", ["gated", "sleep", "spin", "healthy"])
def test_real_gloo_snapshots_render_with_their_verdicts(mode: str) -> None:
    # GIVEN a snapshot recorded from a real hung gloo job (real py-spy, strace, /proc)
    path = REPO / "tests" / "fixtures" / "py_spy" / f"local_gloo_{mode}_snapshot.json"
    if not path.exists():
        pytest.skip(f"{path} is not in this checkout")
    snapshot = Snapshot.from_json(path.read_text(encoding="utf-8"))
    analysis = analyze(snapshot)
    # WHEN rendered
    page = parse(render_html(snapshot, analysis))
    # THEN each verdict has its banner with its culprits, and every link lands on an anchor
    banners = page.find_all("div", cls="verdict")
    assert [(b.attrs["data-kind"], b.attrs["data-culprits"]) for b in banners] == [
        (v.kind, render._ranges(v.culprit_ranks)) for v in render.ordered_verdicts(analysis)]
    ids = [el.attrs["id"] for el in page.iter() if "id" in el.attrs]
    assert len(ids) == len(set(ids))
    assert {a.attrs["href"][1:] for a in page.find_all("a")} <= set(ids)
    assert len(page.find_all("tr", cls="rank-row")) == len(snapshot.nodes[0].ranks)


def test_a_node_section_says_what_the_collector_cost_the_node() -> None:
    # GIVEN a job whose first node's collector measured its own CPU
    snapshot = rank_gated_job(JobShape())
    first = dataclasses.replace(snapshot.nodes[0], collector_cpu_s=0.0123)
    snapshot = dataclasses.replace(snapshot, nodes=(first, *snapshot.nodes[1:]))
    # THEN its section says so, in milliseconds; a node without the figure shows no such fact
    page = render_html(snapshot, pinned(snapshot))
    assert page.count("collector CPU") == 1 and "12 ms" in page


def test_a_rank_whose_last_sample_was_kept_says_so() -> None:
    # GIVEN rank 0's last sample kept by the collector (none of its threads ran since sample 1)
    snapshot = rank_gated_job(JobShape())
    node = snapshot.nodes[0]
    rank = node.ranks[0]
    kept = dataclasses.replace(rank.samples[-1], same_as=0)
    rank = dataclasses.replace(rank, samples=(*rank.samples[:-1], kept))
    node = dataclasses.replace(node, ranks=(rank, *node.ranks[1:]))
    snapshot = dataclasses.replace(snapshot, nodes=(node, *snapshot.nodes[1:]))
    # WHEN the report is rendered THEN its detail says the sample is the first one again
    html = render_html(snapshot, pinned(snapshot))
    assert f"last of {len(rank.samples)} samples" in html
    assert "the same as sample 1: none of its threads ran since" in html
    # AND a rank whose samples were all read says nothing of the kind
    assert html.count("none of its threads ran since") == 1
