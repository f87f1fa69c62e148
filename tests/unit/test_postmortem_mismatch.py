"""Post-mortem of a collective mismatch: ranks that called one collective with different sizes
or ops. Real logs: jobs 1 and 2 on the local cluster (tests/scenarios/postmortem's
size_mismatch mode, plain gloo and TORCH_DISTRIBUTED_DEBUG=DETAIL) and four gloo ranks run by
hand with DETAIL (tests/fixtures/LOCAL_SOURCES.md)."""

from __future__ import annotations

import os
from pathlib import Path

from slurmdiag.post_mortem.logs import mismatch_fields, read_rank_logs
from slurmdiag.post_mortem.record import SlurmRecord
from slurmdiag.post_mortem.verdicts import postmortem_verdicts
from slurmdiag.slurm.sacct import overlay_exit_codes, parse_sacct_json, parse_sacct_parsable

PM = Path(__file__).resolve().parents[1] / "fixtures" / "postmortem"
OWN = os.getuid()
SITE = "tests/scenarios/postmortem/crash_modes.py:67"  # where the line was when jobs 1-2 ran


def _record(kind: str) -> SlurmRecord:
    records = overlay_exit_codes(parse_sacct_json((PM / f"sacct_22.05_json_{kind}.json").read_text()),
                                 parse_sacct_parsable((PM / f"sacct_22.05_parsable2_{kind}.txt").read_text()))
    return SlurmRecord(job=next(r for r in records if r.step is None),
                       steps=tuple(r for r in records if r.step is not None))


def _verdicts(kind: str, logs: list[tuple[str, int | None]]) -> list:
    read = read_rank_logs(logs, owner_uid=OWN)
    return postmortem_verdicts(_record(kind), read.findings, (), read.last_lines, 4)


def _sites(verdict) -> list[str]:
    return [site.split("/work/main/", 1)[-1] for site in verdict.sites]


def test_gloo_noticing_a_size_mismatch_is_not_blamed_for_it():
    # GIVEN rank 3 all_reduced 10 class counts and the others 9: gloo aborted rank 2, the rank
    # that received rank 3's data (srun: "task 2: Aborted"); the others lost their peers
    first = _verdicts("mismatch", [(str(PM / "local_size_mismatch_job.out"), None)])[0]
    # THEN a mismatch at the line every traceback shares, no rank blamed (before: rank 2
    # "crashed first with SIGABRT", open its core file)
    assert (first.kind, first.culprit_ranks) == ("mismatched_collective", ())
    assert _sites(first) == [SITE]
    assert "gloo found a collective mismatch on rank 2" in first.summary
    assert "8 bytes received where 4 were expected" in first.summary
    assert "which rank differs the logs read do not say" in first.summary
    assert "TORCH_DISTRIBUTED_DEBUG=DETAIL" in first.next_step
    assert not any(v.kind == "rank_crashed" for v in _verdicts("mismatch", [
        (str(PM / "local_size_mismatch_job.out"), None)]))


def test_torchs_collective_check_names_the_rank_that_differs():
    # GIVEN the same job with TORCH_DISTRIBUTED_DEBUG=DETAIL: every rank raised the check's
    # RuntimeError; ranks 0-2 name rank 3 ([10]), rank 3 names rank 0 ([9])
    first = _verdicts("mismatch_detail", [(str(PM / "local_size_mismatch_detail_job.out"), None)])[0]
    # THEN rank 3, at the class-count line, the shapes of both sides said (before: rank_exception
    # of whichever rank srun wrote first)
    assert (first.kind, first.culprit_ranks) == ("mismatched_collective", (3,))
    assert _sites(first) == [SITE]
    assert "ranks 0-2 with ALLREDUCE, shape [9], Float; rank 3 with ALLREDUCE, shape [10], Float" \
        in first.summary, first.summary


def test_an_op_mismatch_is_read_from_the_fingerprints_too():
    # GIVEN rank 1 called all_gather where the others all_reduce (four ranks' own files, each
    # ending with its exception line: that last line was once never looked at)
    logs = [(str(PM / "mismatch_op" / f"rank{r}.log"), r) for r in range(4)]
    first = _verdicts("mismatch_detail", logs)[0]
    assert (first.kind, first.culprit_ranks) == ("mismatched_collective", (1,))
    assert "rank 1 with ALLGATHER" in first.summary and "ranks 0,2-3 with ALLREDUCE" in first.summary


def test_two_against_two_names_nobody():
    # GIVEN ranks 0-1 passed 9 elements and ranks 2-3 passed 10: as many on each side
    logs = [(str(PM / "mismatch_tie" / f"rank{r}.log"), r) for r in range(4)]
    first = _verdicts("mismatch_detail", logs)[0]
    assert (first.kind, first.culprit_ranks) == ("mismatched_collective", ())
    assert "which one diverged cannot be told" in first.summary


def test_one_printed_check_still_says_who_matched():
    # GIVEN only rank 2's file of the all_gather job (srun ended the others before they
    # printed): rank 2 ran ALLREDUCE and names rank 1 (ALLGATHER), the first rank in order
    # that differs from it, so rank 0 before it ran what rank 2 ran
    first = _verdicts("mismatch_detail", [(str(PM / "mismatch_op" / "rank2.log"), 2)])[0]
    # THEN two against one: rank 1 (without the order, one against one named nobody)
    assert (first.kind, first.culprit_ranks) == ("mismatched_collective", (1,))
    assert any(e.startswith("rank 2 printed the check's fingerprints") and "ranks 0-1 read from them" in e
               for e in first.evidence), first.evidence


