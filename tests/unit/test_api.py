"""The Python API's own wiring: what loads before the fan-out, and what runs during it."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from slurmdiag import api
from slurmdiag.options import AttachOptions
from slurmdiag.slurm.parse import parse_scontrol_job
from slurmdiag.transport.base import NodeOutcome
from slurmdiag.transport.memory import InMemoryTransport

JOB_TEXT = (
    "JobId=42 JobName=train UserId=alice(1000) GroupId=alice(1000) Priority=1 "
    "JobState=RUNNING Reason=None Dependency=(null) RunTime=00:05:00 TimeLimit=00:30:00 "
    "SubmitTime=2026-11-22T00:00:00 StartTime=2026-11-22T00:00:01 Partition=debug "
    "NodeList=node[001-002] NumNodes=2 NumCPUs=4 NumTasks=4 StdOut=/nonexistent/job-42.out "
    "StdErr=/nonexistent/job-42.out\n"
)


def test_the_fan_out_path_loads_no_snapshot_analysis_or_report_code():
    # GIVEN a fresh interpreter
    probe = (
        "import json, sys, slurmdiag.api\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('slurmdiag', 'jinja2')))))"
    )
    # WHEN it imports the API (what attach needs before srun starts)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout))
    # THEN discovery and the fan-out are there, and none of what comes after it (loaded during
    # the fan-out by attach_job, or on use): a fresh CLI process starts srun sooner
    assert {"slurmdiag.slurm.discover", "slurmdiag.transport.base"} <= loaded
    heavy = {"slurmdiag.snapshot", "slurmdiag.assemble", "slurmdiag.analysis",
             "slurmdiag.report.render", "slurmdiag.report.terminal", "jinja2"}
    assert loaded & heavy == set()


ONE_SAMPLE = AttachOptions(samples=1, strace_s=0)


def _fake_slurm(monkeypatch, transport: InMemoryTransport | None = None):
    """Job 42 on node[001-002] without Slurm; with ``transport``, attach's own choice of
    transport (by options.transport) is replaced by it."""
    monkeypatch.setattr(api, "discover_components", lambda ref, runner: parse_scontrol_job(JOB_TEXT)[:1])
    if transport is not None:
        monkeypatch.setattr(api, "transport_for", lambda options: transport)


def _unreachable(job_id, node, options) -> NodeOutcome:
    return NodeOutcome(node, "unreachable", None, "the collector did not run")


def _nodes_answering(answer) -> InMemoryTransport:
    return InMemoryTransport({"node001": answer, "node002": answer})


def test_meanwhile_runs_in_another_thread_while_the_nodes_are_collected(monkeypatch):
    # GIVEN a fan-out that only returns once the meanwhile work has started
    started = threading.Event()
    seen = {}

    def answer(job_id, node, options):
        seen.setdefault("during_fan_out", started.wait(10))
        return _unreachable(job_id, node, options)

    def meanwhile():
        seen["thread"] = threading.current_thread() is not threading.main_thread()
        started.set()

    _fake_slurm(monkeypatch)
    # WHEN the snapshot is collected with that work to do meanwhile
    snapshot, _ = api.collect_snapshot("42", ONE_SAMPLE, transport=_nodes_answering(answer),
                                       meanwhile=meanwhile)
    # THEN the work ran in its own thread, during the fan-out, and the snapshot is whole
    assert seen == {"during_fan_out": True, "thread": True}
    assert [n.name for n in snapshot.nodes] == ["node001", "node002"]


def test_a_failing_meanwhile_costs_nothing_collected(monkeypatch):
    # GIVEN work meant for the fan-out's wait that fails
    def meanwhile():
        raise ImportError("no module named jinja2")

    _fake_slurm(monkeypatch)
    # WHEN the snapshot is collected
    snapshot, _ = api.collect_snapshot("42", ONE_SAMPLE, transport=_nodes_answering(_unreachable),
                                       meanwhile=meanwhile)
    # THEN the failure is dropped there (redone, and reported, where the work is used)
    assert snapshot.job.id == "42"
    assert [n.status for n in snapshot.nodes] == ["unreachable", "unreachable"]


@pytest.mark.parametrize("report", [True, False])
def test_attach_job_compiles_the_report_during_the_fan_out(monkeypatch, tmp_path, report):
    # GIVEN a fan-out that waits for the report's template to be loaded, if it will be
    from slurmdiag.report import render

    compiled = threading.Event()
    calls = []
    real_load = render.load_template

    def load_template():
        calls.append(threading.current_thread().name)
        compiled.set()
        return real_load()

    def answer(job_id, node, options):
        if node == "node001":
            calls.append(("fan-out saw the template loaded", compiled.wait(10 if report else 0.2)))
        return _unreachable(job_id, node, options)

    _fake_slurm(monkeypatch)
    monkeypatch.setattr(render, "load_template", load_template)
    # WHEN attach_job collects and writes its outputs, with or without the report
    result = api.attach_job("42", ONE_SAMPLE, out_dir=tmp_path, report=report,
                            transport=_nodes_answering(answer))
    # THEN with a report, its template was loaded by the thread that runs during the fan-out
    # (and loaded again, from the process's cache, to render); without one, never
    if report:
        assert calls[0] == "slurmdiag-meanwhile"
        assert ("fan-out saw the template loaded", True) in calls
        assert (tmp_path / "report.html").is_file() and result.snapshot.report
    else:
        assert calls == [("fan-out saw the template loaded", False)]
        assert not (tmp_path / "report.html").exists()


def test_the_verdict_is_handed_over_before_the_outputs_are_written(monkeypatch, tmp_path):
    # GIVEN a job whose nodes answer
    _fake_slurm(monkeypatch)
    seen = []

    def on_verdict(snapshot, analysis):
        seen.append((snapshot.verdicts, analysis.verdicts, (tmp_path / "report.html").exists(),
                     (tmp_path / "snapshot.json").exists()))

    # WHEN attach_job runs with a verdict callback
    result = api.attach_job("42", ONE_SAMPLE, out_dir=tmp_path, transport=_nodes_answering(
        _unreachable), on_verdict=on_verdict)
    # THEN it was called once, with the analysed snapshot, before either file existed
    assert len(seen) == 1
    verdicts, analysed, report_there, snapshot_there = seen[0]
    assert verdicts and verdicts == tuple(analysed) == result.snapshot.verdicts
    assert (report_there, snapshot_there) == (False, False)
    assert (tmp_path / "report.html").is_file() and (tmp_path / "snapshot.json").is_file()


def test_the_cli_prints_the_verdict_before_it_writes_the_report(monkeypatch, tmp_path, capsys):
    # GIVEN the attach command on a job whose nodes answer, and a writer that notes what stdout
    # already held when it began
    from slurmdiag import cli

    recorded = json.loads((Path(__file__).parent.parent / "fixtures" / "collector"
                           / "node001_simple_sleep.json").read_text())
    _fake_slurm(monkeypatch, InMemoryTransport({"node001": recorded,
                                                "node002": _unreachable}))
    real_write = api.write_outputs
    printed_before = []

    def write_outputs(*args, **kwargs):
        printed_before.append(capsys.readouterr().out)
        return real_write(*args, **kwargs)

    monkeypatch.setattr(api, "write_outputs", write_outputs)
    # WHEN it runs
    code = cli.main(["attach", "42", "--samples", "1", "--strace", "0", "--out", str(tmp_path)])
    after = capsys.readouterr().out
    # THEN the summary (the job, the verdict) was out before the outputs were written, and the
    # report's path followed once it was; the exit code is the usual one
    assert code == 0
    assert printed_before and printed_before[0].startswith("slurmdiag: job 42 ")
    assert "Report:" not in printed_before[0]
    assert after.strip() == f"Report: {tmp_path / 'report.html'}"


def test_the_meanwhile_work_waits_for_the_fan_out_to_start(monkeypatch):
    # GIVEN a transport that takes a while to start its fan-out (building srun's command and
    # spawning it), then says it has started
    ran = threading.Event()
    seen = {}

    class SlowToStart(InMemoryTransport):
        def collect(self, job_id, nodes, options, *, het_group=None, progress=None,
                    on_started=None, on_document=None):
            time.sleep(0.3)
            seen["before start"] = ran.is_set()
            assert on_started is not None
            on_started()
            seen["after start"] = ran.wait(10)
            return super().collect(job_id, nodes, options, het_group=het_group, progress=progress,
                                   on_document=on_document)

    _fake_slurm(monkeypatch)
    # WHEN the snapshot is collected with work to do meanwhile
    api.collect_snapshot("42", ONE_SAMPLE, transport=SlowToStart({"node001": _unreachable,
                                                                   "node002": _unreachable}),
                         meanwhile=ran.set)
    # THEN that work began only once the fan-out had started, and then at once
    assert seen == {"before start": False, "after start": True}


def test_run_command_says_when_the_child_runs(tmp_path):
    # GIVEN a command that only ends once the caller has been told it runs
    from slurmdiag.transport.run import run_command

    flag = tmp_path / "told"
    script = f"while [ ! -e {flag} ]; do sleep 0.01; done; echo ended"
    # WHEN run with on_started creating the flag
    told = []
    result = run_command(["sh", "-c", script], 10,
                         on_started=lambda: (told.append(1), flag.touch()))
    # THEN it was told once, while the child ran; a command that cannot start tells nothing
    assert result.ok and result.stdout == "ended\n" and told == [1]
    missing = run_command([str(tmp_path / "no-such-program")], 5, on_started=lambda: told.append(2))
    assert missing.start_error and told == [1]


HET_TEXT = (Path(__file__).parent.parent / "fixtures" / "slurm"
            / "local_22.05_show_job_d_o_het_running.txt").read_text()


def test_a_het_job_is_collected_one_step_a_component_into_one_snapshot(monkeypatch):
    # GIVEN the real het job 5 (5+0 on node002, 5+1 on node003) named by its plain id, the
    # real discovery reading that capture
    from slurmdiag.slurm.discover import discover_components
    from slurmdiag.transport.run import CommandResult

    def scontrol(argv, timeout, **kwargs):  # type: ignore[no-untyped-def]
        out = "slurm-wlm 22.05.8\n" if "--version" in argv else HET_TEXT
        return CommandResult(tuple(argv), 0, out, "")

    components = parse_scontrol_job(HET_TEXT)
    monkeypatch.setattr(api, "discover_components", lambda ref, runner: discover_components(
        ref, scontrol))
    class Answering(InMemoryTransport):  # says each component's nodes answered
        def collect(self, job_id, nodes, options, *, het_group=None, progress=None,
                    on_started=None, on_document=None):
            out = super().collect(job_id, nodes, options, het_group=het_group,
                                  on_started=on_started, on_document=on_document)
            assert progress is not None
            progress(len(nodes), len(nodes))
            return out

    transport = Answering({"node002": _unreachable, "node003": _unreachable},
                          warnings=["a warning"])
    seen, starts = [], []
    # WHEN its snapshot is collected
    snapshot, warnings = api.collect_snapshot(
        "5", ONE_SAMPLE, transport=transport,
        progress=lambda done, total: seen.append((done, total)),
        meanwhile=lambda: starts.append(1))
    # THEN each component had its own collect, through the leader's id and its --het-group
    assert sorted((c.job_id, c.nodes, c.het_group) for c in transport.calls) == [
        ("5", ("node002",), ("5", 0)), ("6", ("node003",), ("5", 1))]
    assert [c.het_job_offset for c in components] == [0, 1]
    # AND one snapshot holds every component's nodes, as the whole job (no offset)
    assert [n.name for n in snapshot.nodes] == ["node002", "node003"]
    assert (snapshot.job.id, snapshot.job.het_job_id, snapshot.job.het_job_offset) == ("5", "5", None)
    assert sorted(warnings) == ["5+0: a warning", "5+1: a warning"]
    # AND the live line counts the whole job's nodes, each component's answers added up
    assert sorted(seen) == [(1, 2), (2, 2)] and starts == [1]
