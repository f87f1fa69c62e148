"""Tests of slurmdiag.parsers.nvidia_smi on real outputs (tests/fixtures/nvidia_smi/).

All inputs are public outputs listed in the shared SOURCES.md. Where a test cuts or breaks a
real file to imitate a failed run, it says so; inputs written by hand are marked SYNTHETIC.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmdiag.errors import ParseError
from slurmdiag.parsers.nvidia_smi import (
    XidEvent,
    parse_nvidia_smi_apps_csv,
    parse_nvidia_smi_query_csv,
    parse_nvidia_smi_xml,
    parse_xid_events,
    parse_xid_lines,
)
from slurmdiag.snapshot import GpuApp

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nvidia_smi"



def split_pasted_csv_blocks(text: str) -> list[str]:
    """Split a paste of several CSV outputs separated by ``---`` lines into one text each."""
    blocks: list[list[str]] = [[]]
    for line in text.splitlines(keepends=True):
        if line.strip() and set(line.strip()) <= {"-"}:
            blocks.append([])
        else:
            blocks[-1].append(line)
    return ["".join(block) for block in blocks if "".join(block).strip()]

def read(name: str) -> str:
    return (FIXTURES / name).read_text()


# --- --query-gpu / --query-compute-apps CSV --------------------------------------------------


def test_query_csv_keeps_unknown_error_verbatim_for_the_one_bad_gpu() -> None:
    # GIVEN eight A100s where one reports power.limit "[Unknown Error]"
    gpus = parse_nvidia_smi_query_csv(
        read("codeidx53699499437_query_gpu_csv_a100_80gb_pcie_unknown_error.txt")
    )
    # THEN the index is the row number (not queried), the name is read
    assert [g.index for g in gpus] == list(range(8))
    assert {g.name for g in gpus} == {"NVIDIA A100 80GB PCIe"}
    # AND every queried field is in raw, by its name without the unit, verbatim
    assert gpus[3].raw == {
        "name": "NVIDIA A100 80GB PCIe",
        "driver_version": "570.124.06",
        "power.limit": "[Unknown Error]",
    }
    assert gpus[0].raw["power.limit"] == "300.00 W"


def test_query_csv_name_with_hyphens() -> None:
    # GIVEN the same query on A100-PCIE-40GB (550 driver)
    gpus = parse_nvidia_smi_query_csv(
        read("codeidx53731726038_query_gpu_csv_a100_pcie_40gb_550.txt")
    )
    # THEN eight GPUs with the full name
    assert len(gpus) == 8
    assert gpus[7].name == "NVIDIA A100-PCIE-40GB"
    assert gpus[7].raw["power.limit"] == "225.00 W"


def test_pasted_query_and_apps_blocks_split_and_parse() -> None:
    # GIVEN a bug report pasting --query-gpu, a '---' line, then --query-compute-apps
    gpu_block, apps_block = split_pasted_csv_blocks(
        read("codeidx62626091747_query_gpu_plus_compute_apps_csv.txt")
    )
    # WHEN each block is parsed
    (gpu,) = parse_nvidia_smi_query_csv(gpu_block)
    apps = parse_nvidia_smi_apps_csv(apps_block)
    # THEN units are stripped from the typed values
    assert gpu.index == 0
    assert (gpu.utilization_gpu, gpu.memory_used_mib, gpu.memory_total_mib) == (95.0, 745.0, 6144.0)
    assert gpu.raw["memory.used"] == "745 MiB"
    # AND apps are read by header names (this query had no gpu_uuid column)
    assert apps == (
        GpuApp(gpu_uuid=None, pid=1580, process_name="/app/llama-server", used_memory_mib=340.0),
        GpuApp(gpu_uuid=None, pid=1597, process_name="/app/llama-server", used_memory_mib=394.0),
    )


def test_query_csv_short_last_row_gives_what_it_has() -> None:
    # GIVEN the real A100 CSV cut in the middle of its last row
    text = read("codeidx53699499437_query_gpu_csv_a100_80gb_pcie_unknown_error.txt")
    cut = text.rstrip("\n").rindex(", 300.00 W")
    # WHEN parsed
    gpus = parse_nvidia_smi_query_csv(text[:cut])
    # THEN the last GPU is there without the cut column
    assert len(gpus) == 8
    assert "power.limit" not in gpus[7].raw
    assert gpus[7].raw["driver_version"] == "570.124.06"


def test_query_csv_rejects_other_text() -> None:
    # GIVEN the plain nvidia-smi table, which is not CSV with a header
    table = read("table_h100x8_550.90.07.txt")
    # WHEN / THEN ParseError
    with pytest.raises(ParseError):
        parse_nvidia_smi_query_csv(table)
    with pytest.raises(ParseError):
        parse_nvidia_smi_apps_csv(table)


def test_query_csv_typed_fields_bitmask_and_bracketed_values() -> None:
    # GIVEN SYNTHETIC output of the collector's full query (no fixture has these columns):
    # header units and bracketed specials as nvidia-smi prints them
    text = (
        "index, uuid, name, utilization.gpu [%], utilization.memory [%], memory.used [MiB], "
        "memory.total [MiB], temperature.gpu, power.draw [W], clocks_event_reasons.active, "
        "ecc.errors.uncorrected.volatile.total, pcie.link.gen.current, pcie.link.width.current, "
        "retired_pages.pending, remapped_rows.pending\n"
        "0, GPU-aaaa, NVIDIA H100 80GB HBM3, 100 %, 35 %, 70000 MiB, 81559 MiB, 61, 690.12 W, "
        "0x0000000000000084, 0, 5, 16, [N/A], No\n"
        "1, GPU-bbbb, NVIDIA H100 80GB HBM3, [Unknown Error], [Unknown Error], 10 MiB, "
        "81559 MiB, 30, [Unknown Error], [Not Supported], [N/A], 5, 16, [N/A], Yes\n"
    )
    # WHEN parsed
    busy, broken = parse_nvidia_smi_query_csv(text)
    # THEN units are stripped and the reason bitmask (0x4 | 0x80) is decoded to NVML names
    assert (busy.index, busy.uuid, busy.utilization_gpu, busy.power_w) == (
        0,
        "GPU-aaaa",
        100.0,
        690.12,
    )
    assert busy.clocks_event_reasons == "sw_power_cap,hw_power_brake_slowdown"
    assert (busy.ecc_uncorrected_volatile, busy.pcie_gen, busy.pcie_width) == (0.0, 5.0, 16.0)
    assert busy.retired_pending is None and busy.remapped_pending == "No"
    # AND bracketed values are None in typed fields and verbatim in raw
    assert broken.utilization_gpu is None and broken.power_w is None
    assert broken.clocks_event_reasons is None
    assert broken.raw["power.draw"] == "[Unknown Error]"
    assert broken.raw["clocks_event_reasons.active"] == "[Not Supported]"
    assert broken.remapped_pending == "Yes"


def test_query_csv_no_devices_is_empty() -> None:
    # GIVEN SYNTHETIC: what nvidia-smi prints on a node without GPUs
    # THEN no GPU and no error
    assert parse_nvidia_smi_query_csv("No devices were found\n") == ()
    assert parse_nvidia_smi_query_csv("") == ()


# --- -q -x XML -------------------------------------------------------------------------------


def test_xml_a100_mig_535_event_reasons_and_na() -> None:
    # GIVEN an A100 in MIG mode (driver 535, <clocks_event_reasons>, utilization N/A)
    (gpu,) = parse_nvidia_smi_xml(read("q_x_a100_sxm4_80gb_mig_535.xml"))
    # THEN the GPU-level values are read, not the MIG devices' own memory
    assert gpu.index == 0
    assert gpu.uuid == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert gpu.name == "NVIDIA A100-SXM4-80GB"
    assert (gpu.memory_used_mib, gpu.memory_total_mib) == (50.0, 81920.0)
    assert (gpu.temperature_c, gpu.power_w) == (27.0, 67.03)
    assert (gpu.pcie_gen, gpu.pcie_width) == (4.0, 16.0)
    # AND N/A values are None, kept verbatim in raw
    assert gpu.utilization_gpu is None and gpu.raw["utilization.gpu"] == "N/A"
    assert gpu.remapped_pending is None and gpu.raw["remapped_rows.pending"] == "N/A"
    assert gpu.retired_pending is None
    # AND no event reason is active; ECC sram+dram volatile uncorrectable sum to 0
    assert gpu.clocks_event_reasons == ""
    assert gpu.ecc_uncorrected_volatile == 0.0
    assert gpu.raw["mig.mode.current"] == "Enabled"
    assert gpu.raw["mig.devices"] == "4"
    assert gpu.raw["pci.bus_id"] == "00000000:01:00.0"


def test_xml_a10g_515_throttle_reasons_and_remapped_rows() -> None:
    # GIVEN an A10G on driver 515 (<clocks_throttle_reasons>, <remapped_rows> block)
    (gpu,) = parse_nvidia_smi_xml(read("q_x_a10g_515_v11.xml"))
    # THEN the idle reason is active and remapped rows are not pending
    assert gpu.clocks_event_reasons == "gpu_idle"
    assert gpu.remapped_pending == "No"
    assert (gpu.utilization_gpu, gpu.utilization_memory) == (0.0, 0.0)
    assert (gpu.memory_used_mib, gpu.memory_total_mib) == (22.0, 23028.0)
    assert (gpu.pcie_gen, gpu.pcie_width, gpu.power_w) == (1.0, 8.0, 25.58)


def test_xml_tesla_t4_retired_pages_pending_no() -> None:
    # GIVEN a T4 whose retired pages block says pending "No" and remapped_rows "N/A"
    (gpu,) = parse_nvidia_smi_xml(read("q_x_tesla_t4_515_v11.xml"))
    # THEN
    assert gpu.retired_pending == "No"
    assert gpu.remapped_pending is None
    assert gpu.clocks_event_reasons == ""
    assert (gpu.temperature_c, gpu.power_w, gpu.memory_used_mib) == (40.0, 26.78, 1032.0)


def test_xml_quadro_418_without_doctype_old_ecc_layout() -> None:
    # GIVEN an old (418) document without DOCTYPE: volatile/double_bit/total is N/A
    (gpu,) = parse_nvidia_smi_xml(read("q_x_quadro_p400_418_nodtd.xml"))
    # THEN
    assert gpu.name == "Quadro P400"
    assert gpu.ecc_uncorrected_volatile is None
    assert gpu.raw["ecc.errors.uncorrected.volatile.total"] == "N/A"
    assert gpu.power_w is None and gpu.raw["power.draw"] == "N/A"
    assert (gpu.utilization_memory, gpu.temperature_c) == (3.0, 33.0)
    assert gpu.clocks_event_reasons == "gpu_idle"


def test_xml_v13_595_instant_power_and_deprecated_fields() -> None:
    # GIVEN the newest schema (595): no <power_draw>, instant/average power instead
    (gpu,) = parse_nvidia_smi_xml(read("q_x_rtx4000_sff_ada_595_v13.xml"))
    # THEN the instant draw is the power, and the idle reason is active
    assert gpu.power_w == 8.44
    assert gpu.clocks_event_reasons == "gpu_idle"
    assert (gpu.utilization_gpu, gpu.utilization_memory) == (0.0, 37.0)
    assert gpu.ecc_uncorrected_volatile is None  # ECC disabled: all N/A
    assert gpu.remapped_pending == "No"


def test_xml_trimmed_v10_document() -> None:
    # GIVEN a trimmed v10 file (no reasons, no ECC, no index elements)
    (gpu,) = parse_nvidia_smi_xml(read("q_x_gtx1070ti_partial_v10.xml"))
    # THEN what is there is read and the rest is None
    assert gpu.name == "GeForce GTX 1070 Ti"
    assert (gpu.memory_used_mib, gpu.memory_total_mib, gpu.temperature_c) == (42.0, 4096.0, 39.0)
    assert gpu.clocks_event_reasons is None
    assert gpu.ecc_uncorrected_volatile is None
    assert gpu.power_w is None


def test_xml_truncated_document_gives_the_fields_before_the_cut() -> None:
    # GIVEN the real A10G document cut in the middle (as when nvidia-smi is killed)
    text = read("q_x_a10g_515_v11.xml")
    cut = text.index("<ecc_errors>")
    # WHEN parsed
    (gpu,) = parse_nvidia_smi_xml(text[:cut])
    # THEN the values before the cut are there, the later ones are None
    assert gpu.name == "NVIDIA A10G"
    assert gpu.memory_used_mib == 22.0
    assert gpu.clocks_event_reasons == "gpu_idle"
    assert gpu.ecc_uncorrected_volatile is None
    assert gpu.temperature_c is None


def test_xml_with_lost_closing_tags_still_reads_every_field() -> None:
    # GIVEN the real MIG document with two closing tags removed (a strict parser refuses it)
    text = read("q_x_a100_sxm4_80gb_mig_535.xml")
    broken = text.replace("</pci>", "", 1).replace("</utilization>", "", 1)
    # WHEN parsed
    # THEN the result equals that of the intact document (MIG memory not mistaken for the GPU's)
    assert parse_nvidia_smi_xml(broken) == parse_nvidia_smi_xml(text)


def test_xml_rejects_non_xml() -> None:
    # GIVEN -q text instead of -q -x
    with pytest.raises(ParseError):
        parse_nvidia_smi_xml(read("q_text_a10_535.129.03_remapped_rows_pending.txt"))


# --- Xid -------------------------------------------------------------------------------------


def test_xid_events_from_dmesg() -> None:
    # GIVEN dmesg -T with five Xid 119 (GSP timeout) lines among RPC history tables
    text = read("dmesg_xid_119_gsp_timeout_h100.txt")
    # WHEN parsed
    events = parse_xid_events(text)
    # THEN only the five Xid lines are events, with pci, pid and process name
    assert len(events) == 5
    assert events[0] == XidEvent(
        xid=119,
        pci="0000:9b:00",
        pid=2024380,
        process_name="nvidia-smi",
        message=(
            "Timeout after 6s of waiting for RPC response from GPU4 GSP! "
            "Expected function 103 (GSP_RM_ALLOC) (0x2081 0x4)."
        ),
        line=text.splitlines()[2],
    )
    assert [(e.pid, e.process_name) for e in events[3:]] == [
        (1263500, "cache_mgr_main"),
        (1240590, "gpud"),
    ]
    # AND the plain form keeps the lines themselves
    lines = parse_xid_lines(text)
    assert len(lines) == 5
    assert lines[-1].startswith("[Sun Feb 23 16:30:13 2025] NVRM: Xid (PCI:0000:9b:00): 119,")
