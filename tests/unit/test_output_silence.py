"""How long the job's output files have been silent: read from the files, said with the verdict.

Real input: the files are real files of this machine (their mtime set back, as an hour of a
hung job's silence leaves them); the looks are recorded ones (tests/fixtures/accuracy:
`spinning_rank.look.json`, rank 3 in its endless loop; `slow_but_moving.default.json`, a
healthy job in and out of its all_reduce), their job given a silence.
"""

from __future__ import annotations

import dataclasses
import os
import pwd
import time
from pathlib import Path

import pytest
from test_report_html import parse, pinned

from slurmdiag.analysis import diagnose
from slurmdiag.config import output_silence
from slurmdiag.logs import output_quiet_s
from slurmdiag.report.render import render_html
from slurmdiag.snapshot import Job, Snapshot

ACCURACY = Path(__file__).resolve().parent.parent / "fixtures" / "accuracy"
ME = pwd.getpwuid(os.getuid()).pw_name


def recorded(name: str, quiet: float | None) -> Snapshot:
    snapshot = Snapshot.from_json((ACCURACY / name).read_text())
    job = dataclasses.replace(snapshot.job, stdout="/scratch/alice/job-77.out",
                              output_quiet_s=quiet)
    return dataclasses.replace(snapshot, job=job)


def written(path: Path, seconds_ago: float) -> Path:
    path.write_text("[rank 0/4] step 3 loss 0.1234\n")
    then = time.time() - seconds_ago
    os.utime(path, (then, then))
    return path


def test_the_silence_is_the_newest_of_stdout_and_stderr(tmp_path):
    out = written(tmp_path / "job.out", 3600)
    err = written(tmp_path / "job.err", 600)
    quiet = output_quiet_s(Job(id="77", state="RUNNING", user=ME, stdout=str(out), stderr=str(err)))
    assert quiet is not None and 600 <= quiet < 605


def test_one_file_unreadable_the_other_counts(tmp_path):
    out = written(tmp_path / "job.out", 3600)
    job = Job(id="77", state="RUNNING", user=ME, stdout=str(out), stderr=str(tmp_path / "gone.err"))
    quiet = output_quiet_s(job)
    assert quiet is not None and 3600 <= quiet < 3605


@pytest.mark.parametrize("change", ["no files", "unknown user", "a link", "not a file"])
def test_no_file_that_may_be_read_is_no_silence(tmp_path, change):
    out = written(tmp_path / "job.out", 3600)
    job = Job(id="77", state="RUNNING", user=ME, stdout=str(out))
    if change == "no files":
        job = dataclasses.replace(job, stdout=None)
    elif change == "unknown user":
        job = dataclasses.replace(job, user="no-such-user-here")
    elif change == "a link":
        (tmp_path / "link.out").symlink_to(out)
        job = dataclasses.replace(job, stdout=str(tmp_path / "link.out"))
    else:
        job = dataclasses.replace(job, stdout=str(tmp_path))
    assert output_quiet_s(job) is None


def test_a_file_written_in_the_future_is_silent_for_no_time(tmp_path):
    # GIVEN a clock ahead on the file server: its mtime after our now
    out = written(tmp_path / "job.out", -30)
    assert output_quiet_s(Job(id="77", state="RUNNING", user=ME, stdout=str(out))) == 0.0


@pytest.mark.parametrize(("seconds", "said"), [(75, "1m15s"), (119.6, "2m"), (2820, "47m"),
                                               (3725, "1h2m"), (90000, "1d1h")])
def test_silence_is_said_to_the_second_then_to_the_minute(seconds, said):
    assert output_silence(seconds) == said


def test_a_hang_says_how_long_the_output_has_been_silent():
    verdict = diagnose(recorded("spinning_rank.look.json", 2820.0)).verdicts[0]
    assert verdict.kind == "spinning" and verdict.culprit_ranks == (3,)
    assert ("the job's output (/scratch/alice/job-77.out) was last written 47m before the look "
            "ended: no line from any rank since (unless its ranks hold their prints in a buffer)"
            ) in verdict.evidence


@pytest.mark.parametrize("quiet", [None, 0.0, 59.0])
def test_a_silence_under_a_minute_is_not_said(quiet):
    verdict = diagnose(recorded("spinning_rank.look.json", quiet)).verdicts[0]
    assert verdict.kind == "spinning"
    assert not any("was last written" in e for e in verdict.evidence)


def test_the_silence_never_makes_a_verdict_of_its_own():
    # GIVEN a healthy job whose stacks move, its output silent for two hours (buffered prints)
    silent = diagnose(recorded("slow_but_moving.default.json", 7200.0)).verdicts[0]
    fresh = diagnose(recorded("slow_but_moving.default.json", None)).verdicts[0]
    # THEN it stays progressing, with the contrast and the way out of a buffer said
    assert (silent.kind, silent.severity, silent.summary) == (fresh.kind, fresh.severity, fresh.summary)
    assert silent.kind == "progressing"
    line = silent.evidence[-1]
    assert line.startswith("the job's output (/scratch/alice/job-77.out) was last written 2h before the look ended, although")
    assert "although its stacks move" in line and "flush=True" in line


def test_the_report_lists_when_the_output_was_last_written():
    snapshot = recorded("spinning_rank.look.json", 2820.0)
    page = parse(render_html(snapshot, pinned(snapshot)))
    facts = {div.find("dt").text(): div.find("dd").text()
             for div in page.find("dl", cls="facts").find_all("div")}
    assert facts["Output last written"] == "47m before the look ended"
    unread = recorded("spinning_rank.look.json", None)
    page = parse(render_html(unread, pinned(unread)))
    assert "Output last written" not in page.find("dl", cls="facts").text()
