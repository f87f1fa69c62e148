"""Golden tests of the terminal summary; SLURMDIAG_REGEN_GOLDEN=1 rewrites tests/golden/*.txt."""

from __future__ import annotations

import dataclasses
import io
import os
from pathlib import Path

import pytest
from support.synthetic import JobShape, rank_gated_job, with_hostile_strings

from slurmdiag.analysis import analyze
from slurmdiag.analysis.model import Analysis
from slurmdiag.report.terminal import clean, format_summary, should_color
from slurmdiag.snapshot import Job, Node, Snapshot

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
REGEN = os.environ.get("SLURMDIAG_REGEN_GOLDEN") == "1"


def check_golden(name: str, lines: list[str]) -> None:
    path = GOLDEN / name
    text = "\n".join(lines) + "\n"
    if REGEN:
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"{path} missing: run with SLURMDIAG_REGEN_GOLDEN=1 and review it"
    assert text == path.read_text(encoding="utf-8")


def pinned(snapshot: Snapshot) -> Analysis:
    """The real analysis with the snapshot's fixed verdicts, so goldens do not follow its wording."""
    return dataclasses.replace(analyze(snapshot), verdicts=snapshot.verdicts)


def test_summary_of_a_rank_gated_hang() -> None:
    # GIVEN the 2-node x 2-rank job where rank 3 skipped the all_reduce
    snapshot = rank_gated_job(JobShape())
    # WHEN the summary is formatted for a pipe
    lines = format_summary(snapshot, pinned(snapshot), color=False, report_path="/tmp/r.html")
    # THEN verdicts come first, then the class table, then the path
    check_golden("summary_rank_gated.txt", lines)
    assert lines[2].startswith("CRITICAL divergent_collective")
    assert lines[-1] == "Report: /tmp/r.html"
    assert not any("\x1b" in line for line in lines)


def test_summary_in_colour() -> None:
    snapshot = rank_gated_job(JobShape())
    lines = format_summary(snapshot, pinned(snapshot), color=True, report_path="/tmp/r.html")
    check_golden("summary_rank_gated_color.txt", lines)
    assert lines[2].startswith("\x1b[1;31mCRITICAL\x1b[0m")


def test_summary_at_scale_with_failed_nodes() -> None:
    # GIVEN 64 nodes: three timed out, three load data, one hot GPU, rank 5's process is gone
    snapshot = rank_gated_job(JobShape(nodes=64, ranks_per_node=8, gpus_per_node=8, culprit=100,
                                       failed_nodes=(3, 40, 41), moving_nodes=(9, 10, 11),
                                       hot_gpu_nodes=(20,)))
    first = snapshot.nodes[0]
    first = dataclasses.replace(first, ranks=tuple(r for r in first.ranks if r.rank != 5))
    snapshot = dataclasses.replace(snapshot, nodes=(first,) + snapshot.nodes[1:])
    lines = format_summary(snapshot, pinned(snapshot), color=False, report_path=None)
    check_golden("summary_scale.txt", lines)
    # THEN identical failures are merged over their host set and missing ranks are named
    assert "  node timeout on node[004,041-042] (3 nodes): no answer from the collector within " \
        "30.0 s (srun step on <node>)" in lines
    assert "  missing ranks (no process on their node): 5" in lines
    assert not any(line.startswith("Report:") for line in lines)


def test_summary_without_verdicts_or_stacks() -> None:
    snapshot = Snapshot(job=Job(id="7", state="RUNNING"),
                        nodes=(Node(name="n1", status="unreachable", message="ssh: no route"),))
    check_golden("summary_empty.txt",
                 format_summary(snapshot, Analysis(), color=False, report_path="r.html"))


def test_summary_escapes_control_characters_from_the_job() -> None:
    # GIVEN a job name and a failure message carrying terminal escape sequences
    snapshot = with_hostile_strings(rank_gated_job(JobShape(nodes=3, failed_nodes=(2,))))
    snapshot = dataclasses.replace(
        snapshot,
        job=dataclasses.replace(snapshot.job, name="x\x1b[2J\x1b]0;pwned\x07"),
        nodes=snapshot.nodes[:2] + (dataclasses.replace(snapshot.nodes[2], message="bad\rfake ok"),),
    )
    lines = format_summary(snapshot, pinned(snapshot), color=False, report_path="r\x1b.html")
    text = "\n".join(lines)
    # THEN no control character reaches the terminal, and the text is still readable
    assert not any(ord(ch) < 32 and ch != "\n" for ch in text)
    assert "x\\x1b[2J\\x1b]0;pwned\\x07" in lines[0]
    assert any("bad\\x0dfake ok" in line for line in lines)


def test_clean_keeps_printable_unicode() -> None:
    assert clean("train.py · ünïcode → ok") == "train.py · ünïcode → ok"
    assert clean("a\tb\x9bc") == "a\\x09b\\x9bc"


class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


@pytest.mark.parametrize(
    ("tty", "environ", "expected"),
    [
        (True, {}, True),
        (False, {}, False),
        (True, {"NO_COLOR": "1"}, False),
        (True, {"NO_COLOR": ""}, True),  # no-color.org: set *and non-empty*
        (False, {"FORCE_COLOR": "1"}, True),
        (False, {"FORCE_COLOR": ""}, True),
        (False, {"FORCE_COLOR": "0"}, False),
        (True, {"NO_COLOR": "1", "FORCE_COLOR": "1"}, False),
        (True, {"TERM": "dumb"}, False),
    ],
)
def test_should_color(tty: bool, environ: dict[str, str], expected: bool) -> None:
    assert should_color(_Stream(tty), environ) is expected


def test_should_color_on_a_closed_stream() -> None:
    stream = io.StringIO()
    stream.close()
    assert should_color(stream, {}) is False


def test_the_terminal_summary_does_not_load_jinja2() -> None:
    # GIVEN a fresh interpreter WHEN the terminal summary's module is imported
    import subprocess
    import sys

    code = "import sys, slurmdiag.report.terminal; print('jinja2' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    # THEN the HTML template engine is not loaded (it comes with the first rendered page)
    assert done.stdout.strip() == "False"


def test_an_array_task_is_named_as_squeue_shows_it() -> None:
    # GIVEN an array task whose job id (2) is not its array form (1_0)
    snapshot = rank_gated_job(JobShape())
    snapshot = dataclasses.replace(snapshot, job=dataclasses.replace(
        snapshot.job, id="2", array_job_id="1", array_task_id="0"))
    # THEN the header names the task as 1_0, its job id after it
    header = format_summary(snapshot, pinned(snapshot), color=False, report_path=None)[0]
    assert header.startswith("slurmdiag: job 1_0 (job id 2)")


@pytest.mark.parametrize(("quiet_s", "said"), [(None, None), (59.0, None), (75.0, "output quiet 1m15s"),
                                               (2832.0, "output quiet 47m")])
def test_the_header_says_a_minute_or_more_of_silent_output(quiet_s, said) -> None:
    # GIVEN the job's output files last written quiet_s before the look ended
    snapshot = rank_gated_job(JobShape())
    snapshot = dataclasses.replace(snapshot, job=dataclasses.replace(snapshot.job,
                                                                     output_quiet_s=quiet_s))
    header = format_summary(snapshot, pinned(snapshot), color=False, report_path=None)[0]
    # THEN the header says it from a minute on, after the run time, and not before
    parts = header.split(" · ")
    if said is None:
        assert not any(p.startswith("output quiet") for p in parts), header
    else:
        assert parts[parts.index(said) - 1].startswith("running "), header
