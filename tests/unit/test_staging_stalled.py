"""A node that runs no rank, only its step's wrapper still staging data (`staging_stalled`,
recorded by `make accuracy`): ranks 2-3 were never started, their node's wrapper sleeps in its
copy step. Before, the node was an empty node and the verdict said ranks 2-3 had "exited or
crashed"; the collector now keeps such a node's step processes as tasks, and the verdict says
what runs there instead of python."""

from __future__ import annotations

from dataclasses import replace

from snapfactory import recorded

from slurmdiag.analysis import diagnose
from slurmdiag.collector.main import MAX_TASKS, mark_tasks
from slurmdiag.snapshot import Frame, LogFinding


def test_a_node_without_ranks_says_what_its_tasks_run() -> None:
    # GIVEN the recorded look: node002 holds two `bash run_with_staging.sh` and their sleeps
    verdict = diagnose(recorded("staging_stalled.default")).verdicts[0]
    # THEN ranks 2-3 are missing, not said to have crashed, and node002's command is named
    assert verdict.kind == "missing_rank" and verdict.culprit_ranks == (2, 3)
    assert "exited or crashed" not in verdict.summary
    assert "node002 runs `sleep 3600`" in verdict.summary and "not started" in verdict.summary
    assert any(line.startswith("node002: task pid") and "run_with_staging.sh" in line
               for line in verdict.evidence)


def test_a_wrapper_that_outlives_its_crashed_ranks_is_not_read_as_staging_alone() -> None:
    # GIVEN the liar of the reading above, recorded (wrapper_upload_after_crash): node002's
    # ranks raised before init_process_group (their tracebacks in the job's output, no rank
    # label: srun without --label) and their wrappers copy logs to a slow archive, so node002
    # again holds only bash and a sleep
    recording = recorded("wrapper_upload_after_crash.default")
    verdict = diagnose(recording).verdicts[0]
    # THEN ranks 2-3 are missing, what node002 runs is named, and both readings are said,
    # the traceback's line with them
    assert verdict.kind == "missing_rank" and verdict.culprit_ranks == (2, 3)
    assert "node002 runs `sleep 3600`" in verdict.summary
    assert "if it is theirs, its ranks started and crashed" in verdict.summary
    assert "if not, they were most likely not started yet" in verdict.summary
    assert "FileNotFoundError" in verdict.summary
    # AND with the tracebacks labelled as ranks 2 and 3's (srun --label), only the crash
    labelled = replace(recording, log_findings=tuple(
        replace(f, rank=2 + i) if f.kind == "traceback" else f
        for i, f in enumerate(recording.log_findings)))
    summary = diagnose(labelled).verdicts[0].summary
    assert "after its ranks ended (the job's log holds their crash: FileNotFoundError" in summary
    assert "not started" not in summary
    # AND with another rank's traceback only (rank 0's, handled and logged), staging again
    others = replace(recording, log_findings=tuple(
        replace(f, rank=0) if f.kind == "traceback" else f for f in recording.log_findings))
    summary = diagnose(others).verdicts[0].summary
    assert "most likely not started yet" in summary and "crash" not in summary


def summary_with_traceback(name: str, text: str) -> str:
    """The first verdict's summary of recording ``name`` with a traceback of no rank added to
    its job log (the recording has none)."""
    snapshot = recorded(name)
    assert not any(f.kind == "traceback" for f in snapshot.log_findings)
    noted = replace(snapshot, log_findings=(*snapshot.log_findings, LogFinding(
        source="job.out", line_no=3, kind="traceback", text=text)))
    return diagnose(noted).verdicts[0].summary


def test_a_handled_traceback_in_the_log_leaves_staging_one_of_two_readings() -> None:
    # GIVEN staging_stalled's look, its log holding a traceback of no rank (a library's
    # warning logged with its traceback by a rank that goes on)
    summary = summary_with_traceback("staging_stalled.default",
                                     "ConnectionError: tracker unreachable, running offline")
    # THEN the staging reading is kept, beside the crash it could also be
    assert "if not, they were most likely not started yet" in summary
    assert "ConnectionError: tracker unreachable" in summary


def test_a_node_without_tasks_keeps_the_missing_rank_reading() -> None:
    # GIVEN the liar: the same look with node002 holding nothing at all (its ranks gone)
    snapshot = recorded("staging_stalled.default")
    empty = replace(snapshot, nodes=tuple(
        replace(n, other_processes=()) if not n.ranks else n for n in snapshot.nodes))
    # THEN the verdict is the missing ranks' own
    verdict = diagnose(empty).verdicts[0]
    assert verdict.culprit_ranks == (2, 3) and "(exited or crashed)" in verdict.summary
    assert "not started" not in verdict.summary


def _proc(pid: int, ppid: int, comm: str, step: str | None = "0", role: str | None = None) -> dict:
    return {"pid": pid, "role": role, "step_id": step, "cmdline": [comm],
            "stat": {"comm": comm, "ppid": ppid}}