def test_a_line_that_names_no_mismatch_is_none():
    assert mismatch_fields("RuntimeError: Connection closed by peer [127.0.0.1]:9135") is None
    fields = mismatch_fields((PM / "mismatch_op" / "rank1.log").read_text().splitlines()[-1])
    assert fields is not None
    assert (fields["rank_a"], fields["op_a"], fields["rank_b"], fields["op_b"]) == (
        "1", "ALLGATHER", "0", "ALLREDUCE")


def test_monitored_barrier_blames_the_rank_rank_0_names_not_the_first_to_print():
    # GIVEN dist.monitored_barrier(timeout=5 s) with rank 3 asleep (four ranks' own files): rank
    # 0 raised "Rank 3 failed to pass monitoredBarrier in 5000 ms", ranks 1-2 "successfully
    # reached monitoredBarrier, but received errors ... from rank 0", rank 3 lost its peer
    logs = [(str(PM / "monitored_barrier" / f"rank{r}.log"), r) for r in range(4)]
    first = _verdicts("mismatch_detail", logs)[0]
    # THEN rank 3 (before: rank_exception of rank 1, the file last written first)
    assert (first.kind, first.culprit_ranks) == ("collective_timeout", (3,)), first
    assert first.summary == "rank 0 timed out waiting in monitored_barrier after 5 s; rank 3 never reached it"


def test_torchruns_root_cause_names_the_rank_a_signal_ended():
    # GIVEN torchrun's log of two ranks where rank 1 was SIGKILLed (no line of its own; rank 0
    # lost its peer; the agent's ChildFailedError summary says "Root Cause ... rank : 1 ...
    # exitcode : -9 ... (SIGKILL)")
    first = _verdicts("mismatch_detail", [(str(PM / "torchrun" / "local_torchrun_sigkill.log"), None)])[0]
    # THEN rank 1 was killed (before: no cause read; the agent's task exit decided)
    assert (first.kind, first.culprit_ranks) == ("rank_killed", (1,)), first
    assert "rank 0 only died because of it" in first.summary


def test_torchrun_agents_under_srun_are_no_ranks():
    # GIVEN a real job of one torchrun agent a node under `srun --label` (2 x 2 workers): rank 3
    # (node 2's local rank 1) was SIGKILLed; agent 1 raised ChildFailedError ("1: Traceback"),
    # srun wrote "task 1: Exited with exit code 1" and "task 0: ..." for the agents
    read = read_rank_logs([(str(PM / "local_torchrun_srun_sigkill_job.out"), None)], owner_uid=OWN)
    first = postmortem_verdicts(_record("torchrun"), read.findings, (), read.last_lines, 4)[0]
    # THEN rank 3 is named from agent 1's Root Cause block (before: "rank 1 failed first:
    # ChildFailedError", srun's label 1 read as a rank)
    assert (first.kind, first.culprit_ranks) == ("rank_killed", (3,)), first
    assert "ranks 0-2 only died because of it" in first.summary
    # AND srun's task lines are kept as the agents' (task 0 and 1), with no rank of theirs
    agents = [f for f in read.findings if f.kind == "task_exit"]
    assert {f.fields.get("agent_task") for f in agents if f.rank is None} >= {"0", "1"}, agents
    assert not any(f.kind == "exception" and "ChildFailedError" in f.text for f in read.findings)
    # AND a rank's last lines are its own ([rankN]:), not its agent's summary under srun's label
    assert "Connection reset by peer" in read.last_lines[2][-1], read.last_lines[2]
    assert not any("Root Cause" in line or "exitcode" in line
                   for tail in read.last_lines.values() for line in tail), read.last_lines
    assert 3 not in read.last_lines  # SIGKILLed: it wrote nothing under [rank3]


def test_a_torchrun_worker_that_exited_with_an_error_code_is_the_lone_exit():
    # GIVEN the same job shape where rank 3 printed its reason and called sys.exit(3): agent
    # 0's summary names rank 3 (exitcode 3), agent 1's its own rank 0 (exitcode 1, after
    # "Connection closed by peer"); srun saw both agents exit 1
    read = read_rank_logs([(str(PM / "local_torchrun_srun_exit_job.out"), None)], owner_uid=OWN)
    first = postmortem_verdicts(_record("torchrun_exit"), read.findings, (), read.last_lines, 4)[0]
    # THEN rank 3 exited (before: "unexplained": the agents' lines read as ranks 0 and 1
    # exiting 1, and the summaries' own exits were taken for the agents' too)
    assert (first.kind, first.culprit_ranks) == ("rank_exited", (3,)), first
    assert "the only rank torchrun saw fail that had not lost a peer first" in first.summary
    assert "ranks 0-2 only died because of it" in first.summary


def test_an_agent_that_lost_its_rendezvous_store_is_no_rank_that_failed():
    # GIVEN the same job where rank 3's agent (task 0) hosted the c10d store and exited first:
    # agent 1 raised RendezvousConnectionError (chained from the store's DistNetworkError),
    # under srun's label "1:" alone (CI drew it; job 31's accounting, same shape)
    read = read_rank_logs([(str(PM / "local_torchrun_srun_exit_store_lost_job.out"), None)],
                          owner_uid=OWN)
    first = postmortem_verdicts(_record("torchrun_exit"), read.findings, (), read.last_lines, 4)[0]
    # THEN rank 3 exited (before: "rank 1 failed first: ...RendezvousConnectionError")
    assert (first.kind, first.culprit_ranks) == ("rank_exited", (3,)), first
    assert not any(f.kind == "exception" for f in read.findings), read.findings
