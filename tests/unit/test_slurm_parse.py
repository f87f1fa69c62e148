"""Tests of slurmdiag.slurm.parse on real Slurm outputs (tests/fixtures/slurm/).

Fixtures named ``local_22.05_*`` were captured on the local test cluster (see
tests/fixtures/slurm/LOCAL_CAPTURES.md); the others are public outputs listed in the shared
SOURCES.md. Inputs written by hand are marked SYNTHETIC.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from slurmdiag.errors import ParseError
from slurmdiag.hostlist import compress_hostlist, expand_hostlist, parse_int_ranges
from slurmdiag.slurm.parse import (
    SQUEUE_TEXT_FIELDS,
    SQUEUE_TEXT_FORMAT,
    JobNodeDetail,
    JobRef,
    SlurmJob,
    parse_job_id,
    parse_scontrol_job,
    parse_scontrol_job_json,
    parse_scontrol_node_addrs,
    parse_squeue_json,
    parse_squeue_text,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slurm"


def read(name: str) -> str:
    return (FIXTURES / name).read_text()


def one_job(name: str) -> SlurmJob:
    jobs = parse_scontrol_job(read(name))
    assert len(jobs) == 1
    return jobs[0]


SCONTROL_TEXT_FIXTURES = sorted(
    p.name
    for p in FIXTURES.glob("*.txt")
    if (p.name.startswith(("irush_", "tgcc_", "idris_", "hyak_mox_scontrol", "freenodes_"))
        or p.name.startswith("local_22.05_show_job"))
    and "forged" not in p.name  # a job name that forges fields: refused (test_hostile_text.py)
)

# ---------------------------------------------------------------------------------------------
# Integer ranges in job records
# ---------------------------------------------------------------------------------------------


def test_truncated_cpu_ids_stay_text() -> None:
    # GIVEN a real record whose CPU_IDs= Slurm itself truncated ("...,112,115-")
    detail = one_job("irush_truncated_cpu_ids.txt").details[0]
    # WHEN parsed THEN the value is kept verbatim (not expanded, not an error) ...
    assert detail.cpu_ids.startswith("2-3,6-7,10,") and detail.cpu_ids.endswith(",112,115-")
    assert (detail.nodes, detail.mem, detail.gres) == (("node-12",), "70000", None)
    # ... because it is not a valid range list any more
    with pytest.raises(ValueError):
        parse_int_ranges(detail.cpu_ids)


# ---------------------------------------------------------------------------------------------
# Job ids
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        ("123", JobRef("123")),
        (" 2398617 ", JobRef("2398617")),
        ("2398463_150", JobRef("2398463", array_task=150)),
        ("5+1", JobRef("5", het_offset=1)),
    ],
)
def test_parse_job_id_forms(text: str, ref: JobRef) -> None:
    # GIVEN the three ways a user names a job  WHEN parsed  THEN parts and canonical str match
    parsed = parse_job_id(text)
    assert parsed == ref
    assert str(parsed) == text.strip()


@pytest.mark.parametrize("text", ["", "abc", "123.0", "123_[1-3]", "123_4+1", "-5", "12 3", "4_"])
def test_parse_job_id_rejects_other_forms(text: str) -> None:
    # GIVEN steps, ranges, names  WHEN parsed  THEN ValueError explaining the accepted forms
    with pytest.raises(ValueError, match="123_4"):
        parse_job_id(text)


# ---------------------------------------------------------------------------------------------
# scontrol show job (text)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SCONTROL_TEXT_FIXTURES)
def test_every_scontrol_fixture_parses_consistently(name: str) -> None:
    # GIVEN any real `scontrol show job` output, Slurm 14 to 22.05, -o or multi-line
    text = read(name)
    # WHEN parsed
    jobs = parse_scontrol_job(text)
    # THEN there is one job per JobId= record, each with its id, state and user
    assert len(jobs) == len(re.findall(r"^JobId=", text, flags=re.MULTILINE))
    for job in jobs:
        assert job.job_id and job.job_id == job.raw["JobId"]
        assert job.state in {"RUNNING", "PENDING", "COMPLETED", "CANCELLED"}
        assert job.user and "(" not in job.user
        assert job.name
        # no value swallowed the next key (tokenizer sanity on every record)
        assert all(not re.search(r"\s[A-Z][A-Za-z/:]+=", v) for k, v in job.raw.items()
                   if k not in {"Command", "JobName", "Name"})  # fmt: skip
        if job.state == "RUNNING":
            assert job.num_nodes == len(job.nodes) and job.nodes
            detail_nodes = [n for d in job.details for n in d.nodes]
            if detail_nodes:  # -d output: detail lines cover exactly the allocation
                assert sorted(detail_nodes) == sorted(job.nodes)
        if job.state == "PENDING":
            assert job.nodes == () and job.details == ()


def test_slurm14_oneliner_with_embedded_detail_blocks() -> None:
    # GIVEN a real Slurm 14 `scontrol -o -d show job` dump of 46 jobs (Name=, Shared=, ReqS:C:T,
    # several "   Nodes=.. CPU_IDs=.. Mem=.." blocks in the middle of each line)
    jobs = parse_scontrol_job(read("freenodes_oneliner_slurm14.txt"))
    # WHEN parsed THEN every job is there with states as printed
    assert len(jobs) == 46
    states = [j.state for j in jobs]
    assert states.count("RUNNING") == 38 and states.count("CANCELLED") == 7
    assert states.count("PENDING") == 1
    first = jobs[0]
    assert (first.job_id, first.name, first.user, first.partition) == (
        "3808", "strongVAR1_10000", "dvorakm", "long",
    )  # fmt: skip
    assert first.nodes == ("r21",) and first.run_time == "3-18:20:13"
    assert first.details == (JobNodeDetail(("r21",), "11", "0", None),)
    assert first.raw["Shared"] == "OK" and first.raw["ReqS:C:T"] == "*:*:*"
    # the last key of the line is not swallowed by Command=
    assert first.command == "/srv/groot/dvorakm/strongVAR/strongVAR1_10000"
    assert first.work_dir == "/srv/groot/dvorakm/strongVAR"
    # AND a 13-node job keeps its six compressed detail blocks, one per CPU layout
    job = next(j for j in jobs if j.job_id == "4268")
    assert job.nodes == tuple(expand_hostlist("r[1-5,11,16-17,23-27]")) and job.num_nodes == 13
    assert [(compress_hostlist(d.nodes), d.cpu_ids) for d in job.details] == [
        ("r[1-2]", "0-7"), ("r[3-5]", "0-11"), ("r11", "1-3"), ("r[16-17]", "0-7"),
        ("r23", "0-8"), ("r[24-27]", "0-11"),
    ]  # fmt: skip


def test_multinode_detail_lines_with_empty_gres_idx() -> None:
    # GIVEN a real 17.11/18.08 3-node job with one detail line per node and empty GRES_IDX=
    job = one_job("irush_multinode_gres_idx_empty.txt")
    # WHEN parsed THEN nodes and per-node CPUs/memory are read
    assert (job.job_id, job.name, job.user, job.state) == ("1", "name1", "user1", "RUNNING")
    assert job.nodes == ("node-63", "node-64", "node-65") and job.batch_host == "node-63"
    assert (job.num_nodes, job.num_tasks, job.num_cpus) == (3, 8, 8)
    assert job.details == (
        JobNodeDetail(("node-63",), "22-23", "1000", None),
        JobNodeDetail(("node-64",), "0,4-7", "2000", None),
        JobNodeDetail(("node-65",), "20-21", "1000", None),
    )
    assert job.stdout == "/location/with/out.txt" and job.stderr == "/location/with/err.txt"
    assert job.time_limit == "1-00:00:00" and job.start_time == "2019-01-31T10:35:53"


def test_compressed_detail_line_and_fractional_tres() -> None:
    # GIVEN a real TGCC epilogue: 4 nodes, ONE detail line with a compressed Nodes= list
    job = one_job("tgcc_irene_4node_compressed_nodelist.txt")
    # WHEN parsed THEN the detail applies to all four nodes and the TRES is kept verbatim
    assert job.nodes == ("inti6012", "inti6015", "inti6018", "inti6019")
    assert job.details == (JobNodeDetail(job.nodes, "0-255", "240000", None),)
    assert job.tres == "cpu=512,mem=937.50G,node=4,billing=512"
    assert job.raw["JOB_GRES"] == "(null)"


def test_banner_before_record_and_trailing_blank_line_are_ignored() -> None:
    # GIVEN a real epilogue that prints "--------------------" before the record and a
    # whitespace-only line after Power=
    text = read("tgcc_irene_1node_job_gres_null.txt")
    assert text.startswith("--------------------\n")
    # WHEN parsed THEN one clean record, Power= empty, GRES= empty -> None
    [job] = parse_scontrol_job(text)
    assert (job.job_id, job.user, job.nodes) == ("2120439", "tabernera", ("inti6015",))
    assert job.raw["Power"] == "" and job.raw["Scheduler"] == "Main"
    assert job.details == (JobNodeDetail(("inti6015",), "128-255", "120000", None),)


@pytest.mark.parametrize(
    ("name", "job_id", "array_job_id", "task", "state"),
    [
        ("irush_array_task_completed.txt", "2398617", "2398463", "150", "COMPLETED"),
        ("irush_array_throttle_gpu_idx.txt", "2423559", "2423430", "72", "RUNNING"),
    ],
)
def test_array_tasks(name: str, job_id: str, array_job_id: str, task: str, state: str) -> None:
    # GIVEN real array-task records  WHEN parsed  THEN own id, array id and task id are separate
    job = one_job(name)
    assert (job.job_id, job.array_job_id, job.array_task_id, job.state) == (
        job_id, array_job_id, task, state,
    )  # fmt: skip


def test_array_with_pending_meta_record_local_capture() -> None:
    # GIVEN `scontrol show job -d 4` on the local 22.05 cluster: array 1-4%2, two tasks running
    for name in ("local_22.05_show_job_d_array_throttle.txt",
                 "local_22.05_show_job_d_o_array_throttle.txt"):  # fmt: skip
        # WHEN parsed (multi-line and -o give the same)
        jobs = parse_scontrol_job(read(name))
        # THEN the pending meta-record carries the remaining task range
        assert [(j.job_id, j.array_job_id, j.array_task_id, j.state) for j in jobs] == [
            ("4", "4", "3-4%2", "PENDING"), ("8", "4", "2", "RUNNING"), ("7", "4", "1", "RUNNING"),
        ]  # fmt: skip
        assert jobs[0].nodes == () and jobs[0].raw["NodeList"] == ""
        assert jobs[0].raw["ArrayTaskThrottle"] == "2" and jobs[0].reason == "JobArrayTaskLimit"
        assert jobs[1].nodes == ("node001",) and jobs[1].details[0].cpu_ids == "7"


def test_old_gres_idx_detail_and_job_gres_lines() -> None:
    # GIVEN real records of three GRES eras: GRES_IDX= (18.08), GRES=gpu(IDX:5) (19.05),
    # JOB_GRES= + typed/count-only GRES (23.x+)
    old = one_job("irush_gpu_gres_idx_old_format.txt")
    mid = one_job("irush_array_throttle_gpu_idx.txt")
    new = one_job("irush_job_gres_typed_gpu.txt")
    multi = one_job("irush_job_gres_multi_gres.txt")
    # WHEN parsed THEN each detail's GRES text is kept and job-level keys stay job-level
    assert old.details[0] == JobNodeDetail(("node-06",), "10-11,15,21", "81920", "gpu(IDX:0,2-3,5)")
    assert old.raw["Gres"] == "gpu:4"
    assert mid.details[0].gres == "gpu(IDX:5)" and mid.raw["TresPerNode"] == "gpu:1"
    assert new.details[0].gres == "gpu:rtx2080:1(IDX:1),gg:g0(CNT:1)"
    assert new.raw["JOB_GRES"] == "gpu:rtx2080:1,gg:g0:1"
    assert "DerivedExitCode" not in new.raw
    assert multi.details[0].gres == "gg:g0(CNT:1),gpu:1(IDX:3)"
    # "NtasksPerTRES:0" uses a colon: it must be its own key, not glued to TresPerNode
    assert multi.raw["TresPerNode"] == "gg:g0:1,gpu:1" and multi.raw["NtasksPerTRES"] == "0"
    assert multi.raw["AllocNode:Sid"] == "alloc-node-02:381751"
    assert multi.raw["Licenses"] == "interactive:1"


def test_pending_jobs_without_nodes() -> None:
    # GIVEN real PENDING records: NodeList=(null), StartTime=Unknown, multi-partition, NumNodes=2-2
    assoc = one_job("irush_pending_assoc_limit_federation.txt")
    sched = one_job("irush_pending_schednodelist.txt")
    # WHEN parsed THEN no nodes, Unknown -> None, reason and partitions kept
    assert (assoc.job_id, assoc.state, assoc.reason) == ("134238037", "PENDING", "AssocGrpCpuLimit")
    assert assoc.nodes == () and assoc.start_time is None and assoc.end_time is None
    assert assoc.partition == "long,other" and assoc.command is None
    assert assoc.raw["FedOrigin"] == "debug"
    assert (sched.reason, sched.num_nodes, sched.raw["NumNodes"]) == ("PartitionConfig", 2, "2-2")
    assert sched.nodes == () and sched.raw["SchedNodeList"] == "doppelganger,dune3"
    assert sched.start_time == "2020-01-21T12:22:42"  # the scheduler's estimate


def test_anonymised_ids_and_alloc_tres_preferred() -> None:
    # GIVEN a real Jean Zay record (no -d) anonymised to JobId=XXXX, with ReqTRES/AllocTRES split
    job = one_job("idris_jeanzay_v100_gpu_job.txt")
    # WHEN parsed THEN odd-but-valid ids pass through and the allocated TRES wins
    assert (job.job_id, job.user, job.name) == ("XXXX", "XXXX", "gpu-jupyterhub")
    assert job.tres == "cpu=64,mem=128G,node=1,billing=40,gres/gpu=4"
    assert job.raw["ReqTRES"] == "cpu=32,mem=128G,node=1,billing=40,gres/gpu=4"
    assert job.nodes == ("r13i5n0",) and job.details == ()
    assert job.account == "puk@v100"


def test_interactive_job_without_stdout() -> None:
    # GIVEN a real 17.02 interactive (BatchFlag=0) record without StdOut/StdErr lines
    job = one_job("hyak_mox_scontrol_show_job_interactive_17.02.txt")
    # WHEN parsed THEN paths are None and the shell is the command
    assert (job.job_id, job.user, job.command) == ("32779", "seanb80", "/bin/bash")
    assert job.stdout is None and job.stderr is None and job.nodes == ("n2149",)


@pytest.mark.parametrize(
    "name",
    ["local_22.05_show_job_d_command_args_name_space.txt",
     "local_22.05_show_job_d_o_command_args_name_space.txt"],
)  # fmt: skip
def test_command_with_equals_args_and_name_with_space(name: str) -> None:
    # GIVEN a real 22.05 job submitted as `sbatch -J 'cap args' job.sh sims_A=900 --lr=0.1`
    # WHEN parsed, multi-line or -o
    job = one_job(name)
    # THEN `sims_A=` is not taken for a key and the name keeps its space
    assert job.name == "cap args"
    assert job.command == "/tmp/parsecap/job.sh sims_A=900 --lr=0.1"
    assert job.work_dir == "/tmp/parsecap" and job.stdout == "/tmp/parsecap/3.out"
    assert "sims_A" not in job.raw
    assert job.details == (JobNodeDetail(("node001",), "4-5", "0", None),)


def test_command_with_equals_in_oneliner_synthetic() -> None:
    # GIVEN a SYNTHETIC one-liner in the Slurm 14 layout where Command= is followed by more keys
    line = (
        "JobId=77 Name=sweep UserId=ana(1001) GroupId=ana(1001) JobState=RUNNING Reason=None "
        "NodeList=r[1-2] NumNodes=2 NumCPUs=2 Partition=long "
        "Command=/home/ana/run.sh sims_A=900 out=/tmp/x WorkDir=/home/ana StdOut=/home/ana/o.txt"
    )
    # WHEN parsed THEN only known Slurm keys end the command
    [job] = parse_scontrol_job(line + "\n")
    assert job.command == "/home/ana/run.sh sims_A=900 out=/tmp/x"
    assert (job.work_dir, job.stdout, job.nodes) == ("/home/ana", "/home/ana/o.txt", ("r1", "r2"))


@pytest.mark.parametrize(
    "name", ["local_22.05_show_job_d_het_running.txt", "local_22.05_show_job_d_o_het_running.txt"]
)
def test_het_job_components_local_capture(name: str) -> None:
    # GIVEN a real het job (5+0 on node002, 5+1 on node003) from the local 22.05 cluster
    jobs = parse_scontrol_job(read(name))
    # WHEN parsed THEN each component has its own id and the het id/offset
    assert [(j.job_id, j.het_job_id, j.het_job_offset, j.nodes) for j in jobs] == [
        ("5", "5", 0, ("node002",)), ("6", "5", 1, ("node003",)),
    ]  # fmt: skip
    assert jobs[0].raw["HetJobIdSet"] == "5-6"
    assert str(parse_job_id(f"{jobs[1].het_job_id}+{jobs[1].het_job_offset}")) == "5+1"


def test_het_job_pending_has_empty_nodelist_local_capture() -> None:
    # GIVEN the same het job captured while PENDING: 22.05 prints `NodeList=` (empty, not (null))
    jobs = parse_scontrol_job(read("local_22.05_show_job_d_het_pending.txt"))
    # WHEN parsed THEN no nodes, StartTime=Unknown -> None, NumNodes=1-1 -> 1
    assert [(j.job_id, j.het_job_offset, j.state, j.nodes, j.start_time) for j in jobs] == [
        ("5", 0, "PENDING", (), None), ("6", 1, "PENDING", (), None),
    ]  # fmt: skip
    assert jobs[1].num_nodes == 1 and jobs[1].raw["NumNodes"] == "1-1"


def test_het_job_old_pack_keys_synthetic() -> None:
    # GIVEN a SYNTHETIC 19.05-style het component (PackJobId/PackJobOffset, renamed in 20.02)
    text = (
        "JobId=101 PackJobId=100 PackJobOffset=1 JobName=het\n"
        "   PackJobIdSet=100-101\n"
        "   UserId=bo(7) GroupId=bo(7) MCS_label=N/A\n"
        "   JobState=RUNNING Reason=None Dependency=(null)\n"
        "   NodeList=gpu[3-4]\n"
        "   NumNodes=2 NumCPUs=8 NumTasks=8 CPUs/Task=1 ReqB:S:C:T=0:0:*:*\n"
    )
    # WHEN parsed THEN the pack keys fill the het fields
    [job] = parse_scontrol_job(text)
    assert (job.job_id, job.het_job_id, job.het_job_offset) == ("101", "100", 1)
    assert job.nodes == ("gpu3", "gpu4")


def test_multi_and_oneliner_forms_agree_on_local_capture() -> None:
    # GIVEN the same 22.05 job printed multi-line and with -o
    multi = one_job("local_22.05_show_job_d_2node.txt")
    oneline = one_job("local_22.05_show_job_d_o_2node.txt")
    # WHEN both are parsed THEN every field and every raw key is identical
    assert multi == oneline and multi.raw == oneline.raw
    assert multi.nodes == ("node001", "node002") and multi.user == "root"
    assert [d.cpu_ids for d in multi.details] == ["1-3", "1"]
    assert multi.account is None  # Account=(null) on a cluster without accounting


def test_several_multiline_records_separated_by_blank_lines() -> None:
    # GIVEN two real records concatenated the way `scontrol show job` prints several jobs
    text = read("irush_array_task_completed.txt") + "\n" + read("irush_gpu_gres_idx_old_format.txt")
    # WHEN parsed THEN two jobs in order, nothing leaking between them
    jobs = parse_scontrol_job(text)
    assert [j.job_id for j in jobs] == ["2398617", "153291"]
    assert jobs[0].stdout == "/location/with/other/dir/a.out" and jobs[1].nodes == ("node-06",)


@pytest.mark.parametrize("text", ["", "\n\n", "No jobs in the system\n"])
def test_no_jobs_is_an_empty_list(text: str) -> None:
    # GIVEN scontrol's empty answers  WHEN parsed  THEN no jobs, no error
    assert parse_scontrol_job(text) == []


@pytest.mark.parametrize(
    "text", ["slurm_load_jobs error: Invalid job id specified\n", "<html>proxy error</html>"]
)
def test_unparseable_scontrol_text_raises_parse_error(text: str) -> None:
    # GIVEN text that holds no job record  WHEN parsed  THEN ParseError quoting the input
    with pytest.raises(ParseError, match="JobId="):
        parse_scontrol_job(text)


def test_slurm_job_is_hashable_and_frozen() -> None:
    # GIVEN a parsed job  WHEN hashed or mutated  THEN it behaves as a frozen value
    job = one_job("irush_gpu_gres_idx_old_format.txt")
    assert hash(job) == hash(one_job("irush_gpu_gres_idx_old_format.txt"))
    with pytest.raises(AttributeError):
        job.state = "FAILED"  # type: ignore[misc]


# ---------------------------------------------------------------------------------------------
# JSON (scontrol --json, squeue --json, slurmrestd)
# ---------------------------------------------------------------------------------------------


def test_json_v0041_two_gpu_nodes() -> None:
    # GIVEN a real slurmrestd 24.05 (data_parser v0.0.41) record: numbers wrapped in
    # {set,infinite,number}, job_state a list, nodes "gpu[1-2]", per-node gres_detail
    [job] = parse_scontrol_job_json(read("slurmrestd_24.05_v0041_job_gpus_multi_nodes.json"))
    # WHEN parsed THEN the same SlurmJob as from text
    assert (job.job_id, job.name, job.user, job.state) == ("11", "wrap", "jthomas", "RUNNING")
    assert job.nodes == ("gpu1", "gpu2") and job.num_nodes == 2 and job.num_tasks == 2
    assert job.start_time == "2025-11-07T15:34:48+00:00" and job.time_limit == "00:01:00"
    assert job.reason is None and job.array_job_id is None and job.het_job_id is None
    assert job.details == (
        JobNodeDetail(("gpu1",), "0", "512", "gpu:h100:4(IDX:0-3)"),
        JobNodeDetail(("gpu2",), "0", "512", "gpu:h100:4(IDX:0-3)"),
    )
    assert job.tres == "cpu=2,mem=1G,node=2,billing=2"  # gres/gpu absent even so: Slurm's quirk
    assert job.raw["tres_per_job"] == "gres/gpu:8"


def test_json_v0044_pending_and_running() -> None:
    # GIVEN real slurmrestd 25.11 (v0.0.44) records of a pending and a running job
    [pending] = parse_scontrol_job_json(read("slurmrestd_25.11_v0044_job_gpus_pending.json"))
    [running] = parse_scontrol_job_json(read("slurmrestd_25.11_v0044_job_running.json"))
    # WHEN parsed THEN pending has no nodes and its reason; paths use the *_expanded fields
    assert (pending.job_id, pending.state, pending.reason) == ("4965", "PENDING", "BeginTime")
    assert pending.nodes == () and pending.details == ()
    assert pending.stdout == "/home/jwilson/slurm-4965.out"  # standard_output is "slurm-%j.out"
    assert (running.job_id, running.user, running.nodes) == ("5748", "vhartman", ("cn1",))
    assert running.details == (JobNodeDetail(("cn1",), "13", "512", None),)
    assert running.partition == "normal" and running.batch_host == "cn1"


def test_json_v0037_plain_ints_and_array_meta_record() -> None:
    # GIVEN a real squeue --json from 21.08 (openapi v0.0.37; plain ints, "Slurm" meta key);
    # its second job already uses wrapped numbers
    text = read("squeue_json_21.08_openapi_v0037.json")
    # WHEN parsed by either JSON entry point
    jobs = parse_squeue_json(text)
    assert jobs == parse_scontrol_job_json(text)
    # THEN the running job and the pending array meta-record are read
    running, pending = jobs
    assert (running.job_id, running.user, running.state, running.nodes) == (
        "26515966", "bkd", "RUNNING", ("cs75",),
    )  # fmt: skip
    assert running.time_limit == "21-00:00:00" and running.command == "sleep 100"
    assert running.details == (JobNodeDetail(("cs75",), "", "64000", None),)
    assert (pending.job_id, pending.array_job_id, pending.array_task_id) == (
        "58948420", "58948420", "1-10",
    )  # fmt: skip
    assert pending.start_time is None and pending.reason == "Dependency"
    assert pending.time_limit == "23:59:00"


@pytest.mark.parametrize(
    "text", ["not json", '{"meta": {}, "errors": []}', "[1, 2"]
)  # fmt: skip
def test_unparseable_json_raises_parse_error(text: str) -> None:
    # GIVEN output that is not a job document  WHEN parsed  THEN ParseError
    with pytest.raises(ParseError):
        parse_scontrol_job_json(text)


def test_json_without_jobs_is_empty() -> None:
    # GIVEN a SYNTHETIC reply for an unknown job id: an empty jobs list plus an error entry
    text = '{"jobs": [], "errors": [{"error": "Invalid job id specified", "error_number": 2017}]}'
    # WHEN parsed THEN no jobs (the caller turns that into JobNotFound)
    assert parse_scontrol_job_json(text) == []


def test_json_het_component_synthetic() -> None:
    # GIVEN a SYNTHETIC v0.0.41-style het component (no real JSON het fixture exists)
    text = (
        '{"jobs": [{"job_id": 61, "het_job_id": {"set": true, "infinite": false, "number": 60},'
        ' "het_job_offset": {"set": true, "infinite": false, "number": 1},'
        ' "job_state": ["RUNNING"], "nodes": "n[01-02]", "user_name": "ana",'
        ' "time_limit": {"set": true, "infinite": true, "number": 0}}]}'
    )
    # WHEN parsed THEN het fields are set, infinite limit reads UNLIMITED, padding is kept
    [job] = parse_scontrol_job_json(text)
    assert (job.job_id, job.het_job_id, job.het_job_offset) == ("61", "60", 1)
    assert job.nodes == ("n01", "n02") and job.time_limit == "UNLIMITED"


# ---------------------------------------------------------------------------------------------
# squeue text
# ---------------------------------------------------------------------------------------------


def test_squeue_default_format_on_local_capture() -> None:
    # GIVEN real `squeue -h -o SQUEUE_TEXT_FORMAT` output from the local 22.05 cluster: a pending
    # array meta-row, plain jobs, array tasks and two het components
    assert SQUEUE_TEXT_FORMAT.count("|") == len(SQUEUE_TEXT_FIELDS) - 1
    jobs = parse_squeue_text(read("local_22.05_squeue_slurmdiag_format.txt"))
    # WHEN parsed THEN ids, array/het parts, names with spaces and node lists come through
    by_id = {j.job_id: j for j in jobs}
    assert list(by_id) == ["4", "2", "3", "7", "8", "5", "6"]
    assert (by_id["4"].array_job_id, by_id["4"].array_task_id, by_id["4"].state) == (
        "4", "3-4%2", "PENDING",
    )  # fmt: skip
    assert by_id["4"].reason == "JobArrayTaskLimit" and by_id["4"].start_time is None
    assert by_id["2"].nodes == ("node001", "node002") and by_id["2"].num_cpus == 4
    assert by_id["3"].name == "cap args" and by_id["3"].user == "root"
    assert (by_id["7"].array_job_id, by_id["7"].array_task_id) == ("4", "1")
    assert (by_id["6"].het_job_id, by_id["6"].het_job_offset, by_id["6"].nodes) == (
        "5", 1, ("node003",),
    )  # fmt: skip
    assert by_id["2"].time_limit == "10:00" and by_id["2"].start_time == "2026-11-22T00:26:04"


def test_squeue_name_holding_the_delimiter_synthetic() -> None:
    # GIVEN a SYNTHETIC row in our format whose job name contains "|" (NAME is the last column)
    row = (
        "9|9|ana|RUNNING|None|gpu|1|8|1:02|1:00:00|2026-01-01T10:00:00|2026-01-01T09:59:00|g01|a|b"
    )
    # WHEN parsed THEN the extra delimiter stays in the name
    [job] = parse_squeue_text(row + "\n")
    assert (job.job_id, job.name, job.nodes) == ("9", "a|b", ("g01",))


# The field list of facebookresearch/gcm's squeue call (gcm/schemas/slurm/squeue.py,
# JOB_DATA_SLURM_FIELDS, each printed as `-O NAME:|#`); the fixture predates LASTSCHEDEVAL.
GCM_SQUEUE_FIELDS = (
    "TRES-PER-NODE", "MINCPUS", "JOBARRAYID", "JOBID", "NAME", "TIMELIMIT", "MINMEMORY", "COMMAND",
    "PRIORITY", "STATE", "USERNAME", "NUMCPUS", "NUMNODES", "TIMELEFT", "TIMEUSED", "NODELIST",
    "DEPENDENCY", "EXCNODES", "STARTTIME", "SUBMITTIME", "ELIGIBLETIME", "ACCRUETIME",
    "PENDINGTIME", "COMMENT", "PARTITION", "ACCOUNT", "QOS", "REASON", "TRES-ALLOC",
    "RESERVATION", "REQUEUE", "FEATURE", "RESTARTCNT", "SCHEDNODES",
)  # fmt: skip


def test_squeue_custom_O_format_with_hash_delimiter() -> None:
    # GIVEN real `squeue -O FIELD:|#,...` output (every field followed by "|#")
    text = read("squeue_custom_format_hash_delim_meta.txt")
    # WHEN parsed with that field list and delimiter
    jobs = parse_squeue_text(text, fields=GCM_SQUEUE_FIELDS, delimiter="|#")
    # THEN array ids, node lists and pending rows are read
    assert [j.job_id for j in jobs] == ["45704744", "42953598", "42956774", "22783212", "42271120"]
    big = jobs[2]
    assert (big.array_job_id, big.array_task_id, big.num_nodes) == ("42956774", "3", 32)
    assert len(big.nodes) == 32 and big.nodes[0] == "node1281" and big.nodes[-1] == "node1384"
    assert (jobs[1].array_job_id, jobs[1].array_task_id) == ("42953390", "320")
    throttled = jobs[4]
    assert (throttled.array_task_id, throttled.state, throttled.reason) == (
        "7-8%1", "PENDING", "JobArrayTaskLimit",
    )  # fmt: skip
    assert throttled.nodes == () and throttled.tres.endswith("gres/gpu=160")  # type: ignore[union-attr]
    assert jobs[3].raw["DEPENDENCY"] == "afterok:22783211_*(failed)"
    assert jobs[0].raw["SCHEDNODES"] == "node1321"  # the trailing "|#" is not a column


def test_squeue_header_skipped_and_garbage_rejected() -> None:
    # GIVEN a SYNTHETIC header line (squeue without -h) then one row
    header = "|".join(SQUEUE_TEXT_FIELDS)
    row = "12|12|bo|RUNNING|None|cpu|2|4|0:10|10:00|N/A|N/A|c[1-2]|job"
    # WHEN parsed THEN the header is skipped
    assert [j.nodes for j in parse_squeue_text(f"{header}\n{row}\n")] == [("c1", "c2")]
    assert parse_squeue_text(header + "\n") == [] and parse_squeue_text("") == []
    # AND text without a single row of the right width raises ParseError
    with pytest.raises(ParseError):
        parse_squeue_text("squeue: error: Invalid user: nobody\n")


# ---------------------------------------------------------------------------------------------
# scontrol show node (addresses for the ssh transport)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "addrs"),
    [
        ("local_22.05_show_node_o.txt", {"node001": "127.0.0.1", "node002": "127.0.0.1"}),
        ("local_22.05_show_node_multiline.txt", {"node003": "127.0.0.1"}),
    ],
)
def test_node_addrs_local_capture(name: str, addrs: dict[str, str]) -> None:
    # GIVEN real `scontrol show node` output (-o and multi-line; OS= holds spaces and '#')
    # WHEN parsed THEN each node maps to its NodeAddr
    assert parse_scontrol_node_addrs(read(name)) == addrs


def test_node_addrs_reason_with_spaces_synthetic() -> None:
    # GIVEN a SYNTHETIC -o dump: one node drained with a free-text reason, one without NodeAddr
    text = (
        "NodeName=gpu01 Arch=x86_64 NodeAddr=10.0.0.11 NodeHostName=gpu01 State=DRAIN "
        "Reason=ECC errors on GPU 3 [root@2026-01-02T10:00:00] Comment=(null)\n"
        "NodeName=gpu02 Arch=x86_64 NodeHostName=gpu02 State=IDLE\n"
    )
    # WHEN parsed THEN only the node with an address is listed
    assert parse_scontrol_node_addrs(text) == {"gpu01": "10.0.0.11"}
    assert parse_scontrol_node_addrs("") == {}
    with pytest.raises(ParseError):
        parse_scontrol_node_addrs("Node gpu09 not found\n")
