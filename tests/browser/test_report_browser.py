"""The HTML report in a real headless browser (Debian chromium): it renders, names the culprit,
logs nothing to the console, and hostile strings stay text.

Each snapshot in ``SNAPSHOTS`` gets the hostile strings added (a thread named
``<script>alert(1)</script>``, paths and env values with ``< " ' &``, markup as the job name),
is analysed by the real analysis, rendered, opened from file:// with ``--dump-dom``, and
screenshotted. The page, the DOM chromium built, its log and the screenshot are kept in
``artifacts/report_browser/`` (gitignored) for a person to look at.

An ``alert()`` that ran would block ``--dump-dom`` until the timeout: that fails the test too.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest
from support.synthetic import (
    HOSTILE_ENV,
    HOSTILE_JOB_NAME,
    HOSTILE_THREAD,
    with_hostile_strings,
)

from slurmdiag.analysis import analyze
from slurmdiag.hostlist import format_int_ranges
from slurmdiag.report.render import render_html, write_report
from slurmdiag.snapshot import Snapshot

CHROMIUM = shutil.which("chromium") or (
    "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None
)
if CHROMIUM is None:
    pytest.skip(
        "chromium not found: the report browser tests need Debian's chromium "
        "(apt-get install -y chromium)",
        allow_module_level=True,
    )

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "artifacts" / "report_browser"
#: Snapshots whose reports are opened in the browser. The synthetic one looks like the local
#: 2-node x 2-rank rank-gated scenario; the gloo one is a real hung job recorded with real tools.
SNAPSHOTS = {
    "synthetic_rank_gated": REPO / "tests" / "fixtures" / "snapshots" / "synthetic_rank_gated.json",
    "local_gloo_gated": REPO / "tests" / "fixtures" / "py_spy" / "local_gloo_gated_snapshot.json",
}
HOSTILE_SOURCE = "if rank == 0 and '<b>' in tag: dist.barrier()  # </code><script>alert(2)</script>"
CHROMIUM_TIMEOUT_S = 90.0
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars",
)


def run_chromium(*args: str) -> subprocess.CompletedProcess[str]:
    """Run chromium headless in its own session with a fresh profile; kill all of it on timeout."""
    assert CHROMIUM is not None
    with tempfile.TemporaryDirectory(prefix="slurmdiag-chromium-") as profile:
        argv = [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   start_new_session=True)
        try:
            stdout, stderr = process.communicate(timeout=CHROMIUM_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            pytest.fail(f"chromium did not finish in {CHROMIUM_TIMEOUT_S} s (a dialog such as "
                        f"alert() blocks it): {' '.join(argv)}")
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


def console_lines(stderr: str) -> list[str]:
    """What the page wrote to the console (chromium logs it as ``INFO:CONSOLE``)."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