def test_tasks_are_kept_only_where_no_rank_or_launcher_runs() -> None:
    # GIVEN a node's job processes: the step's stepd, a wrapper and its copy, the batch
    # script and its srun, the extern step's sleep
    def node(extra: list[dict]) -> dict[int, dict]:
        procs = [_proc(1, 0, "slurmstepd"), _proc(2, 1, "bash"), _proc(3, 2, "rsync"),
                 _proc(4, 0, "bash", step="batch"), _proc(5, 4, "srun", step="batch"),
                 _proc(6, 0, "sleep", step="extern"), *extra]
        return {p["pid"]: p for p in procs}
    alone = node([])
    mark_tasks(alone)
    # THEN the step's wrapper and its copy are tasks, the wrapper first; nothing else
    assert [p["pid"] for p in alone.values() if p["role"] == "task"] == [2, 3]
    # AND where a rank (or a launcher) runs, nothing is
    for role in ("rank", "agent"):
        busy = node([_proc(7, 2, "python3", role=role)])
        mark_tasks(busy)
        assert not any(p["role"] == "task" for p in busy.values())
    # AND at most MAX_TASKS, the closest to the step first
    many = node([_proc(100 + i, 3, "cp") for i in range(MAX_TASKS + 5)])
    mark_tasks(many)
    kept = [p["pid"] for p in many.values() if p["role"] == "task"]
    assert len(kept) == MAX_TASKS and kept[:2] == [2, 3]


# ---------------------------------------------------------------- the wrapper's line

RDZV = "torch/distributed/elastic/rendezvous/dynamic_rendezvous.py:1171"


def test_the_line_a_wrapper_waits_at_is_the_missing_ranks_site() -> None:
    # GIVEN staging_stalled's look by a collector that reads a shell task's script line
    verdict = diagnose(recorded("staging_stalled.samples1")).verdicts[0]
    # THEN the site is the wrapper's copy step (its sleep, line 9), named in the summary too
    assert verdict.culprit_ranks == (2, 3)
    assert verdict.sites == ("/work/main/tests/scenarios/run_with_staging.sh:9",)
    assert "node002 runs `sleep 3600` (at /work/main/tests/scenarios/run_with_staging.sh:9)" in (
        verdict.summary)
    # AND a look by a collector before it (no script line) has no site, as before
    assert diagnose(recorded("staging_stalled.default")).verdicts[0].sites == ()


def test_a_wrappers_line_is_not_the_site_of_ranks_that_crashed() -> None:
    # GIVEN the same look with the culprits' crash in the log (the wrapper is past python)
    snapshot = recorded("staging_stalled.samples1")
    crashed = replace(snapshot, log_findings=(*snapshot.log_findings, LogFinding(
        source="job.out", line_no=9, kind="traceback", rank=2, text="RuntimeError: bad shard")))
    verdict = diagnose(crashed).verdicts[0]
    # THEN the wrapper's line is not where they failed
    assert verdict.sites == () and "their crash" in verdict.summary


def test_a_node_whose_launcher_never_started_is_named_with_its_wrappers_line() -> None:
    # GIVEN torchrun_node_staging (recorded): node001's torchrun agent waits in the c10d
    # rendezvous for a second node; node002's wrapper still sleeps in its staging, its agent
    # never started; no rank exists anywhere
    verdict = diagnose(recorded("torchrun_node_staging.default")).verdicts[0]
    # THEN node002 is named with what it runs, the wrapper's line first among the sites
    assert verdict.kind == "no_ranks" and verdict.severity == "critical"
    assert "the launchers on node001 wait in their rendezvous" in verdict.summary
    assert "no launcher runs on node002: node002 runs `sleep 3600` (at " in verdict.summary
    assert verdict.sites[0] == "/work/main/tests/scenarios/run_with_staging.sh:9"
    assert verdict.sites[1].endswith(RDZV)
    assert verdict.next_step and "never started their launcher" in verdict.next_step
    assert any(e.startswith("node002: task pid") for e in verdict.evidence)


def test_launchers_waiting_for_a_node_that_holds_nothing_keep_the_rendezvous_reading() -> None:
    # GIVEN the liar: the same look with node002 holding no process of the job (its task
    # gone, or a node the launch left out): nothing there to name
    snapshot = recorded("torchrun_node_staging.default")
    empty = replace(snapshot, nodes=tuple(
        replace(n, other_processes=()) if n.name == "node002" else n for n in snapshot.nodes))
    verdict = diagnose(empty).verdicts[0]
    # THEN the launchers wait "for nodes that never join", with the rendezvous' next step
    assert verdict.kind == "no_ranks" and "no launcher runs on" not in verdict.summary
    assert verdict.summary.endswith("for nodes that never join")
    assert len(verdict.sites) == 1 and verdict.sites[0].endswith(RDZV)
    assert verdict.next_step and "--rdzv-endpoint" in verdict.next_step


