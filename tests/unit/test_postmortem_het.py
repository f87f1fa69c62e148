"""Post-mortem of a heterogeneous job, and of a rank that exited with an error code and no
traceback: real sacct records and logs of jobs that ended on the local cluster (Slurm 22.05.8,
tests/fixtures/LOCAL_SOURCES.md)."""

from __future__ import annotations

import os
from pathlib import Path

from slurmdiag.post_mortem.build import build_postmortem
from slurmdiag.post_mortem.logs import read_rank_logs
from slurmdiag.post_mortem.record import SlurmRecord, read_slurm_record
from slurmdiag.post_mortem.verdicts import postmortem_verdicts
from slurmdiag.slurm.parse import parse_job_id
from slurmdiag.slurm.sacct import overlay_exit_codes, parse_sacct_json, parse_sacct_parsable
from slurmdiag.transport.run import CommandResult

PM = Path(__file__).resolve().parents[1] / "fixtures" / "postmortem"
#: The fixtures are this user's files: the job-named-path rule reads them as the job's own.
OWN = os.getuid()


def _runner(kind: str):
    answers = {"--json": (PM / f"sacct_22.05_json_{kind}.json").read_text(),
               "--parsable2": (PM / f"sacct_22.05_parsable2_{kind}.txt").read_text()}

    def run(argv, timeout, *, env=None, input=None):
        for flag, text in answers.items():
            if argv[0] == "sacct" and flag in argv:
                return CommandResult(tuple(argv), 0, text, "")
        return CommandResult(tuple(argv), 1, "", "unexpected")
    return run


# ---------------------------------------------------------------- het: sacct's records


def test_sacct_text_names_het_components_and_keeps_multi_line_submit_lines_whole():
    # GIVEN sacct --parsable2 of het job 60, whose srun line spans 9 lines (python3 -c '...')
    records = parse_sacct_parsable((PM / "sacct_22.05_parsable2_het.txt").read_text())
    # THEN one record a line of sacct's, none made of the submit line's lines
    assert [r.step_id for r in records] == ["60+0", "60+0.batch", "60+0.0", "60+1", "60+1.0"]
    # AND a component is named by its leader and offset, its own id kept (%j of its files)
    assert [(r.job_id, r.het_job_id, r.het_offset) for r in records if r.step is None] == [
        ("60", "60", 0), ("61", "60", 1)]
    step = records[2]
    assert step.submit_line.startswith("srun --het-group=0,1") and "sys.exit(3)" in step.submit_line
    assert step.submit_line.count("\n") == 8


def test_sacct_json_of_a_het_job_takes_its_exit_codes_from_the_text_component_by_component():
    # GIVEN 22.05's JSON (exit codes 0 for failed steps; components by their own ids 60, 61)
    json_records = parse_sacct_json((PM / "sacct_22.05_json_het.json").read_text())
    assert [r.step_id for r in json_records if r.step is None] == ["60+0", "60+1"]
    merged = overlay_exit_codes(json_records,
                                parse_sacct_parsable((PM / "sacct_22.05_parsable2_het.txt").read_text()))
    # THEN component 1's step exited 3, and the leader's submit line (--output) is known
    by_id = {r.step_id: r for r in merged}
    assert (by_id["60+1.0"].state, by_id["60+1.0"].exit_code) == ("FAILED", 3)
    assert "--output=/tmp/x/hetpm/het-%j.out" in by_id["60+0"].submit_line


def test_a_het_job_by_its_plain_id_is_the_whole_job_and_a_component_is_itself():
    record = read_slurm_record(parse_job_id("60"), _runner("het"))
    # THEN the whole job: the leader's record with both components' nodes, every step
    assert (record.job.job_id, record.job.nodes) == ("60", "node[003-004]")
    assert [c.label for c in record.components] == ["60+0", "60+1"]
    assert [(s.step_id, s.state, s.exit_code) for s in record.steps] == [
        ("60+0.batch", "FAILED", 15), ("60+0.0", "CANCELLED", 0), ("60+1.0", "FAILED", 3)]
    # AND 60+1 is that component alone (before: the last record sacct printed, by luck)
    one = read_slurm_record(parse_job_id("60+1"), _runner("het"))
    assert (one.job.label, one.job.nodes, one.components) == ("60+1", "node004", ())
    assert [s.step_id for s in one.steps] == ["60+1.0"]


