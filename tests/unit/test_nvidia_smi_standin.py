"""Tests of tests/tools/nvidia-smi, the stand-in that replays recorded nvidia-smi outputs."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from slurmdiag.parsers.nvidia_smi import parse_nvidia_smi_query_csv, parse_nvidia_smi_xml

TESTS = Path(__file__).resolve().parent.parent
STANDIN = TESTS / "tools" / "nvidia-smi"
NVSMI_FIXTURES = TESTS / "fixtures" / "nvidia_smi"

QUERY = "--query-gpu=index,uuid,name,utilization.gpu,memory.used"


def run(
    args: list[str], fake_dir: Path | None, node: str | None = None
) -> subprocess.CompletedProcess[bytes]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SLURMDIAG_FAKE_NVSMI_DIR", "SLURMD_NODENAME")
    }
    env["PATH"] = f"{STANDIN.parent}{os.pathsep}{env.get('PATH', '')}"
    if fake_dir is not None:
        env["SLURMDIAG_FAKE_NVSMI_DIR"] = str(fake_dir)
    if node is not None:
        env["SLURMD_NODENAME"] = node
    return subprocess.run(
        ["nvidia-smi", *args], env=env, capture_output=True, timeout=30, check=False
    )


@pytest.fixture
def fake_dir(tmp_path: Path) -> Path:
    """A replay directory holding real fixtures under the names the stand-in looks for."""
    recorded = {
        "query_gpu.csv": "codeidx53699499437_query_gpu_csv_a100_80gb_pcie_unknown_error.txt",
        "q.xml": "q_x_a10g_515_v11.xml",
        "q.txt": "q_text_a10_535.129.03_remapped_rows_pending.txt",
        "L.txt": "L_list_h100x8_mig_1g.10gb.txt",
        "table.txt": "table_h100x8_550.90.07.txt",
    }
    for name, fixture in recorded.items():
        shutil.copyfile(NVSMI_FIXTURES / fixture, tmp_path / name)
    return tmp_path


def test_standin_is_found_on_path_and_executable() -> None:
    # GIVEN the tools directory first on PATH
    path = f"{STANDIN.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    # THEN "nvidia-smi" resolves to the stand-in
    assert shutil.which("nvidia-smi", path=path) == str(STANDIN)


@pytest.mark.parametrize(
    ("args", "recorded"),
    [
        ([QUERY, "--format=csv"], "query_gpu.csv"),
        (["-q", "-x"], "q.xml"),
        (["-qx"], "q.xml"),
        (["--query", "--xml-format"], "q.xml"),
        (["-q"], "q.txt"),
        (["-q", "-i", "0"], "q.txt"),
        (["-L"], "L.txt"),
        ([], "table.txt"),
    ],
)
def test_arguments_select_the_recorded_file(fake_dir: Path, args: list[str], recorded: str) -> None:
    # GIVEN a replay directory of real outputs
    # WHEN the stand-in is called like the real tool
    result = run(args, fake_dir)
    # THEN it prints that file byte for byte and exits 0
    assert result.returncode == 0
    assert result.stdout == (fake_dir / recorded).read_bytes()


def test_replayed_outputs_parse_like_the_originals(fake_dir: Path) -> None:
    # GIVEN the replay directory
    # WHEN the collector-style queries are run through the stand-in
    csv_out = run([QUERY, "--format=csv"], fake_dir).stdout.decode()
    xml_out = run(["-q", "-x"], fake_dir).stdout.decode()
    # THEN the parsers read them (the [Unknown Error] GPU included)
    gpus = parse_nvidia_smi_query_csv(csv_out)
    assert len(gpus) == 8 and gpus[3].raw["power.limit"] == "[Unknown Error]"
    assert parse_nvidia_smi_xml(xml_out)[0].name == "NVIDIA A10G"


def test_per_node_subdirectory_wins_and_falls_back(fake_dir: Path) -> None:
    # GIVEN node gpu-b has its own query_gpu.csv (another real recording), but no q.xml
    node_dir = fake_dir / "gpu-b"
    node_dir.mkdir()
    shutil.copyfile(
        NVSMI_FIXTURES / "codeidx53731726038_query_gpu_csv_a100_pcie_40gb_550.txt",
        node_dir / "query_gpu.csv",
    )
    # WHEN called as on gpu-b, on gpu-a (no subdirectory)
    on_b = run([QUERY, "--format=csv"], fake_dir, node="gpu-b")
    on_a = run([QUERY, "--format=csv"], fake_dir, node="gpu-a")
    xml_on_b = run(["-q", "-x"], fake_dir, node="gpu-b")
    # THEN gpu-b gets its own file, gpu-a the shared one, and gpu-b falls back for q.xml
    assert on_b.stdout == (node_dir / "query_gpu.csv").read_bytes()
    assert on_a.stdout == (fake_dir / "query_gpu.csv").read_bytes()
    assert xml_on_b.stdout == (fake_dir / "q.xml").read_bytes()


def test_missing_query_file_is_an_invalid_field_error(tmp_path: Path) -> None:
    # GIVEN an empty replay directory
    # WHEN --query-gpu is asked
    result = run(["--query-gpu=clocks_event_reasons.active,index", "--format=csv"], tmp_path)
    # THEN the real tool's message for an unsupported field, exit 2
    assert result.returncode == 2
    assert result.stdout == b'Field "clocks_event_reasons.active" is not a valid field to query.\n'


@pytest.mark.parametrize(
    "args", [["-q"], ["-q", "-x"], ["-L"], [], ["--query-compute-apps=pid", "--format=csv"]]
)
def test_missing_other_file_is_no_devices(tmp_path: Path, args: list[str]) -> None:
    # GIVEN an empty replay directory
    result = run(args, tmp_path)
    # THEN "No devices were found", exit 6
    assert result.returncode == 6
    assert result.stdout == b"No devices were found\n"


def test_without_replay_directory_the_driver_is_unreachable() -> None:
    # GIVEN SLURMDIAG_FAKE_NVSMI_DIR is not set
    result = run(["-L"], None)
    # THEN the real "couldn't communicate with the NVIDIA driver" failure, exit 9
    assert result.returncode == 9
    assert result.stdout.startswith(b"NVIDIA-SMI has failed because it couldn't communicate")