def test_a_traceback_in_the_log_leaves_a_failed_launcher_one_of_two_readings() -> None:
    # GIVEN the liar of "its launcher most likely not started": the same look, the job's log
    # holding a traceback (node002's agent may have failed at its start, its wrapper then in
    # a step after it)
    summary = summary_with_traceback("torchrun_node_staging.default",
                                     "ValueError: The rendezvous endpoint has an invalid port")
    # THEN both readings are said, the traceback with them; node002 is still named
    assert "no launcher runs on node002" in summary
    assert "if it is the launcher's on node002, it started and failed" in summary
    assert "ValueError: The rendezvous endpoint" in summary
    assert "if not, it is most likely not started yet" in summary


# ---------------------------------------------------------------- a staging step in Python

def test_ranks_that_run_another_program_before_the_training_are_said_not_started() -> None:
    # GIVEN staging_python_stalled (recorded): node002's tasks run the wrapper's staging step
    # _stage_dataset.py, polling for a marker file with the tasks' SLURM_PROCID 2 and 3, while
    # ranks 0-1 (staging_stalled.py) wait in init_process_group
    verdict = diagnose(recorded("staging_python_stalled.default")).verdicts[0]
    # THEN 2-3 are the culprits at the staging line, said to run another program
    assert verdict.kind == "straggler" and verdict.culprit_ranks == (2, 3)
    assert verdict.sites[0].endswith("tests/scenarios/_stage_dataset.py:14")
    assert ("ranks 2-3 run _stage_dataset.py, not staging_stalled.py as the waiting ranks do, "
            "so most likely their training has not started yet") in verdict.summary
    assert verdict.next_step and verdict.next_step.startswith(
        "the ranks named run another program than the others")


def _culprits_changed(snapshot, change):  # type: ignore[no-untyped-def]
    return replace(snapshot, nodes=tuple(
        replace(n, ranks=tuple(change(r) if r.rank in (2, 3) else r for r in n.ranks))
        for n in snapshot.nodes))


def test_a_rank_of_the_same_program_or_with_torch_distributed_frames_is_a_plain_straggler() -> None:
    snapshot = recorded("staging_python_stalled.default")
    waiting_cmdline = next(r.cmdline for n in snapshot.nodes for r in n.ranks if r.rank == 0)
    # GIVEN the liars: the sleeping ranks run the waiting ranks' program (a rank that sleeps
    # before its init_process_group), or have a frame of torch.distributed (a program of an
    # MPMD job, stuck in its own start)
    same = _culprits_changed(snapshot, lambda r: replace(r, cmdline=waiting_cmdline))
    torn = Frame(function="init_process_group", line=1,
                 file="/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py")
    with_torch = _culprits_changed(snapshot, lambda r: replace(r, samples=tuple(
        replace(x, threads=tuple(replace(t, frames=(*t.frames, torn)) for t in x.threads))
        for x in r.samples)))
    for liar in (same, with_torch):
        verdict = diagnose(liar).verdicts[0]
        # THEN they stay sleeping stragglers without the other-program reading
        assert verdict.culprit_ranks == (2, 3)
        assert "training has not started" not in verdict.summary
        assert verdict.next_step and "another program" not in verdict.next_step


# ---------------------------------------------------------------- a staging step that works

def _tasks_at(snapshot, cpu_percent: float, io_rate: int):  # type: ignore[no-untyped-def]
    """The recording with node002's task processes at that CPU share and file I/O rate."""
    return replace(snapshot, nodes=tuple(
        replace(n, other_processes=tuple(
            replace(p, cpu_percent=cpu_percent, io_rate=io_rate) if p.role == "task" else p
            for p in n.other_processes)) if n.name == "node002" else n
        for n in snapshot.nodes))


def test_a_staging_step_that_still_copies_is_a_slow_start_or_a_hang() -> None:
    # GIVEN staging_stalled's and torchrun_node_staging's looks with node002's tasks copying
    # (a copy throttled to 1 MiB/s, little CPU), as a slow but working staging does
    for name in ("staging_stalled.samples1", "torchrun_node_staging.default"):
        verdict = diagnose(_tasks_at(recorded(name), 0.5, 1 << 20)).verdicts[0]
        # THEN "cannot tell" (info), what works named, the node and the line kept
        assert verdict.kind == "slow_step" and verdict.severity == "info", name
        assert verdict.summary.startswith("a slow start or a hang, cannot tell: ")
        assert "node002's `sleep` at 0% CPU, 1.0 MiB/s of file I/O" in verdict.summary
        assert verdict.sites[0] == "/work/main/tests/scenarios/run_with_staging.sh:9"
        assert verdict.next_step and "still works" in verdict.next_step


def test_a_staging_step_that_only_polls_stays_a_hang() -> None:
    # GIVEN the liar: the tasks polling (a sleep loop: a line of log a second, no CPU to speak of)
    for name in ("staging_stalled.samples1", "torchrun_node_staging.default"):
        verdict = diagnose(_tasks_at(recorded(name), 0.3, 2048)).verdicts[0]
        # THEN the hang verdict stands
        assert verdict.severity == "critical" and verdict.kind in ("missing_rank", "no_ranks")
