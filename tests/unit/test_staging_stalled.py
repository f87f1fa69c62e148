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


def test_a_node_without_ranks_says_what_its_tasks_run() -> None:
    # GIVEN the recorded look: node002 holds two `bash run_with_staging.sh` and their sleeps
    verdict = diagnose(recorded("staging_stalled.default")).verdicts[0]
    # THEN ranks 2-3 are missing, not said to have crashed, and node002's command is named
    assert verdict.kind == "missing_rank" and verdict.culprit_ranks == (2, 3)
    assert "exited or crashed" not in verdict.summary
    assert "node002 runs `sleep 3600`" in verdict.summary and "not started" in verdict.summary
    assert any(line.startswith("node002: task pid") and "run_with_staging.sh" in line
               for line in verdict.evidence)


def test_a_wrapper_that_outlives_its_crashed_ranks_is_not_read_as_staging() -> None:
    # GIVEN the liar of the reading above, recorded (wrapper_upload_after_crash): node002's
    # ranks raised before init_process_group (their tracebacks in the job's output) and their
    # wrappers copy logs to a slow archive, so node002 again holds only bash and a sleep
    verdict = diagnose(recorded("wrapper_upload_after_crash.default")).verdicts[0]
    # THEN ranks 2-3 are missing, named as crashed, not as never started, and what node002
    # runs is still named
    assert verdict.kind == "missing_rank" and verdict.culprit_ranks == (2, 3)
    assert "not started" not in verdict.summary
    assert "after its ranks ended (the job's log holds their crash" in verdict.summary
    assert "node002 runs `sleep 3600`" in verdict.summary
    assert any("FileNotFoundError" in line for line in verdict.evidence)
    # AND without the tracebacks in the log, the same look reads as staging
    quiet = recorded("wrapper_upload_after_crash.default")
    quiet = replace(quiet, log_findings=tuple(
        f for f in quiet.log_findings if f.kind not in ("traceback", "task_exit")))
    assert "not started" in diagnose(quiet).verdicts[0].summary


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