class Dom(HTMLParser):
    """The facts the tests need from the DOM chromium dumped."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.event_handlers: list[str] = []
        self.banners: list[dict[str, str]] = []
        self.ids: set[str] = set()
        self.texts: dict[str, list[str]] = {}  # class -> texts of elements with that class
        self._open: list[tuple[str, str | None]] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        self.tags.append(tag)
        self.event_handlers += [k for k in values if k.startswith("on")]
        if "id" in values:
            self.ids.add(values["id"])
        classes = values.get("class", "").split()
        if "verdict" in classes:
            self.banners.append(values)
        watched = next((c for c in classes if c in ("thread-name", "summary", "culprits", "source")),
                       None)
        if tag not in ("meta", "img", "br", "input", "link"):
            self._open.append((tag, watched))
            if watched:
                self.texts.setdefault(watched, []).append("")

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            open_tag, _ = self._open.pop()
            if open_tag == tag:
                break

    def handle_data(self, data: str) -> None:
        for _, watched in self._open:
            if watched:
                self.texts[watched][-1] += data
        self.texts.setdefault("*", []).append(data)


@pytest.fixture(params=sorted(SNAPSHOTS), ids=sorted(SNAPSHOTS))
def snapshot_path(request: pytest.FixtureRequest) -> Path:
    path = SNAPSHOTS[request.param]
    if not path.exists():
        pytest.skip(f"{path} is not in this checkout")
    return path


def render_hostile(snapshot_path: Path) -> tuple[Path, Snapshot, list[int]]:
    """Render the snapshot with hostile strings into artifacts/; return page, snapshot, culprits."""
    snapshot = with_hostile_strings(Snapshot.from_json(snapshot_path.read_text(encoding="utf-8")))
    analysis = analyze(snapshot)
    assert analysis.verdicts, "the scenario should produce a verdict"
    sites = {site: HOSTILE_SOURCE for verdict in analysis.verdicts for site in verdict.sites}
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page = write_report(render_html(snapshot, analysis, source_lines=sites),
                        ARTIFACTS / f"{snapshot_path.stem}.html")
    return page, snapshot, sorted(analysis.verdicts[0].culprit_ranks)


def test_report_renders_in_chromium_without_console_errors(snapshot_path: Path) -> None:
    # GIVEN the report of a hung job whose snapshot carries hostile strings
    page, snapshot, culprits = render_hostile(snapshot_path)
    # WHEN chromium loads it from file:// and dumps the DOM it built
    done = run_chromium("--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri())
    (ARTIFACTS / f"{page.stem}.dom.html").write_text(done.stdout, encoding="utf-8")
    (ARTIFACTS / f"{page.stem}.chromium.log").write_text(done.stderr, encoding="utf-8")
    assert done.returncode == 0, done.stderr[-2000:]
    dom = Dom(done.stdout)
    # THEN the page logged nothing (no script error, no blocked fetch, no CSP violation)
    assert console_lines(done.stderr) == []
    # AND no script element or event handler exists: nothing could have executed
    assert "script" not in dom.tags
    assert "img" not in dom.tags
    assert dom.event_handlers == []
    # AND the hostile strings are there as literal text
    assert HOSTILE_THREAD in dom.texts["thread-name"]
    all_text = "".join(dom.texts["*"])
    assert HOSTILE_ENV in all_text
    assert HOSTILE_JOB_NAME in all_text
    assert HOSTILE_SOURCE in dom.texts["source"]
    # AND the first banner names the culprit, each one linked to its rank row
    assert dom.banners[0]["data-culprits"] == format_int_ranges(culprits)
    assert all(str(rank) in dom.texts["culprits"][0] for rank in culprits)
    assert {f"rank-{rank}" for rank in culprits} <= dom.ids
    assert {f"node-{node.name}" for node in snapshot.nodes} <= dom.ids


def test_report_screenshot_is_saved(snapshot_path: Path) -> None:
    page, _, _ = render_hostile(snapshot_path)
    screenshot = ARTIFACTS / f"{page.stem}.png"
    screenshot.unlink(missing_ok=True)
    done = run_chromium(f"--screenshot={screenshot}", "--window-size=1400,2000", page.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    data = screenshot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(data) > 20_000, "a blank page compresses far smaller than a rendered report"


def test_console_check_sees_a_script_the_policy_blocked(tmp_path: Path) -> None:
    # GIVEN a report into which a script was smuggled past the escaping (as a bug would)
    page, _, _ = render_hostile(SNAPSHOTS["synthetic_rank_gated"])
    html = page.read_text(encoding="utf-8").replace(
        "</body>", "<script>console.log('ran')</script></body>")
    smuggled = tmp_path / "smuggled.html"
    smuggled.write_text(html, encoding="utf-8")
    # WHEN chromium loads it
    done = run_chromium("--enable-logging=stderr", "--v=0", "--dump-dom", smuggled.as_uri())
    # THEN the page's Content-Security-Policy blocked it, and the console check above would see it
    lines = console_lines(done.stderr)
    assert any("Content Security Policy" in line for line in lines), done.stderr[-2000:]
    assert not any('"ran"' in line for line in lines)


@pytest.mark.cluster
def test_report_of_a_real_attach_renders_and_names_the_culprit(scenario_run, tmp_path: Path) -> None:
    # GIVEN the report `slurmdiag attach` wrote for a real hung job on the local cluster
    from slurmdiag.api import attach_job

    run = scenario_run("rank_gated_collective")
    result = attach_job(run.job_id, out_dir=tmp_path / "attach")
    page = Path(result.snapshot.report or "")
    assert page.exists()
    # WHEN chromium loads it from file://
    done = run_chromium("--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    dom = Dom(done.stdout)
    # THEN nothing went to the console, and the first banner names the scenario's culprit
    assert console_lines(done.stderr) == []
    assert dom.banners[0]["data-culprits"] == format_int_ranges(run.truth["culprit_ranks"])
    site_file = Path(run.truth["culprit_site"].split(":")[0]).name
    assert any(site_file in text for text in dom.texts["source"] + dom.texts["*"])
    # AND a screenshot is kept as a test artifact
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    screenshot = ARTIFACTS / "real_rank_gated_collective.png"
    shot = run_chromium(f"--screenshot={screenshot}", "--window-size=1400,2000", page.as_uri())
    assert shot.returncode == 0 and screenshot.read_bytes().startswith(b"\x89PNG")


def test_a_probe_report_draws_its_matrix_and_keeps_hostile_strings_as_text(tmp_path: Path) -> None:
    # GIVEN a real probe of four namespaced nodes (a blackholed route between nsnode1 and
    # nsnode2) whose interface choice and error texts carry markup
    import dataclasses

    snapshot = Snapshot.from_json(
        (REPO / "tests" / "fixtures" / "snapshots" / "probe_netns_blackhole_nsnode1_nsnode2.json")
        .read_text(encoding="utf-8"))
    probe = snapshot.probe
    assert probe is not None
    hostile = "<script>alert(3)</script>"
    probe = dataclasses.replace(
        probe,
        nodes=tuple(dataclasses.replace(n, chosen_by=hostile) for n in probe.nodes),
        links=tuple(dataclasses.replace(x, error=f"{x.error} {hostile}") if x.error else x
                    for x in probe.links))
    snapshot = dataclasses.replace(snapshot, probe=probe)
    page = write_report(render_html(snapshot, analyze(snapshot)), tmp_path / "probe.html")
    # WHEN chromium loads it
    done = run_chromium("--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    dom = Dom(done.stdout)
    # THEN nothing ran or was blocked, the matrix is there with the two failed cells
    assert console_lines(done.stderr) == []
    assert "script" not in dom.tags and dom.event_handlers == []
    assert "probe" in dom.ids
    assert done.stdout.count('class="pm-fail num"') == 2
    assert dom.banners[0]["data-kind"] == "probe_bad_link"
    assert hostile in "".join(dom.texts["*"])
