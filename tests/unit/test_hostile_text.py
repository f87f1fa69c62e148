"""Job-controlled text in Slurm records, digits and frames (issue 12 point 8)."""

from __future__ import annotations

import base64
import json
import time
import zlib
from pathlib import Path

import pytest
from test_discover import VERSION_2205, FakeRunner

from slurmdiag.analysis.nic import parse_nccl_device_list
from slurmdiag.parsers.infiniband import parse_sysfs_ib_state
from slurmdiag.parsers.job_log import parse_srun_task_exits
from slurmdiag.safeio import decimal_int
from slurmdiag.slurm.discover import discover_job, job_ref_from_user
from slurmdiag.slurm.parse import ForgedJobRecord, parse_scontrol_job
from slurmdiag.transport.framing import FRAME_TAG, decode_frames, encode_frames

SLURM = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
ONE_LINE = (SLURM / "local_22.05_show_job_d_o_command_args_name_space.txt").read_text()
SQUEUE_JSON = (SLURM / "local_22.05_squeue_json_states_running.json").read_text()
HOSTILE_NAME = "cap args UserId=nobody(65534) StdOut=/etc/shadow"


def test_a_job_name_with_field_text_does_not_override_the_real_fields() -> None:
    # GIVEN the real one-line record (Slurm 22.05) of a job submitted with
    # -J 'x UserId=nobody(65534) StdOut=/etc/shadow'
    forged = (SLURM / "local_22.05_show_job_d_o_forged_name.txt").read_text()
    # WHEN it is parsed THEN it is refused as forged, never read as user nobody / /etc/shadow
    with pytest.raises(ForgedJobRecord):
        parse_scontrol_job(forged)


def test_the_real_forged_job_is_read_from_its_real_squeue_json() -> None:
    # GIVEN the real scontrol text and squeue --json of that job
    forged = (SLURM / "local_22.05_show_job_d_o_forged_name.txt").read_text()
    squeue = (SLURM / "local_22.05_squeue_json_forged_name.json").read_text()
    job_id = forged.split()[0].removeprefix("JobId=")
    runner = FakeRunner([VERSION_2205, (["scontrol", "show", "job"], (0, forged, "")),
                         (["squeue", "--json"], (0, squeue, ""))])
    # WHEN discovered THEN the real user, the whole name, not /etc/shadow
    job = discover_job(job_ref_from_user(job_id), runner)
    assert job.user == "root" and job.name == "x UserId=nobody(65534) StdOut=/etc/shadow"
    assert job.stdout != "/etc/shadow" and job.nodes == ("node001",)


def test_a_forged_field_absent_from_the_real_record_is_caught_by_the_order() -> None:
    # GIVEN an interactive-looking record (no StdOut) whose name adds one
    real = ONE_LINE.replace(" StdOut=/tmp/parsecap/3.out", "")
    forged = real.replace("JobName=cap args", "JobName=x StdOut=/etc/shadow")
    with pytest.raises(ForgedJobRecord):
        parse_scontrol_job(forged)
    # and the real record alone still parses
    assert parse_scontrol_job(real)[0].stdout is None


def test_a_forged_record_is_read_from_squeue_json_instead() -> None:
    # GIVEN scontrol text forged by the job's name, and squeue --json for the same job
    job_id = json.loads(SQUEUE_JSON)["jobs"][0]["job_id"]
    forged = ONE_LINE.replace("JobName=cap args", f"JobName={HOSTILE_NAME}").replace(
        "JobId=3 ", f"JobId={job_id} ")
    runner = FakeRunner([VERSION_2205, (["scontrol", "show", "job"], (0, forged, "")),
                         (["squeue", "--json"], (0, SQUEUE_JSON, ""))])
    # WHEN the job is discovered
    job = discover_job(job_ref_from_user(str(job_id)), runner)
    # THEN the values come from squeue's JSON: the real user and paths
    assert ["squeue", "--json", "--jobs", str(job_id)] in runner.calls
    assert job.user != "nobody" and job.stdout != "/etc/shadow"


def test_a_forged_record_without_squeue_json_is_one_clear_error() -> None:
    forged = ONE_LINE.replace("JobName=cap args", f"JobName={HOSTILE_NAME}")
    runner = FakeRunner([VERSION_2205, (["scontrol", "show", "job"], (0, forged, "")),
                         (["squeue", "--json"], (1, "", "squeue: unrecognized option"))])
    with pytest.raises(ForgedJobRecord) as caught:
        discover_job(job_ref_from_user("3"), runner)
    assert caught.value.exit_code == 9 and "job 3" in caught.value.message


# ---------------------------------------------------------------- digits


@pytest.mark.parametrize("text", ["²", "1²", "٣", "1" * 5000, "", "-1", " 1"])
def test_decimal_int_is_total(text: str) -> None:
    assert decimal_int(text) is None


