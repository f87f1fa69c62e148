"""Post-mortem parsers and verdicts on real outputs: sacct of Slurm 22.05 (the local cluster),
24.05 and 25.11 (slurmrestd's slurmdb records, the same schema as sacct --json), the logs and
Flight Recorder dumps of real finished jobs, and pystack's reading of a real core."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slurmdiag.errors import JobNotFound, JobNotRunning
from slurmdiag.post_mortem.build import (
    LogsGone,
    _flight_summary,
    build_postmortem,
    read_flight_recorder,
)
from slurmdiag.post_mortem.cores import CoreStack, parse_gdb_backtrace, parse_pystack_core
from slurmdiag.post_mortem.logs import parse_rank_log, read_rank_logs
from slurmdiag.post_mortem.record import SlurmRecord, read_slurm_record
from slurmdiag.post_mortem.verdicts import core_site, first_cause, postmortem_verdicts
from slurmdiag.slurm.parse import parse_job_id
from slurmdiag.slurm.sacct import (
    AcctRecord,
    json_exit_codes_unreliable,
    output_paths_from_submit_line,
    overlay_exit_codes,
    parse_sacct_json,
    parse_sacct_parsable,
)
from slurmdiag.snapshot import LogFinding
from slurmdiag.transport.run import CommandResult

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PM = FIXTURES / "postmortem"
SLURM = FIXTURES / "slurm"


#: The fixtures are this user's files: the job-named-path rule reads them as the job's own.
OWN = os.getuid()

def _record(kind: str) -> SlurmRecord:
    records = overlay_exit_codes(
        parse_sacct_json((PM / f"sacct_22.05_json_{kind}.json").read_text()),
        parse_sacct_parsable((PM / f"sacct_22.05_parsable2_{kind}.txt").read_text()),
    )
    job = next(r for r in records if r.step is None)
    return SlurmRecord(job=job, steps=tuple(r for r in records if r.step is not None))


def _verdicts(kind: str, cores: tuple[CoreStack, ...] = (), flight: dict | None = None):
    record = _record(kind)
    logs = read_rank_logs([(str(PM / f"local_{kind}_job.out"), None)], owner_uid=OWN)
    return postmortem_verdicts(record, logs.findings, cores, logs.last_lines, 4, flight), logs


# ---------------------------------------------------------------- sacct


def test_sacct_22_05_json_exit_codes_are_wrong_and_the_text_fixes_them():
    # GIVEN Slurm 22.05's sacct --json of a job whose rank segfaulted (text: 11:0)
    text = (PM / "sacct_22.05_json_seg.json").read_text()
    records = parse_sacct_json(text)
    # THEN the JSON claims exit 0 (the 22.05 bug) and is flagged as unreliable
    job = next(r for r in records if r.step is None)
    assert job.state == "FAILED" and job.exit_code == 0
    assert json_exit_codes_unreliable(text)
    # WHEN the text output is laid over it THEN the exit code is the real one
    fixed = overlay_exit_codes(records, parse_sacct_parsable((PM / "sacct_22.05_parsable2_seg.txt").read_text()))
    by_id = {r.step_id: r for r in fixed}
    assert by_id["703602"].exit_code == 11
    assert by_id["703602.0"].state == "FAILED" and by_id["703602.0"].exit_code == 1
    assert by_id["703602.0"].node_list == ("node001", "node002")


def test_sacct_text_cancelled_by_uid_and_signal():
    records = {r.step_id: r for r in parse_sacct_parsable((PM / "sacct_22.05_parsable2_can.txt").read_text())}
    assert records["703604"].state == "CANCELLED" and records["703604"].cancelled_by == "0"
    assert records["703604.0"].signal == 15 and records["703604.0"].exit_code == 0
    assert records["703604"].submit_line.startswith("sbatch ")


def test_sacct_text_timeout_and_submit_line_output():
    records = {r.step_id: r for r in parse_sacct_parsable((PM / "sacct_22.05_parsable2_tl.txt").read_text())}
    job = records["703605"]
    assert job.state == "TIMEOUT" and job.elapsed_s == 86 and job.time_limit == "00:01:00"
    # sbatch -o job-%j.out, relative to the working directory
    assert output_paths_from_submit_line(job) == ("/tmp/i16-pm/tl/job-703605.out", None)
    # a step's submit line may hold '|': it is the last field and kept whole
    assert records["703605.0"].submit_line.startswith("srun ")


@pytest.mark.parametrize(
    ("name", "state", "exit_code", "step_state", "step_signal"),
    [
        ("slurmdb_24.05_0.0.41_job_failed.json", "FAILED", 1, "FAILED", None),
        ("slurmdb_24.05_0.0.41_job_timeout.json", "TIMEOUT", 0, "CANCELLED", 15),
        ("slurmdb_25.11_0.0.44_job_failed.json", "FAILED", 1, "FAILED", None),
        ("slurmdb_25.11_0.0.44_job_timeout.json", "TIMEOUT", 0, "CANCELLED", 15),
    ],
)
def test_sacct_json_newer_versions(name, state, exit_code, step_state, step_signal):
    # GIVEN the JSON job records of Slurm 24.05 / 25.11 (lists of states, wrapped numbers,
    # step ids "J.batch")
    text = (SLURM / name).read_text()
    records = parse_sacct_json(text)
    job = next(r for r in records if r.step is None)
    step = next(r for r in records if r.step is not None)
    # THEN states, exit codes, signals and step ids read the same as on 22.05
    assert (job.state, job.exit_code) == (state, exit_code)
    assert step.step == "batch" and step.state == step_state and step.signal == step_signal
    assert job.stdout and job.stdout.endswith(f"slurm-{job.job_id}.out")
    assert not json_exit_codes_unreliable(text)


# ---------------------------------------------------------------- logs


def test_segfault_log_first_cause_is_the_crash_not_the_first_traceback():
    # GIVEN a labelled log where ranks 0 and 2 print "Connection closed by peer" BEFORE srun
    # reports rank 3's segfault
    findings, tails, labelled = parse_rank_log((PM / "local_seg_job.out").read_text(), "job.out")
    kinds = [(f.kind, f.rank) for f in findings]
    assert labelled
    assert kinds.index(("peer_lost", 0)) < kinds.index(("task_exit", 3))
    # THEN the first error that is a cause is rank 3's
    cause = first_cause(findings)
    assert cause is not None and cause.rank == 3
    assert all(f.kind == "peer_lost" for f in findings if f.kind in ("peer_lost", "exception"))
    assert tails[3][-1].startswith("[rank 3/4] ready: culprit")


def test_unlabelled_log_still_attributes_torch_prefixed_tracebacks():
    findings, _tails, labelled = parse_rank_log((PM / "local_sig_job.out").read_text(), "job.out")
    assert not labelled
    assert sorted(f.rank for f in findings if f.kind == "peer_lost") == [0, 1, 2]
    killed = [f for f in findings if f.kind == "task_exit" and f.rank == 3]
    assert killed and killed[0].fields["signal"] == "9"


def test_gloo_timeout_lines_name_collective_and_timeout():
    findings, _, _ = parse_rank_log((PM / "local_to_job.out").read_text(), "job.out")
    timeouts = [f for f in findings if f.kind == "collective_timeout"]
    assert sorted(f.rank for f in timeouts) == [0, 1, 2]
    assert {f.fields["op"] for f in timeouts} == {"all_reduce"}
    assert {f.fields["timeout_ms"] for f in timeouts} == {"20000"}
    # srun -K1 terminating the others afterwards is a consequence
    assert {f.rank for f in findings if f.kind == "task_terminated"} == {0, 1, 3}


# ---------------------------------------------------------------- cores


def test_pystack_core_output_crashing_thread():
    pid, reason, frames = parse_pystack_core((PM / "pystack_core_segfault_native.txt").read_text())
    assert pid == 19665
    assert reason == "segmentation fault accessing address: 0x8"
    assert frames[0].native and frames[0].function == "__memcpy_avx_unaligned_erms"
    python = [f for f in frames if not f.native]
    assert python[0].function == "string_at" and python[1].function == "decode_sample"
    core = CoreStack(path="core", size=1, rank=3, frames=frames, tool="pystack")
    assert core_site(core) == "/work/wt/i16/tests/scenarios/postmortem/crash_modes.py:42"


def test_gdb_backtrace_frames():
    # GIVEN gdb 13's "bt" of a real core (python segfaulting in ctypes.string_at)
    frames = parse_gdb_backtrace((PM / "gdb_bt_python_segfault.txt").read_text())
    names = [f.function for f in frames]
    assert names[0] == "__memcpy_avx_unaligned_erms" and names[1] == "PyBytes_FromStringAndSize"
    assert frames[1].file == "Objects/bytesobject.c" and frames[1].line == 142
    # inlined frames without an address, and arguments holding parentheses and "<...>"
    six = frames[names.index("_ctypes_callproc")]
    assert six.file.endswith("Modules/_ctypes/callproc.c") and six.line == 1262
    assert frames[names.index("ffi_call")].file == "/lib/x86_64-linux-gnu/libffi.so.8"
    assert names[-1] == "_start" and len(frames) == 26


# ---------------------------------------------------------------- verdicts


def test_verdict_segfault_with_core():
    _, _, frames = parse_pystack_core((PM / "pystack_core_segfault_native.txt").read_text())
    core = CoreStack(path="/tmp/core", size=173154304, rank=3, pid=19665, frames=frames, tool="pystack",
                     reason="segmentation fault accessing address: 0x8")
    verdicts, _ = _verdicts("seg", cores=(core,))
    top = verdicts[0]
    assert top.kind == "rank_crashed" and top.culprit_ranks == (3,)
    assert "SIGSEGV" in top.summary and "ranks 0-2 only died because of it" in top.summary
    assert top.sites == ("/work/wt/i16/tests/scenarios/postmortem/crash_modes.py:42",)


def test_verdict_signal_kill():
    verdicts, _ = _verdicts("sig")
    assert verdicts[0].kind == "rank_killed" and verdicts[0].culprit_ranks == (3,)
    assert "SIGKILL" in verdicts[0].summary


def test_verdict_gloo_timeout_with_flight_recorder():
    section = read_flight_recorder([str(PM / "fr-")], 4)
    assert section is not None and section["missing_ranks"] == [3]
    flight = _flight_summary(section)
    verdicts, _ = _verdicts("to", flight=flight)
    top = verdicts[0]
    assert top.kind == "collective_timeout" and top.culprit_ranks == (3,)
    assert "all_reduce" in top.summary and f"#{flight['last_seq']}" in top.summary
    assert any("no dump from ranks 3" in e for e in top.evidence)
    # srun -K1 cancelled the step: that is not a user's cancel
    assert all(v.kind != "cancelled" for v in verdicts)


def test_verdict_user_cancel_is_not_a_failure():
    verdicts, _ = _verdicts("can")
    assert [v.kind for v in verdicts] == ["cancelled"]
    assert verdicts[0].severity == "info" and "root" in verdicts[0].summary


def test_verdict_time_limit():
    verdicts, _ = _verdicts("tl")
    assert verdicts[0].kind == "time_limit" and verdicts[0].severity == "critical"


def test_verdict_node_failure_names_the_dead_node_and_its_ranks():
    # GIVEN a real job whose node004 died under it (slurmd, step daemon and ranks 2-3 killed;
    # slurmctld ended the job NODE_FAIL after SlurmdTimeout)
    verdicts, _ = _verdicts("nf")
    # THEN the node, not the ranks that lost their peers, is the cause
    top = verdicts[0]
    assert top.kind == "node_failure" and top.culprit_ranks == (2, 3), verdicts
    assert "node node004 failed" in top.summary and "ranks 0-1 only died because of it" in top.summary
    assert any("Node failure on node004" in e for e in top.evidence)
    assert [v.kind for v in verdicts].count("node_failure") == 1


def test_verdict_node_failure_without_srun_labels(tmp_path):
    # GIVEN the same log without srun --label and without srun's task lines (torch's [rankN]:
    # prefixes remain)
    text = (PM / "local_nf_job.out").read_text()
    log = tmp_path / "job.out"
    log.write_text("\n".join(line.split(": ", 1)[1] if line[:1].isdigit() else line
                              for line in text.splitlines() if ": task " not in line) + "\n")
    logs = read_rank_logs([(str(log), None)], owner_uid=OWN)
    verdicts = postmortem_verdicts(_record("nf"), logs.findings, (), logs.last_lines, 4, None)
    # THEN the ranks that said nothing at the end were on the dead node
    assert verdicts[0].kind == "node_failure" and verdicts[0].culprit_ranks == (2, 3)


def test_a_crash_before_the_node_failed_stays_first():
    # GIVEN the node-failure job's findings with a rank's SIGSEGV written before srun's line
    record = _record("nf")
    logs = read_rank_logs([(str(PM / "local_nf_job.out"), None)], owner_uid=OWN)
    crash = LogFinding("job.out", 1, "fatal_signal", "Fatal Python error: Segmentation fault", 1,
                       None, {"signal": "11", "order": "0:1"})
    verdicts = postmortem_verdicts(record, (crash, *logs.findings), (), logs.last_lines, 4, None)
    # THEN the crash is the first verdict and the node failure is still reported
    assert [v.kind for v in verdicts][:2] == ["rank_crashed", "node_failure"]


# ---------------------------------------------------------------- errors (runner injected)


def _runner(outputs: dict[str, tuple[int, str, str]]):
    def run(argv, timeout, *, env=None, input=None):
        key = " ".join(argv)
        for pattern, (rc, out, err) in outputs.items():
            if pattern in key:
                return CommandResult(tuple(argv), rc, out, err)
        return CommandResult(tuple(argv), 1, "", "unexpected")
    return run


def test_job_that_never_ran_is_not_found():
    empty = '{"meta": {"plugin": {"type": "openapi/dbv0.0.38"}}, "errors": [], "jobs": []}'
    runner = _runner({"--json": (0, empty, ""), "--parsable2": (0, "JobID|State\n", ""),
                      "scontrol": (1, "", "slurm_load_jobs error: Invalid job id specified")})
    with pytest.raises(JobNotFound):
        read_slurm_record(parse_job_id("999999"), runner)


def test_running_job_points_to_attach():
    text = (PM / "sacct_22.05_parsable2_can.txt").read_text().replace("CANCELLED by 0", "RUNNING")
    runner = _runner({"--json": (1, "", "sacct: error: unrecognized option '--json'"),
                      "--parsable2": (0, text, "")})
    with pytest.raises(JobNotRunning) as info:
        read_slurm_record(parse_job_id("703604"), runner)
    assert "attach" in info.value.hint


def test_no_accounting_uses_slurmctld_memory():
    show = (SLURM / "local_22.05_show_job_d_o_2node.txt").read_text().replace("JobState=RUNNING", "JobState=FAILED")
    runner = _runner({"sacct": (1, "", "sacct: error: Slurm accounting storage is disabled"),
                      "scontrol": (0, show, "")})
    job_id = show.split("JobId=")[1].split()[0]
    record = read_slurm_record(parse_job_id(job_id), runner)
    assert record.source == "scontrol" and record.job.state == "FAILED"
    assert any("accounting" in n for n in record.notes)


def test_logs_gone_is_one_error_with_a_hint(tmp_path):
    text = (PM / "sacct_22.05_parsable2_seg.txt").read_text().replace("/tmp/i16-pm/seg", str(tmp_path))
    runner = _runner({"--json": (1, "", "unrecognized option"), "--parsable2": (0, text, "")})
    with pytest.raises(LogsGone) as info:
        build_postmortem("703602", runner=runner, cores=False)
    assert "--log" in info.value.hint and LogsGone.exit_code == 9


def test_record_is_acct_record():
    assert AcctRecord(job_id="1", step="0").step_id == "1.0"


def test_read_record_22_05_takes_exit_codes_from_the_text():
    # GIVEN Slurm 22.05, whose JSON says exit 0 for a job that died of SIGSEGV (text: 11:0)
    runner = _runner({"--json": (0, (PM / "sacct_22.05_json_seg.json").read_text(), ""),
                      "--parsable2": (0, (PM / "sacct_22.05_parsable2_seg.txt").read_text(), "")})
    # WHEN the record is read THEN the job's exit code is the text's, and a note says why
    record = read_slurm_record(parse_job_id("703602"), runner)
    assert record.source == "sacct --json" and record.job.exit_code == 11
    assert any("--parsable2" in note for note in record.notes)


def test_timeout_culprit_uses_flight_recorder_when_waiters_were_cut_short():
    # GIVEN the gloo-timeout job's log where only rank 2's timeout survived (srun -K1 killed
    # ranks 0 and 1 before they printed), and all three waiters' Flight Recorder dumps
    record = _record("to")
    logs = read_rank_logs([(str(PM / "local_to_job.out"), None)], owner_uid=OWN)
    findings = [f for f in logs.findings if not (f.kind == "collective_timeout" and f.rank in (0, 1))]
    flight = _flight_summary(read_flight_recorder([str(PM / "fr-")], 4))
    # WHEN judged with the dumps THEN rank 3 alone never reached the collective
    verdicts = postmortem_verdicts(record, findings, (), logs.last_lines, 4, flight)
    assert verdicts[0].kind == "collective_timeout" and verdicts[0].culprit_ranks == (3,)
    # AND every waiter is named, those without a timeout of their own said apart
    assert verdicts[0].summary.startswith(
        "ranks 0-2 waited in all_reduce"), verdicts[0].summary
    assert ": 2 timed out after 20 s, 0-1 ended before their own timeout" in verdicts[0].summary
    # AND without the dumps the ranks cut short cannot be told apart, and the verdict says so
    blind = postmortem_verdicts(record, findings, (), logs.last_lines, 4, {})
    assert blind[0].culprit_ranks == (0, 1, 3)
    assert any("terminated by srun before they could report" in e for e in blind[0].evidence)


def test_timeout_culprit_that_reached_the_collective_late_stays_the_culprit():
    # GIVEN a real gloo timeout (srun -K0) where rank 3's read returned after the others timed
    # out: it then entered the all_reduce too (its Flight Recorder dump has the same collective)
    # and failed with "Connection closed by peer"
    late = PM / "late"
    logs = read_rank_logs([(str(late / "local_to_late_job.out"), None)], owner_uid=OWN)
    flight = _flight_summary(read_flight_recorder([str(late / "fr-")], 4))
    # rank 3's entry for the last collective was created 40 s after the others' (timeout 20 s)
    assert flight["reached_ranks"] == [0, 1, 2] and flight["late_ranks"] == [3] and flight["timed"]
    # WHEN judged THEN the rank that never timed out and spoke only after is still the culprit
    verdicts = postmortem_verdicts(_record("to"), logs.findings, (), logs.last_lines, 4, flight)
    assert verdicts[0].kind == "collective_timeout" and verdicts[0].culprit_ranks == (3,)


@pytest.mark.parametrize("name", sorted(p.stem for p in (FIXTURES.parent / "scenarios" / "postmortem").glob("*.json")))
def test_postmortem_scenario_truth_matches_source(name):
    import json

    truth = json.loads((FIXTURES.parent / "scenarios" / "postmortem" / f"{name}.json").read_text())
    assert truth["name"] == name and truth["expected_kind"]
    if truth["culprit_site"]:
        path, line = truth["culprit_site"].rsplit(":", 1)
        text = (FIXTURES.parents[1] / path).read_text().splitlines()[int(line) - 1]
        assert "# CULPRIT" in text or "# WAITING" in text, text


def test_report_shows_where_the_post_mortem_came_from(tmp_path):
    # GIVEN the real post-mortem of the segfaulted job (sacct and log captured on the cluster)
    from slurmdiag.post_mortem.build import postmortem_job

    runner = _runner({"--json": (0, (PM / "sacct_22.05_json_seg.json").read_text(), ""),
                      "--parsable2": (0, (PM / "sacct_22.05_parsable2_seg.txt").read_text(), "")})
    result = postmortem_job("703602", out_dir=tmp_path, runner=runner, cores=False,
                            logs=(str(PM / "local_seg_job.out"),))
    # THEN the HTML report names the source, the first error and what could not be read
    html = (tmp_path / "report.html").read_text()
    assert "Post-mortem from" in html and "sacct --json" in html
    assert "task 3: Segmentation fault (core dumped)" in html
    assert "core files not searched" in html
    # AND the ranks' last stacks are side by side: rank 3's crash has no core here, the others'
    # tracebacks are in the all_reduce
    assert result.snapshot.verdicts[0].kind == "rank_crashed"
    assert sorted(r.rank for _, r in result.snapshot.all_ranks()) == [0, 1, 2]


@pytest.mark.parametrize("source", ["logdir", "tee"])
def test_torchrun_log_dir_and_tee_name_the_rank_that_raised(source):
    # GIVEN a real torchrun job (2 workers) whose rank 1 raised ValueError after step 2, while
    # rank 0 then lost its peer: torchrun's --log-dir files, or its --tee console
    # ("[default1]:[rank1]: ...")
    from slurmdiag.post_mortem.logs import files_under

    base = PM / "torchrun"
    if source == "logdir":
        files = files_under(str(base / "logdir"))
        assert len(files) == 4
        logs = read_rank_logs([(f, None) for f in files], owner_uid=OWN)
    else:
        logs = read_rank_logs([(str(base / "local_torchrun_tee_job.out"), None)], owner_uid=OWN)
    cause = first_cause(logs.findings)
    # THEN the first cause is rank 1's exception, not rank 0's lost connection
    assert cause is not None and cause.rank == 1 and cause.kind == "exception"
    assert "bad label 7" in cause.text
    assert {f.rank for f in logs.findings if f.kind == "peer_lost"} == {0}
    job = AcctRecord(job_id="703623", step=None, state="FAILED", exit_code=1)
    verdicts = postmortem_verdicts(SlurmRecord(job=job), logs.findings, (), logs.last_lines, 2)
    assert verdicts[0].kind == "rank_exception" and verdicts[0].culprit_ranks == (1,)
    assert verdicts[0].sites == ("/tmp/i16-pm/tr/train.py:11",)


def test_submitit_per_task_files_are_found_and_read():
    # GIVEN a real submitit job (2 nodes x 2 tasks) whose task 2 raised KeyError
    from slurmdiag.post_mortem.logs import per_rank_files

    files = per_rank_files(str(PM), "703634")
    # THEN its <job>_<task>_log.out/.err files are found (one folder down), each with its rank
    assert sorted({rank for _, rank in files}) == [0, 1, 2, 3] and len(files) == 8
    assert per_rank_files(str(PM), "703635") == []
    logs = read_rank_logs(files, owner_uid=OWN)
    cause = first_cause(logs.findings)
    assert cause is not None and cause.rank == 2 and "KeyError" in cause.text
    assert any("task 0 of 4" in line for line in logs.last_lines[0])


def test_slurmdbd_down_is_said_and_slurmctld_used():
    show = (SLURM / "local_22.05_show_job_d_o_2node.txt").read_text().replace("JobState=RUNNING", "JobState=FAILED")
    down = ("sacct: error: slurm_persist_conn_open_without_init: failed to open persistent connection "
            "to host:127.0.0.1:7825: Connection refused\n"
            "sacct: error: Problem talking to the database: Connection refused\n")
    runner = _runner({"sacct": (1, "", down), "scontrol": (0, show, "")})
    job_id = show.split("JobId=")[1].split()[0]
    record = read_slurm_record(parse_job_id(job_id), runner)
    assert record.source == "scontrol"
    assert any(n.startswith("slurmdbd does not answer") for n in record.notes)


def test_python_api_returns_the_snapshot(tmp_path):
    import slurmdiag

    runner = _runner({"--json": (0, (PM / "sacct_22.05_json_sig.json").read_text(), ""),
                      "--parsable2": (0, (PM / "sacct_22.05_parsable2_sig.txt").read_text(), "")})
    snapshot = slurmdiag.postmortem("703603", runner=runner, cores=False,
                                    logs=(str(PM / "local_sig_job.out"),))
    assert snapshot.verdicts[0].kind == "rank_killed" and snapshot.report is None
    written = slurmdiag.postmortem("703603", runner=runner, cores=False, out_dir=tmp_path,
                                   logs=(str(PM / "local_sig_job.out"),))
    assert written.report == str(tmp_path / "report.html")
    assert (tmp_path / "snapshot.json").is_file()


def test_crash_evidence_lists_python_frames_before_native_ones():
    _, _, frames = parse_pystack_core((PM / "pystack_core_segfault_native.txt").read_text())
    core = CoreStack(path="/tmp/core", size=1, rank=3, frames=frames, tool="pystack")
    verdicts, _ = _verdicts("seg", cores=(core,))
    frame_lines = [e for e in verdicts[0].evidence if e.startswith("  ")]
    assert frame_lines[0].startswith("  string_at at ") and "decode_sample" in frame_lines[1]
    assert any("__memcpy_avx_unaligned_erms" in line for line in frame_lines[4:])


def test_cli_bad_job_id_and_missing_log(tmp_path, capsys):
    from slurmdiag.cli import main

    # a malformed id is a usage error before Slurm is asked
    assert main(["postmortem", "12x"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: ") and err[1].startswith("hint: ")
    # --help lists the options shared with attach
    with pytest.raises(SystemExit):
        main(["postmortem", "--help"])
    out = capsys.readouterr().out
    for option in ("--json", "--out", "--no-report", "--log", "--flight-recorder", "--no-cores"):
        assert option in out


def test_a_given_log_that_is_gone_is_the_same_error(tmp_path):
    text = (PM / "sacct_22.05_parsable2_sig.txt").read_text().replace("/tmp/i16-pm/sig", str(tmp_path))
    runner = _runner({"--json": (1, "", "unrecognized option"), "--parsable2": (0, text, "")})
    with pytest.raises(LogsGone):
        build_postmortem("703603", runner=runner, cores=False, logs=(str(tmp_path / "nope.out"),))


def test_a_core_file_of_another_user_or_a_link_is_not_read(tmp_path):
    # GIVEN a job directory holding a "core" owned by someone else and a "core.1" link to it
    from slurmdiag.post_mortem.cores import search_cores
    from slurmdiag.transport.run import CommandResult

    planted = tmp_path / "core"
    planted.write_bytes(b"\0SLURM_JOB_ID=7\0RANK=3\0")
    os.chown(planted, 65534, 65534)
    (tmp_path / "core.1").symlink_to(planted)
    calls = []

    def runner(argv, timeout):
        calls.append(argv)
        return CommandResult(argv=tuple(argv), returncode=1, stdout="", stderr="", duration_s=0.0)

    # WHEN the post-mortem looks for the job's cores as the job's user (root here)
    search = search_cores(str(tmp_path), "7", runner, owner_uid=os.getuid())
    # THEN the foreign core is reported as not read, the link is never followed, no tool ran on it
    assert [c.path for c in search.cores] == [str(planted)]
    assert search.cores[0].message.startswith("not read:") and search.cores[0].rank is None
    assert calls == []
