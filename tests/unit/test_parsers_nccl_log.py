"""Tests of slurmdiag.parsers.nccl_log on real job logs (tests/fixtures/nccl/).

All inputs are public logs listed in the shared SOURCES.md; inputs built by hand are marked
SYNTHETIC.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from slurmdiag.parsers.nccl_log import parse_nccl_log
from slurmdiag.snapshot import LogFinding

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def findings(name: str) -> tuple[LogFinding, ...]:
    path = FIXTURES / "nccl" / name
    return parse_nccl_log(path.read_text(), source=name)


def of_kind(found: tuple[LogFinding, ...], kind: str) -> list[LogFinding]:
    return [f for f in found if f.kind == kind]


# --- NCCL INFO: version, bootstrap, network --------------------------------------------------


def test_nccl_2_7_multi_interface_bootstrap_and_ib_devices() -> None:
    # GIVEN the first 600 lines of a 16-node NCCL 2.7.8 job on Omni-Path (hfi1 shown as /IB)
    found = findings("jeanzay_v100_16node_nccl2.7.8_multi_if_bootstrap_HEAD600.log")
    # THEN the bootstrap line lists both indexed interfaces, the first one is the interface
    first_bootstrap = of_kind(found, "nccl_bootstrap")[0]
    assert first_bootstrap.line_no == 180
    assert first_bootstrap.host == "r7i4n1"
    assert first_bootstrap.rank is None  # [0] is a CUDA device, not a rank
    assert first_bootstrap.fields == {
        "interfaces": "ib0,ib1",
        "interface": "ib0",
        "address": "10.148.0.76",
        "pid": "77231",
        "cuda_dev": "0",
    }
    # AND NET/IB gives devices, transports and the OOB interface
    net_ib = next(f for f in found if f.fields.get("devices"))
    assert net_ib.line_no == 182
    assert net_ib.fields["network"] == "IB"
    assert net_ib.fields["devices"] == "hfi1_2:1,hfi1_0:1,hfi1_3:1,hfi1_1:1"
    assert net_ib.fields["transports"] == "IB,IB,IB,IB"
    assert (net_ib.fields["oob_interface"], net_ib.fields["oob_address"]) == (
        "ib0",
        "10.148.0.76",
    )
    # AND "Using network IB" and the bare "NCCL version" line (no host prefix)
    using = next(f for f in found if f.line_no == 183)
    assert (using.kind, using.fields["network"]) == ("nccl_net", "IB")
    (version,) = of_kind(found, "nccl_version")
    assert version.line_no == 184
    assert version.host is None
    assert version.fields == {"version": "2.7.8", "cuda": "10.2"}
    assert version.text == "NCCL version 2.7.8+cuda10.2"
    assert Counter(f.kind for f in found) == {
        "nccl_net": 192,
        "nccl_bootstrap": 64,
        "nccl_version": 1,
    }


def test_nccl_2_10_single_interface_bootstrap_and_internal_plugin() -> None:
    # GIVEN a 4-node A100 job launched by torch.distributed.launch (FutureWarning noise)
    found = findings("jeanzay_a100_4node_nccl2.10.3_torchlaunch.log")
    # THEN "Bootstrap : Using ib0:..." gives a single interface
    first = found[0]
    assert (first.line_no, first.kind, first.host) == (117, "nccl_bootstrap", "jean-zay-iam37")
    assert first.fields["interfaces"] == "ib0"
    assert first.fields["address"] == "10.148.8.203"
    # AND "No plugin found ... using internal implementation" is the internal plugin
    assert found[1].fields["plugin"] == "internal"
    # AND every host's bootstrap interface is seen
    hosts = {f.host for f in of_kind(found, "nccl_bootstrap")}
    assert hosts == {"jean-zay-iam37", "jean-zay-iam40", "jean-zay-iam41", "jean-zay-iam52"}
    assert {f.fields["interface"] for f in of_kind(found, "nccl_bootstrap")} == {"ib0"}


def test_omnipath_hfi1_devices_reported_as_ib() -> None:
    # GIVEN a V100 job on Omni-Path: NET/IB lists hfi1_N devices
    found = findings("jeanzay_v100_4node_nccl2.10.3_opa_hfi1.log")
    devices = {f.fields["devices"] for f in found if "devices" in f.fields}
    # THEN
    assert devices == {"hfi1_0:1,hfi1_1:1,hfi1_2:1,hfi1_3:1"}
    assert {f.fields["network"] for f in found if "network" in f.fields} == {"IB"}


def test_nccl_2_27_ofi_failure_falls_back_to_socket() -> None:
    # GIVEN NCCL 2.27.7 whose aws-ofi-nccl plugin failed, WARN lines timestamped and with the
    # C++ signature before "NCCL WARN"
    found = findings("aws_ec2_8gpu_ofi_init_failed_WARN_timestamped.log")
    warn = of_kind(found, "nccl_warn")[0]
    # THEN the WARN keeps host, pid, device, message and the function that printed it
    assert warn.line_no == 69
    assert warn.host == "ip-172-31-3-153"
    assert warn.fields == {
        "message": "NET/OFI Failed to initialize sendrecv protocol",
        "pid": "35115",
        "cuda_dev": "2",
        "where": "int nccl_net_ofi_create_plugin(nccl_net_ofi_plugin_t**):208",
    }
    assert warn.text.startswith("[2026-01-02 10:24:27] ip-172-31-3-153:35115:35469 [2] int ")
    assert len(of_kind(found, "nccl_warn")) == 12
    # AND "Bootstrap: Using" (2.27, no space before the colon) is read
    bootstrap = of_kind(found, "nccl_bootstrap")[0]
    assert (bootstrap.line_no, bootstrap.fields["interface"]) == (8, "ens32")
    # AND the fallback is visible: NCCL_IB_DISABLE, NET/Socket on ens32, "Using network Socket"
    by_line = {f.line_no: f for f in found}
    assert by_line[80].fields["env"] == "NCCL_IB_DISABLE"
    assert by_line[80].fields["value"] == "1"
    assert by_line[89].fields["network"] == "Socket"
    assert by_line[89].fields["devices"] == "ens32"
    assert by_line[89].fields["address"] == "172.31.3.153"
    assert by_line[96].fields["network"] == "Socket"
    assert {f.fields["version"] for f in of_kind(found, "nccl_version")} == {"2.27.7"}


def test_nccl_2_27_libfabric_plugin_and_socket_ifname() -> None:
    # GIVEN a 4-pod EKS job using the aws-ofi-nccl Libfabric plugin over EFA
    found = findings("aws_g6e_l40s_4pod_nccl2.27.3_ofi_plugin.log")
    by_line = {f.line_no: f for f in found}
    # THEN NCCL_SOCKET_IFNAME is a bootstrap finding, then the bootstrap interface
    assert by_line[51].kind == "nccl_bootstrap"
    assert (by_line[51].fields["env"], by_line[51].fields["value"]) == (
        "NCCL_SOCKET_IFNAME",
        "^docker0,lo",
    )
    assert by_line[52].fields["interface"] == "eth0"
    # AND the plugin, its provider and the chosen network
    assert by_line[57].fields["plugin"] == "Libfabric"
    assert by_line[57].fields["plugin_api"] == "v10"
    assert by_line[64].fields["plugin_version"] == "1.16.2"
    assert (by_line[70].fields["provider"], by_line[70].fields["nics"]) == ("efa", "4")
    assert by_line[97].fields["network"] == "Libfabric"
    assert by_line[97].host == "llama-3-8b-node-0-0"


def test_log_starting_mid_run_gives_only_what_it_has() -> None:
    # GIVEN a log whose init lines are missing (starts after bootstrap)
    found = findings("aws_p4d_a100_4proc_nccl2.27.3_libfabric_efa.log")
    # THEN only the four "Using network Libfabric" lines are findings
    assert [(f.line_no, f.fields["network"]) for f in found] == [
        (303, "Libfabric"),
        (306, "Libfabric"),
        (310, "Libfabric"),
        (316, "Libfabric"),
    ]


def test_other_nccl_info_lines_are_not_findings() -> None:
    # GIVEN NVLS / threadThresholds / channel-count INFO lines only
    # THEN nothing of interest
    assert findings("issue_NVIDIA_nccl1609_h800_nvls_init_lines.txt") == ()


# --- PyTorch watchdog ------------------------------------------------------------------------


def test_watchdog_old_format_without_rank_prefix() -> None:
    # GIVEN PyTorch 1.x lines "[E ProcessGroupNCCL.cpp:737] [Rank 1] Watchdog caught ..."
    found = findings("issue_OFA271_watchdog_timeout_torch1.x_old_format.txt")
    # THEN rank comes from "[Rank N]" and the WorkNCCL fields are read (no Numel then)
    assert [f.rank for f in found] == [1, 3, 2, 6, 7]
    assert found[0].kind == "watchdog_timeout"
    assert found[0].fields == {
        "event": "timeout",
        "seq": "469508",
        "op": "ALLREDUCE",
        "timeout_ms": "1800000",
        "ran_for_ms": "1802212",
    }


def test_watchdog_torch_2_6_format_with_pg_label() -> None:
    # GIVEN "[rankN]:[EMMDD ...] [Rank N] Watchdog caught ..." and the "[PG ID 0 PG GUID
    # 0(default_pg) Rank N] Exception ... detected by watchdog" follow-up lines
    found = findings("issue_BasicSR737_watchdog_timeout_torch2.6_format.txt")
    # THEN both forms are findings with rank
    assert [(f.line_no, f.rank, f.fields["event"]) for f in found] == [
        (1, 1, "timeout"),
        (2, 1, "exception"),
        (3, 0, "timeout"),
        (4, 0, "exception"),
        (5, 2, "timeout"),
    ]
    assert found[0].fields["numel_in"] == "9801523"
    assert found[0].fields["ran_for_ms"] == "600020"
    assert found[1].fields == {
        "event": "exception",
        "seq": "808",
        "last_enqueued": "811",
        "last_completed": "807",
        "pg": "0",
        "pg_name": "default_pg",
    }


def test_watchdog_with_line_number_prefix() -> None:
    # GIVEN lines prefixed by a pasted log line number "[80746] " before "[rank0]:"
    found = findings("issue_LlamaFactory7396_watchdog_with_lineno_prefix.txt")
    # THEN ranks come from "[rankN]:" and the line number is not a rank or task
    assert [f.rank for f in found] == [0, 4, 0, 3]
    assert found[0].fields["seq"] == "1580"
    assert "task" not in found[0].fields and "local_rank" not in found[0].fields
    # AND "[PG 1 Rank 0]" gives the process group
    assert found[2].fields["pg"] == "1"
    assert found[2].fields["last_completed"] == "1579"


def test_watchdog_ranks_disagree_on_optype_for_one_seq() -> None:
    # GIVEN indented lines where rank 7 waits in BROADCAST and rank 3 in ALLREDUCE, same SeqNum
    found = findings("issue_NVIDIA_nccl1409_watchdog_mixed_optypes_indented.txt")
    timeouts = [f for f in found if f.fields["event"] == "timeout"]
    # THEN both are reported with their own op for seq 80078
    assert [(f.rank, f.fields["seq"], f.fields["op"]) for f in timeouts] == [
        (7, "80078", "BROADCAST"),
        (3, "80078", "ALLREDUCE"),
    ]
    # AND the older "[PG 0 (default_pg) Rank 7]" label is read; text loses the indentation
    exception = next(f for f in found if f.fields["event"] == "exception")
    assert (exception.fields["pg"], exception.fields["pg_name"]) == ("0", "default_pg")
    assert exception.text.startswith("[rank7]:[E816")


def test_watchdog_glued_to_progress_bar() -> None:
    # GIVEN a watchdog line glued to a tqdm bar, "ran for" far beyond the timeout
    found = findings("issue_pytorch118369_watchdog_2024_epoch_progress_prefix.txt")
    # THEN every line is found, the first one too, with rank 0 from "[Rank 0]"
    assert len(found) == 5
    assert found[0].rank == 0
    assert found[0].fields["seq"] == "96120"
    assert found[0].fields["ran_for_ms"] == "25624887"
    assert found[0].fields["timeout_ms"] == "1800000"
    assert found[-1].rank == 7 and found[-1].fields["seq"] == "64088"


def test_watchdog_failure_detected_sequence_id_form() -> None:
    # GIVEN PyTorch 2.7 "failure detected by watchdog at work sequence id: N PG status: ..."
    found = findings("issue_ArcticTraining219_watchdog_FR_disabled.txt")
    # THEN only that line is a finding (FlightRecorder/teardown messages are not)
    (finding,) = found
    assert finding.line_no == 2
    assert finding.rank == 5
    assert finding.fields == {
        "event": "exception",
        "seq": "120049",
        "last_enqueued": "120051",
        "last_completed": "120048",
        "pg": "0",
        "pg_name": "default_pg",
    }


# --- Xid, prefixes, cost ---------------------------------------------------------------------


def test_xid_lines_in_a_log() -> None:
    # GIVEN a dmesg capture with five Xid 119 lines
    text = (FIXTURES / "nvidia_smi" / "dmesg_xid_119_gsp_timeout_h100.txt").read_text()
    found = parse_nccl_log(text, source="dmesg")
    # THEN five xid findings with the structured fields
    assert [f.kind for f in found] == ["xid"] * 5
    assert found[0].source == "dmesg"
    assert found[0].line_no == 3
    assert found[0].fields["xid"] == "119"
    assert found[0].fields["pci"] == "0000:9b:00"
    assert found[0].fields["pid"] == "2024380"
    assert found[0].fields["name"] == "nvidia-smi"


def test_launcher_prefixes_on_real_lines() -> None:
    # GIVEN real NCCL lines behind SYNTHETIC launcher prefixes: srun --label and torchrun --tee
    line = (
        "jean-zay-iam37:261379:261379 [0] NCCL INFO NET/IB : Using [0]hfi1_1:1/IB "
        "[1]hfi1_0:1/IB [2]hfi1_2:1/IB [3]hfi1_3:1/IB ; OOB ib0:10.148.8.203<0>"
    )
    assert line in (FIXTURES / "nccl" / "jeanzay_a100_4node_nccl2.10.3_torchlaunch.log").read_text()
    text = f" 3: {line}\n[1]<stdout>:{line}\n[default2]:{line}\n"
    # WHEN parsed
    srun, tee, default = parse_nccl_log(text, source="job.out")
    # THEN host and devices are read through the prefixes, and the prefix ids are kept apart
    assert {f.host for f in (srun, tee, default)} == {"jean-zay-iam37"}
    assert {f.fields["devices"] for f in (srun, tee, default)} == {
        "hfi1_1:1,hfi1_0:1,hfi1_2:1,hfi1_3:1"
    }
    assert srun.fields["task"] == "3" and "local_rank" not in srun.fields
    assert tee.fields["local_rank"] == "1"
    assert default.fields["local_rank"] == "2"
    assert [f.line_no for f in (srun, tee, default)] == [1, 2, 3]


def test_long_logs_stay_linear() -> None:
    # GIVEN a real 70 kB log repeated 100 times (7 MB, 142k lines)
    text = (FIXTURES / "nccl" / "jeanzay_a100_4node_nccl2.10.3_torchlaunch.log").read_text()
    once = parse_nccl_log(text, source="x")
    # WHEN the long text is parsed
    start = time.perf_counter()
    many = parse_nccl_log(text * 100, source="x")
    elapsed = time.perf_counter() - start
    # THEN findings scale with the input and the pass stays well under seconds per 10 MB
    assert len(many) == 100 * len(once)
    assert elapsed < 10.0
    # AND a SYNTHETIC pathological 1 MB line is cut to 500 characters
    (warn,) = parse_nccl_log("h:1:2 [0] NCCL WARN " + "x" * 1_000_000, source="x")
    assert len(warn.text) <= 500 and len(warn.fields["message"]) <= 500