def test_superscript_digits_from_job_text_do_not_abort_the_parsers() -> None:
    # GIVEN '²' where digits are expected (CUDA_VISIBLE_DEVICES, NCCL_IB_HCA, listpids, logs)
    assert parse_nccl_device_list("mlx5_0:²,mlx5_1:1").entries == (("mlx5_0", None), ("mlx5_1", 1))
    parse_srun_task_exits("srun: error: node001: tasks ²-3,²,"
                          + "9" * 5000 + ": Exited with exit code 1\n", source="x")
    assert parse_sysfs_ib_state("²: ACTIVE") == (None, "²: ACTIVE")


# ---------------------------------------------------------------- frames


def test_a_claimed_total_of_10_to_the_23_chunks_does_not_hang() -> None:
    # GIVEN one frame line claiming 10**23 chunks
    line = f"{FRAME_TAG}node001 0 {10**23} 0badc0de AAAA\n"
    started = time.monotonic()
    result = decode_frames(line)
    # THEN the node is damaged, at once
    assert time.monotonic() - started < 5
    assert "node001" in result.damaged and "chunks" in result.damaged["node001"]


def test_a_frame_that_inflates_past_the_bound_is_damage_not_memory(monkeypatch) -> None:
    # GIVEN a frame payload that inflates 1000-fold past the bound (the finding: 264 KiB to
    # 200 MB; scaled down here with the bound so the test stays fast)
    from slurmdiag.transport import framing

    monkeypatch.setattr(framing, "MAX_DOCUMENT_BYTES", 1 << 20)
    bomb = zlib.compress(b" " * (8 << 20), 9)
    assert len(bomb) < 16 * 1024
    payload = base64.b64encode(bomb).decode()
    crc = f"{zlib.crc32(payload.encode()) & 0xFFFFFFFF:08x}"
    chunks = [payload[i:i + 600] for i in range(0, len(payload), 600)]
    text = "".join(f"{FRAME_TAG}node001 {i} {len(chunks)} {crc} {c}\n" for i, c in enumerate(chunks))
    # WHEN it is decoded THEN the node is damaged with the reason, nothing inflated past the bound
    result = decode_frames(text)
    assert "larger than" in result.damaged["node001"]


def test_superscript_digits_in_frames_are_noise() -> None:
    good = encode_frames("node002", {"ok": 1}, pid=7)
    result = decode_frames(f"{FRAME_TAG}node001 ² 1 0badc0de AAAA\n@SDG1-HELLO node001 ²\n" + good)
    assert result.documents == {"node002": {"ok": 1}} and len(result.noise) == 2


# ---------------------------------------------------------------- what the fuzzing found


def test_fuzz_finding_a_5001_digit_number_in_squeue_text() -> None:
    from slurmdiag.slurm.parse import parse_squeue_text

    real = (SLURM / "local_22.05_squeue_slurmdiag_format.txt").read_text()
    hostile = real.replace("|2|4|0:49|", "|" + "9" * 5001 + "|4|0:49|")
    assert hostile != real
    assert len(parse_squeue_text(hostile)) == len(parse_squeue_text(real))


def test_fuzz_finding_unicode_digits_and_bad_host_lists_are_parse_errors() -> None:
    from slurmdiag.errors import ParseError
    from slurmdiag.hostlist import expand_hostlist
    from slurmdiag.slurm.parse import parse_job_id

    for text in ("node[٣001-004]", "node[001-004]x", "001-004]"):
        with pytest.raises(ParseError):
            expand_hostlist(text)
    with pytest.raises(ParseError):
        parse_job_id("12_[1-3]")


def test_fuzz_finding_a_lone_surrogate_in_nvidia_smi_xml() -> None:
    from slurmdiag.parsers.nvidia_smi import parse_nvidia_smi_xml

    real = (SLURM.parent / "nvidia_smi" / "q_x_tesla_t4_515_v11.xml").read_text()
    gpus = parse_nvidia_smi_xml(real.replace("<driver_version>", "<driver_version>\ud800", 1))
    assert len(gpus) == 1


def test_fuzz_finding_a_node_document_of_the_wrong_shape_is_an_error_node() -> None:
    from slurmdiag.assemble import node_from_outcome
    from slurmdiag.transport.base import NodeOutcome

    doc = json.loads((SLURM.parent / "collector" / "node001_simple_sleep.json").read_text())
    for key, value in (("nics", True), ("processes", [None]), ("tools", 3)):
        node = node_from_outcome(NodeOutcome("node001", "ok", {**doc, key: value}))
        assert node.status in ("ok", "error")


def test_fuzz_finding_a_snapshot_with_a_list_for_a_frame_name_is_a_parse_error() -> None:
    from slurmdiag.errors import ParseError
    from slurmdiag.snapshot import Snapshot

    real = json.loads((SLURM.parent / "snapshots" / "synthetic_rank_gated.json").read_text())
    frame = real["nodes"][0]["ranks"][0]["samples"][0]["threads"][0]["frames"][0]
    for bad in ([], 5, {"a": 1}):
        frame["function"] = bad
        with pytest.raises(ParseError):
            Snapshot.from_json(json.dumps(real))
