"""Diagnosis from real attaches: the verdict names the culprit ranks, site and kind of every scenario."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from accuracy import site_matches
from scenarios.launch import load_truth, suite_scenarios

from slurmdiag.analysis.verdicts import _rank_endpoints
from slurmdiag.api import attach_job
from slurmdiag.options import AttachOptions

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
HANG_SEVERITIES = ("critical", "warning")
SUITE = suite_scenarios()
HANG_SCENARIOS = [n for n in SUITE if load_truth(n)["expected_kind"] != "progressing"]
NO_HANG_SCENARIOS = [n for n in SUITE if n not in HANG_SCENARIOS]

# The scenario_run fixture submits every scenario the selected tests name, together, at the
# start of the session (not the whole suite when a few tests are selected: ~210 MB a rank).


def top_verdict(snapshot):
    hangs = [v for v in snapshot.verdicts if v.severity in HANG_SEVERITIES]
    assert hangs, [(v.kind, v.severity, v.summary) for v in snapshot.verdicts]
    return hangs[0]


@pytest.mark.parametrize("samples", [None, 1], ids=["defaults", "samples1"])
@pytest.mark.parametrize("scenario", HANG_SCENARIOS)
def test_verdict_names_culprit_ranks_site_and_kind(scenario_run, scenario, samples):
    # GIVEN a real hung job with a written ground truth
    run = scenario_run(scenario)
    truth = run.truth
    # WHEN attached to as an on-call engineer would (defaults: 3 samples, strace), or with
    # --samples 1
    options = {} if samples is None else {"samples": samples}
    snapshot = attach_job(run.job_id, AttachOptions(**options), write=False).snapshot
    verdict = top_verdict(snapshot)
    # THEN the first hang verdict has the expected kind and exactly the culprit ranks
    assert verdict.kind == truth["expected_kind"], verdict
    assert list(verdict.culprit_ranks) == truth["culprit_ranks"], verdict
    # AND it points at the culprit line (or, for a moving rank, its function), the file named
    # as the node has it: itself, or through a link (installed_package's site-packages)
    expected = truth.get("culprit_site") or truth.get("culprit_function")
    assert any(site_matches(site, truth) for site in verdict.sites), (expected, verdict.sites)
    assert verdict.next_step


@pytest.mark.parametrize("samples", [None, 1], ids=["defaults", "samples1"])
@pytest.mark.parametrize("scenario", NO_HANG_SCENARIOS)
def test_job_without_a_hang_gets_no_hang_verdict(scenario_run, scenario, samples):
    # GIVEN a job that is not hung (every rank computing silently, or slow but moving)
    run = scenario_run(scenario)
    # WHEN attached with the defaults or --samples 1
    options = {} if samples is None else {"samples": samples}
    snapshot = attach_job(run.job_id, AttachOptions(**options), write=False).snapshot
    # THEN no verdict is a hang, and the first one says the job progresses
    flagged = [v for v in snapshot.verdicts if v.severity in HANG_SEVERITIES]
    assert flagged == [], [(v.kind, v.summary) for v in flagged]
    assert snapshot.verdicts[0].kind == "progressing", snapshot.verdicts[0]


def test_healthy_job_is_never_flagged_across_five_attaches(scenario_run):
    # GIVEN the healthy, slow control job
    run = scenario_run("healthy_slow")
    for attempt in range(5):
        snapshot = attach_job(run.job_id, write=False).snapshot
        flagged = [v for v in snapshot.verdicts if v.severity in HANG_SEVERITIES]
        # THEN no attach ever reports a hang
        assert flagged == [], (attempt, [(v.kind, v.summary) for v in flagged])
    # AND the last attach looked up every rank's connections when strace stopped: each holds
    # its gloo mesh and its store connection, and data moved between ranks (1 s steps, 2 s of
    # strace), which is what the traffic rule counts
    ranks = [r for _, r in snapshot.all_ranks()]
    ends, anywhere = _rank_endpoints(ranks)
    for rank in ranks:
        recent = rank.recent_traffic
        assert recent is not None and recent.checked >= 4, (rank.rank, recent)
        assert any(c.remote in ends or c.remote.rpartition(":")[2] in anywhere
                   for c in recent.active), (rank.rank, recent)



def test_a_server_run_on_the_main_thread_by_mistake_is_hung_and_a_service_is_not(scenario_run):
    # GIVEN a training rank that ran Thread(target=server.serve_forever()) and a model served
    # on rank 0's main thread by design, the two with the same stacks
    mistake = scenario_run("serve_thread_called")
    service = scenario_run("healthy_generation_server")
    snapshot = attach_job(mistake.job_id, AttachOptions(samples=1), write=False).snapshot
    # THEN the node read rank 0's line that passed the call as the target ...
    by_rank = {r.rank: r for _, r in snapshot.all_ranks()}
    assert by_rank[0].called_target is not None
    assert site_matches(by_rank[0].called_target, mistake.truth), by_rank[0].called_target
    assert all(by_rank[r].called_target is None for r in (1, 2, 3))
    # ... and rank 0 is the critical straggler there from one sample, said as that mistake (a
    # server's loop called so returns only on a shutdown())
    verdict = top_verdict(snapshot)
    assert (verdict.kind, verdict.severity, list(verdict.culprit_ranks)) == (
        "straggler", "critical", [0]), verdict
    assert site_matches(verdict.sites[0], mistake.truth), verdict.sites
    assert "passes the call serve_forever() as the target" in verdict.summary
    # AND the service, which serves on its main thread by design, is idle, not hung
    served = attach_job(service.job_id, AttachOptions(samples=1), write=False).snapshot
    assert all(r.called_target is None for _, r in served.all_ranks())
    assert [v.kind for v in served.verdicts][:1] == ["idle"], served.verdicts
    assert not [v for v in served.verdicts if v.severity in HANG_SEVERITIES]

def test_verdicts_in_terminal_output_json_and_report(scenario_run, tmp_path):
    # GIVEN a hung job
    run = scenario_run("rank_gated_collective")
    out = tmp_path / "out"
    # WHEN the CLI attaches with its defaults (summary on the terminal, files in --out)
    result = subprocess.run([sys.executable, "-m", "slurmdiag.cli", "attach", run.job_id,
                             "--out", str(out)], capture_output=True, text=True, timeout=120,
                            cwd=REPO, env={**os.environ, "NO_COLOR": "1"}, check=False)
    assert result.returncode == 0, result.stderr
    # THEN the terminal summary starts with the verdict naming the culprit and its site
    site = run.truth["culprit_site"]
    assert "mismatched_collective" in result.stdout
    assert Path(site.split(":")[0]).name in result.stdout
    assert "\x1b[" not in result.stdout  # NO_COLOR
    # AND the saved snapshot carries the same verdicts, and the report exists
    saved = json.loads((out / "snapshot.json").read_text())
    assert saved["verdicts"][0]["kind"] == "mismatched_collective"
    assert saved["verdicts"][0]["culprit_ranks"] == run.truth["culprit_ranks"]
    assert saved["report"] == str(out / "report.html") and (out / "report.html").exists()
    # AND every rank's connections were read when strace stopped: none carried data in its
    # 2-s window or since the hang, which the verdict says as how long they have waited
    ranks = [r for n in saved["nodes"] for r in n["ranks"]]
    assert len(ranks) == 4 and all(r["recent_traffic"]["quiet_ms"] >= 1500 for r in ranks), [
        r["recent_traffic"] for r in ranks]
    assert any("have moved no data on any connection for" in line
               for line in saved["verdicts"][0]["evidence"]), saved["verdicts"][0]["evidence"]
    # AND --json prints the snapshot with its verdicts on stdout
    as_json = subprocess.run([sys.executable, "-m", "slurmdiag.cli", "attach", run.job_id,
                              "--json", "--no-report", "--samples", "2", "--out", str(tmp_path / "j")],
                             capture_output=True, text=True, timeout=120, cwd=REPO,
                             check=False)
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["verdicts"][0]["culprit_ranks"] == run.truth["culprit_ranks"]


def test_native_frames_keep_the_verdict_and_show_gloo_below_python(scenario_run):
    # GIVEN a hung job, attached with --native (py-spy reads C/C++ frames too)
    run = scenario_run("mismatched_collectives")
    snapshot = attach_job(
        run.job_id, AttachOptions(samples=2, interval_s=0.5, strace_s=0, native=True,
                                  timeout_s=60), write=False).snapshot
    # THEN native frames were collected, gloo's among them, and the verdict is the same
    frames = [f for _, r in snapshot.all_ranks() for s in r.samples for t in s.threads
              for f in t.frames if f.native]
    assert frames, "no native frame collected"
    assert any("gloo" in f.function or "c10d" in f.function for f in frames)
    verdict = top_verdict(snapshot)
    assert verdict.kind == run.truth["expected_kind"]
    assert list(verdict.culprit_ranks) == run.truth["culprit_ranks"]


def test_a_rank_in_a_socket_receive_is_named_with_its_call_and_quiet_connection(scenario_run):
    # GIVEN http_no_timeout: rank 3's main thread in the socket read of a POST nobody answers
    run = scenario_run("http_no_timeout")
    snapshot = attach_job(run.job_id, AttachOptions(), write=False).snapshot
    # THEN the collector read the thread's system call and connection (blocked_calls) ...
    rank = next(r for _, r in snapshot.all_ranks() if r.rank == 3)
    calls = [c for c in rank.blocked_calls if c.tid == rank.pid]
    assert calls and calls[0].call in ("recvfrom", "read", "recvmsg"), rank.blocked_calls
    assert calls[0].local and calls[0].remote, calls[0]
    # ... and the verdict says that connection carried no data in strace's window
    verdict = top_verdict(snapshot)
    assert any(e.startswith("rank 3: thread ") and f" on {calls[0].local} -> " in e
               and "no data on it" in e for e in verdict.evidence), verdict.evidence


def test_torchrun_agents_waiting_for_a_node_that_never_joins(local_cluster, tmp_path):
    # GIVEN torchrun told --nnodes=2 but started on one node only (D2): no rank ever starts
    import time

    from slurmdiag.api import collect_snapshot
    from slurmdiag.errors import JobNotRunning

    program = tmp_path / "train.py"
    program.write_text("import torch.distributed as dist\ndist.init_process_group('gloo')\n")
    torchrun = Path(sys.executable).parent / "torchrun"
    wrap = (f"srun {torchrun} --nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d "
            f"--rdzv-endpoint=127.0.0.1:29457 --rdzv-id=d2 {program}")
    job = subprocess.run(["sbatch", "--parsable", "-N1", "--time=10", f"--output={tmp_path}/out",
                          f"--wrap={wrap}"], capture_output=True, text=True, timeout=30,
                         check=True).stdout.strip()
    try:
        deadline = time.monotonic() + 120
        while True:  # until the agent's stack is in its rendezvous (importing torch takes a while)
            try:
                snapshot, _ = collect_snapshot(
                    job, AttachOptions(samples=1, strace_s=0, timeout_s=20))
                stacks = [" ".join(f.function for s in p.samples for t in s.threads for f in t.frames)
                          for n in snapshot.nodes for p in n.other_processes if p.role == "agent"]
            except JobNotRunning:
                stacks = []
            if any("next_rendezvous" in s for s in stacks):
                break
            assert time.monotonic() < deadline, (stacks, (tmp_path / "out").read_text()[-2000:])
            time.sleep(2)
        # WHEN attaching
        snapshot = attach_job(job, AttachOptions(samples=1, strace_s=0), write=False).snapshot
    finally:
        subprocess.run(["scancel", job], capture_output=True, timeout=30, check=False)
    # THEN the verdict says why no rank started, and where the launcher waits
    verdict = snapshot.verdicts[0]
    assert (verdict.kind, verdict.severity) == ("no_ranks", "critical"), snapshot.verdicts
    assert "rendezvous" in verdict.summary and snapshot.job.nodes[0] in verdict.summary
    assert verdict.sites and "dynamic_rendezvous.py" in verdict.sites[0]