def test_the_postmortem_of_a_het_job_names_the_rank_of_the_second_component():
    # GIVEN the job's log: srun numbers a het step's tasks per component, so rank 1 (the first
    # task of component 1, on node004) is "task 0" there, as rank 0 is on node003
    snapshot = build_postmortem("60", runner=_runner("het"), cores=False,
                                logs=(str(PM / "local_het_job.out"),))
    first = snapshot.verdicts[0]
    assert (first.kind, first.culprit_ranks) == ("rank_exited", (1,))
    assert "exit code 3 on node004" in first.summary and "rank 0 only died" in first.summary
    assert snapshot.postmortem["world_size"] == 2
    assert (snapshot.job.het_job_id, snapshot.job.het_job_offset) == ("60", None)
    assert snapshot.job.nodes == ("node003", "node004")
    # AND the terminal header counts the job's nodes and ranks (no stacks: no core was read)
    from slurmdiag.analysis import analyze
    from slurmdiag.post_mortem.cli import summary_lines

    header = summary_lines(snapshot, analyze(snapshot), color=False)[0]
    assert " · 2 nodes · 2 ranks · ended FAILED after 3 s · " in header, header


# ---------------------------------------------------------------- a lone exit, and its liars


def _lone(log: str) -> list:
    records = overlay_exit_codes(parse_sacct_json((PM / "sacct_22.05_json_lone.json").read_text()),
                                 parse_sacct_parsable((PM / "sacct_22.05_parsable2_lone.txt").read_text()))
    record = SlurmRecord(job=next(r for r in records if r.step is None),
                         steps=tuple(r for r in records if r.step is not None))
    logs = read_rank_logs([(str(PM / log), None)], owner_uid=OWN)
    return postmortem_verdicts(record, logs.findings, (), logs.last_lines, 4)


def test_the_one_rank_that_exited_with_an_error_code_is_named():
    # GIVEN a labelled log: rank 2 printed its reason and called sys.exit(3); srun's
    # --kill-on-bad-exit terminated the others (before: "unexplained")
    first = _lone("local_lone_exit_job.out")[0]
    assert (first.kind, first.culprit_ranks) == ("rank_exited", (2,))
    assert "ranks 0-1,3 only died because of it" in first.summary
    assert "rank 2: rank 2: shard 7 has 0 samples, giving up" in first.evidence
    assert not any("same line" in e for e in first.evidence)


def test_two_ranks_that_exited_with_an_error_code_are_not_told_apart():
    # GIVEN every rank hit the same bad argument and ranks 0 and 2 both exited 2 before srun
    # ended the others: srun's order of its lines cannot say which was first
    first = _lone("local_two_exits_job.out")[0]
    assert first.kind == "unexplained" and first.culprit_ranks == ()


def test_ranks_that_exited_after_losing_their_peer_do_not_hide_the_lone_exit():
    # GIVEN rank 3 of a gloo job exited 3 with no traceback; ranks 0-2 wrote "Connection closed
    # by peer" and exited 1 before srun ended them (CI drew this: "unexplained" before)
    first = _lone("local_lone_exit_peers_exited_job.out")[0]
    # THEN rank 3 is named: a rank whose own traceback says a peer went away was not first
    assert (first.kind, first.culprit_ranks) == ("rank_exited", (3,)), first
    assert "ranks 0-2 only died because of it" in first.summary
    assert "the only rank srun saw fail that had not lost a peer first" in first.summary


def test_a_lone_exit_whose_peers_wrote_the_same_error_says_they_may_have_failed_alike():
    # GIVEN every rank printed the same error, rank 0 exited first, srun terminated the rest
    first = _lone("local_same_error_job.out")[0]
    # THEN rank 0 is named (srun saw only it fail), and the evidence says the others wrote
    # the same line (what would make the verdict lie: they were failing the same way)
    assert (first.kind, first.culprit_ranks) == ("rank_exited", (0,))
    assert any(e.startswith("ranks 1-3 last wrote the same line") for e in first.evidence), first.evidence


def test_a_step_of_the_leader_alone_does_not_shift_the_other_components_ranks():
    from dataclasses import replace

    from slurmdiag.post_mortem.build import _het_task_bases

    # GIVEN job 60 whose leader also ran a 4-task step 1 of its own before the het step 0
    # (1 task a component): what would make "the widest step of each component" lie
    record = read_slurm_record(parse_job_id("60"), _runner("het"))
    own = replace(record.steps[1], step="1", ntasks=4)
    record = replace(record, steps=(*record.steps, own))
    # THEN node004's first rank is still 1: only a step in every component numbers them
    assert _het_task_bases(record) == {"node003": 0, "node004": 1}
    # AND with no step spanning the components, no task line is renumbered
    alone = replace(record, steps=tuple(s for s in record.steps if s.label == "60+0"))
    assert _het_task_bases(alone) == {}
