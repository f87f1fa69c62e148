"""The node collector, for real: real target processes on this machine, real py-spy and strace.

The targets pose as one node ("nodeX") of a Slurm job whose id is unique to this test run
(JOB: above Slurm's largest job id, so scontrol never knows it, and derived from this process's
pid, so two runs on one host never see each other's ranks); the collector's /proc fallback is
what finds them. Decoys (the same job on another emulated node,
another job on this node) record whether anything ever ptrace-attached to them.
"""

from __future__ import annotations

import json
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slurmdiag.collector import discovery, procfs, sockets, stacks, strace, tools
from slurmdiag.options import AttachOptions
from slurmdiag.transport.collect import (
    collector_args,
    collector_payload,
    node_command,
)
from slurmdiag.transport.framing import decode_frames

REPO = Path(__file__).resolve().parents[2]
PYSPY = shutil.which("py-spy", path=str(REPO / ".venv" / "bin")) or shutil.which("py-spy")
STRACE = shutil.which("strace")
#: Job ids of this run: past Slurm's MaxJobId (67108863 by default), and distinct between two
#: test runs at once on one host (their pids differ), whose fake ranks would otherwise mix.
_JOB_BASE = 100_000_000 + os.getpid() * 10
JOB = str(_JOB_BASE)
OTHER_JOB = str(_JOB_BASE + 1)  # a stopped rank of another job
DECOY_JOB = str(_JOB_BASE + 2)  # a decoy rank of another job on this node
# The collector sees only this PATH: no nvidia-smi stand-in from other tests can leak in.
TOOL_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

TARGET = '''
import os, sys, threading, time


def worker_main():
    while True:
        time.sleep(0.05)


def wait_for_peer(seconds):
    print("ready", os.getpid(), flush=True)  # from here on the stack is in this function
    time.sleep(seconds)  # BLOCK-HERE


def keep_busy():
    while True:
        time.sleep(0.05)  # a syscall every 50 ms, for strace to count


def watch_tracer(flag_path):
    """Leave a flag file if anything ever ptrace-attaches to this process."""
    while True:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("TracerPid:") and line.split()[1] != "0":
                    open(flag_path, "w").write(line)
        time.sleep(0.002)


def main():
    role = sys.argv[1]
    if role == "spawner":
        import multiprocessing

        worker = multiprocessing.get_context("spawn").Process(target=worker_main, daemon=True)
        worker.start()
        print("ready", os.getpid(), worker.pid, flush=True)
        keep_busy()
    elif role == "forker":
        child = os.fork()
        if child == 0:
            keep_busy()
        import socket

        server = socket.create_server(("127.0.0.1", 0))
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
        print("ready", os.getpid(), child, server.getsockname()[1], flush=True)
        keep_busy()
    elif role == "blocked":
        wait_for_peer(3600)
    elif role == "decoy":
        threading.Thread(target=watch_tracer, args=(sys.argv[2],), daemon=True).start()
        print("ready", os.getpid(), flush=True)
        keep_busy()


if __name__ == "__main__":
    main()
'''

pytestmark = [
    pytest.mark.skipif(PYSPY is None, reason="py-spy not found: pip install py-spy (see tests)"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the collector reads /proc"),
]


def _ptrace_allowed() -> bool:
    scope = Path("/proc/sys/kernel/yama/ptrace_scope")
    return os.geteuid() == 0 or not scope.exists() or scope.read_text().strip() == "0"


if not _ptrace_allowed():
    pytestmark.append(
        pytest.mark.skip(
            reason="ptrace not permitted: run as root or `sysctl kernel.yama.ptrace_scope=0`"
        )
    )


# ---------------------------------------------------------------- helpers


class Targets:
    """Target processes, each in its own process group; all of them are killed at the end."""

    def __init__(self, directory: Path) -> None:
        self.script = directory / "target.py"
        self.script.write_text(TARGET)
        self.directory = directory
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, role: str, env: dict[str, str], *extra: str) -> list[int]:
        """Start one target and wait for its "ready <pid> [child pid]" line."""
        base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.directory)}
        proc = subprocess.Popen(
            [sys.executable, str(self.script), role, *extra],
            env={**base, **env},
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.procs.append(proc)
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        assert ready, f"target {role} did not report ready within 30 s"
        words = proc.stdout.readline().split()
        assert words and words[0] == "ready", f"target {role} said {words!r}"
        return [int(w) for w in words[1:]]

    def kill_all(self) -> None:
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # also workers, forks, stopped ones
            except ProcessLookupError:
                pass
        for proc in self.procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


def rank_env(rank: int, node: str = "nodeX", job: str = JOB) -> dict[str, str]:
    return {
        "SLURM_JOB_ID": job,
        "SLURMD_NODENAME": node,
        "SLURM_PROCID": str(rank),
        "SLURM_STEP_ID": "0",
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": "3",
        "HF_TOKEN": "hf_secret_value",
        "WANDB_API_KEY": "wandb-secret",
        "AWS_SECRET_ACCESS_KEY": "x",
        "TORCH_HUB_TOKEN": "also-secret",
        "NCCL_SOCKET_IFNAME": "lo",
        "MASTER_ADDR": "127.0.0.1",
    }


def full_args(args: dict[str, Any]) -> dict[str, Any]:
    """Every argument, as the controller sends them (its defaults), with ``args`` over them."""
    return {**collector_args(args["job_id"], AttachOptions()), "pyspy": [PYSPY],
            "nvidia_smi": [], **args}


def run_collector(args: dict[str, Any]) -> tuple[dict, float, float, str]:
    """Run the collector like srun does (the loader and the bundle, no cache); returns
    (document, wall s, CPU s incl. tools, stdout)."""
    full = full_args(args)
    options = AttachOptions(node_python="python3", node_cache="")
    argv = node_command(args["job_id"], options, program=(collector_payload(), full))
    env = {"PATH": TOOL_PATH, "LANG": "C.UTF-8"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert out.returncode == 0, out.stderr
    assert out.stderr == "", out.stderr
    frames = decode_frames(out.stdout)
    node = full.get("node", "nodeX")
    assert frames.damaged == {} and frames.noise == [], (frames.damaged, frames.noise)
    assert list(frames.documents) == [node]
    assert frames.hello[node] > 0
    return frames.documents[node], wall, cpu, out.stdout


def stack_frames(process: dict) -> list[dict]:
    return [
        frame
        for sample in process["samples"]
        for thread in sample["threads"] or ()
        for frame in thread["frames"]
    ]


def proc_state(pid: int) -> str:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rfind(")") + 2 :].split()[0]


def tracer_pid(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("TracerPid:"):
            return int(line.split()[1])
    raise AssertionError("no TracerPid line")


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Three ranks of job JOB on nodeX (one with a spawn worker, one with a fork child, one
    blocked at a known line) and two decoys."""
    directory = tmp_path_factory.mktemp("collector_job")
    targets = Targets(directory)
    try:
        rank0, worker = targets.start("spawner", rank_env(0))
        (rank1,) = targets.start("blocked", rank_env(1))
        rank2, forked, port = targets.start("forker", rank_env(2))
        flag_y, flag_z = directory / "traced_nodeY", directory / "traced_otherjob"
        (decoy_y,) = targets.start("decoy", rank_env(5, node="nodeY"), str(flag_y))
        (decoy_z,) = targets.start("decoy", rank_env(0, job=DECOY_JOB), str(flag_z))
        block_line = (
            TARGET.splitlines().index(
                next(line for line in TARGET.splitlines() if "# BLOCK-HERE" in line)
            )
            + 1
        )
        yield {
            "targets": targets,
            "ranks": {0: rank0, 1: rank1, 2: rank2},
            "worker": worker,
            "forked": forked,
            "port": port,
            "decoys": [decoy_y, decoy_z],
            "flags": [flag_y, flag_z],
            "block_line": block_line,
            "script": str(targets.script),
        }
    finally:
        targets.kill_all()


@pytest.fixture(scope="module")
def collected(job: dict[str, Any]) -> dict[str, Any]:
    args = {
        "job_id": JOB,
        "node": "nodeX",
        "samples": 3,
        "interval": 0.5,
        "strace_s": 1.0,
        "strace": [STRACE] if STRACE else [],
        "deadline_s": 25.0,
    }
    doc, wall, cpu, raw = run_collector(args)
    return {"doc": doc, "wall": wall, "cpu": cpu, "raw": raw}


# ---------------------------------------------------------------- the real run


def test_finds_exactly_the_three_ranks_by_proc_scan(job: dict, collected: dict) -> None:
    doc = collected["doc"]
    assert doc["discovery"] == "proc"
    assert any("scanned /proc instead" in e for e in doc["errors"])
    ranks = {p["rank"]: p for p in doc["processes"] if p["role"] == "rank"}
    assert sorted(ranks) == [0, 1, 2]
    assert {r: p["pid"] for r, p in ranks.items()} == job["ranks"]
    for number, process in ranks.items():
        assert process["local_rank"] == number and process["world_size"] == 3
        assert process["launcher"] == "srun"
        assert process["step_id"] == "0"
        assert process["cmdline"][-1] in ("spawner", "blocked", "forker")
        assert process["state"] in ("S", "R")
        assert isinstance(process["cpu_percent"], float)
        assert process["rss_kb"] > 0 and process["num_threads"] >= 1


def test_worker_and_fork_child_belong_to_their_ranks(job: dict, collected: dict) -> None:
    by_pid = {p["pid"]: p for p in collected["doc"]["processes"]}
    worker, forked = by_pid[job["worker"]], by_pid[job["forked"]]
    assert worker["role"] == "dataloader_worker"
    assert worker["rank_pid"] == job["ranks"][0] and worker["rank"] == 0
    assert forked["role"] == "child"
    assert forked["rank_pid"] == job["ranks"][2] and forked["rank"] == 2
    assert worker["via"] == [] and forked["via"] == []  # each its rank's own child
    # Workers are sampled once; ranks in every round.
    assert len(worker["samples"]) == 1 and worker["samples"][0]["threads"]
    assert all(len(by_pid[pid]["samples"]) == 3 for pid in job["ranks"].values())


def test_tcp_connections_of_a_rank_with_their_interface(job: dict, collected: dict) -> None:
    by_pid = {p["pid"]: p for p in collected["doc"]["processes"]}
    conns = by_pid[job["ranks"][2]]["connections"]
    listen = f"127.0.0.1:{job['port']}"
    states = sorted((c["state"], c["local"] == listen, c["remote"] == listen) for c in conns)
    # the server socket, the accepted end (local = listen), the client end (remote = listen)
    assert states == [
        ("ESTABLISHED", False, True),
        ("ESTABLISHED", True, False),
        ("LISTEN", True, False),
    ]
    assert {c["interface"] for c in conns} == {"lo"}
    assert by_pid[job["ranks"][1]]["connections"] == []


@pytest.mark.skipif(STRACE is None, reason="strace not found")
def test_connections_are_looked_up_again_when_strace_stops(job: dict, collected: dict) -> None:
    by_pid = {p["pid"]: p for p in collected["doc"]["processes"]}
    for rank in (0, 1, 2):
        process = by_pid[job["ranks"][rank]]
        # every traced rank's established connections are looked up with their tcp_info
        recent = process["recent_traffic"]
        window_ms = int(process["strace"]["window_s"] * 1000)
        assert recent["within_ms"] == window_ms + 500
        # rank 2 holds both ends of one connection (its listener is not looked up); the
        # others none
        assert recent["checked"] == (2 if rank == 2 else 0)
        # only those that sent or received within the window are listed, with both times
        for conn in recent["active"]:
            assert set(conn) == {"local", "remote", "last_sent_ms", "last_received_ms"}
            assert min(conn["last_sent_ms"], conn["last_received_ms"]) <= recent["within_ms"]
            assert f"127.0.0.1:{job['port']}" in (conn["local"], conn["remote"])
            # how long the rank moved nothing: no longer than since any connection's data
            assert recent["quiet_ms"] <= min(conn["last_sent_ms"], conn["last_received_ms"])
        # present when a connection was checked, its least time since data, and only then
        assert ("quiet_ms" in recent) == (recent["checked"] > 0)
        if recent["checked"]:
            assert isinstance(recent["quiet_ms"], int) and recent["quiet_ms"] >= 0


def test_without_strace_the_connections_are_read_again_at_the_looks_end(job: dict) -> None:
    # WHEN the collector takes one sample and no strace (`--samples 1 --strace 0`)
    doc, _, _, _ = run_collector({"job_id": JOB, "node": "nodeX", "samples": 1, "interval": 0.5,
                                  "strace_s": 0, "strace": [], "deadline_s": 25.0})
    by_pid = {p["pid"]: p for p in doc["processes"]}
    # THEN rank 2's two established ends are read with their tcp_info at the look's end: which
    # carried data in its last second, and how long the rank has moved nothing
    recent = by_pid[job["ranks"][2]]["recent_traffic"]
    assert recent["read_at"] == "look" and recent["within_ms"] == 1000 and recent["checked"] == 2
    assert isinstance(recent["quiet_ms"], int) and recent["quiet_ms"] >= 0
    for conn in recent["active"]:
        assert min(conn["last_sent_ms"], conn["last_received_ms"]) <= 1000
        assert recent["quiet_ms"] <= min(conn["last_sent_ms"], conn["last_received_ms"])
    # AND ranks without a connection have none to read
    assert all("recent_traffic" not in by_pid[job["ranks"][r]] for r in (0, 1))


def test_decoys_are_never_inspected(job: dict, collected: dict) -> None:
    pids = {p["pid"] for p in collected["doc"]["processes"]}
    assert not pids & set(job["decoys"])
    assert str(job["decoys"][0]) not in collected["raw"]  # not even mentioned
    for flag in job["flags"]:
        assert not flag.exists(), f"a decoy was ptrace-attached: {flag.read_text()}"


def test_blocked_rank_shows_its_function_and_line(job: dict, collected: dict) -> None:
    by_pid = {p["pid"]: p for p in collected["doc"]["processes"]}
    blocked = by_pid[job["ranks"][1]]
    assert all(s["error"] is None and s["threads"] for s in blocked["samples"])
    frames = stack_frames(blocked)
    assert {
        "name": "wait_for_peer",
        "filename": job["script"],
        "line": job["block_line"],
        "module": None,
    } in frames
    thread = blocked["samples"][0]["threads"][0]
    assert set(thread) == {
        "thread_id",
        "os_thread_id",
        "thread_name",
        "active",
        "owns_gil",
        "frames",
    }
    offsets = [s["t"] for s in blocked["samples"]]
    assert offsets == sorted(offsets) and offsets[-1] - offsets[0] >= 0.9


def test_only_allowlisted_environment_leaves_the_node(collected: dict) -> None:
    raw_doc = json.dumps(collected["doc"])
    for secret in ("hf_secret_value", "wandb-secret", "also-secret", "HF_TOKEN", "AWS_SECRET"):
        assert secret not in raw_doc
    rank = next(p for p in collected["doc"]["processes"] if p["role"] == "rank")
    assert rank["env"]["NCCL_SOCKET_IFNAME"] == "lo"
    assert rank["env"]["MASTER_ADDR"] == "127.0.0.1"
    assert "TORCH_HUB_TOKEN" not in rank["env"] and "PATH" not in rank["env"]


@pytest.mark.skipif(STRACE is None, reason="strace not installed: apt-get install -y strace")
def test_strace_table_for_every_rank(job: dict, collected: dict) -> None:
    ranks = [p for p in collected["doc"]["processes"] if p["role"] == "rank"]
    for process in ranks:
        assert process["strace"]["status"] == "ok", process["strace"]
        assert 0.9 <= process["strace"]["window_s"] < 3
    busy = next(p for p in ranks if p["pid"] == job["ranks"][0])
    assert "% time" in busy["strace"]["text"] and "clock_nanosleep" in busy["strace"]["text"]
    # strace let go of every rank again
    assert all(tracer_pid(pid) == 0 for pid in job["ranks"].values())


def test_gpu_absent_and_loopback_listed(collected: dict) -> None:
    doc = collected["doc"]
    assert doc["gpu"]["status"] == "absent"
    assert doc["gpu"]["message"] == "no GPUs visible (nvidia-smi not found)"
    assert doc["tools"]["nvidia-smi"] is None and doc["tools"]["py-spy"] == PYSPY
    lo = next(i for i in doc["nics"]["interfaces"] if i["name"] == "lo")
    assert lo["kind"] == "loopback" and "127.0.0.1/8" in lo["addresses"]


def test_document_header(collected: dict) -> None:
    doc = collected["doc"]
    assert doc["format"] == 1 and doc["collector_version"] == "1"
    assert doc["node"] == "nodeX" and doc["python"].count(".") == 2
    assert 0 < doc["duration_s"] < collected["wall"]
    # its own CPU: at least an interpreter's start, less than all the wall time it took
    assert 0.001 < doc["cpu_s"] < doc["duration_s"] + 0.5
    assert abs(doc["started"] - time.time()) < 120


def test_stopped_process_is_dumped_nonblocking_and_left_stopped(tmp_path: Path) -> None:
    # GIVEN a rank-like process of another job, stopped with SIGSTOP
    targets = Targets(tmp_path)
    try:
        (pid,) = targets.start("blocked", rank_env(0, job=OTHER_JOB))
        os.kill(pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while proc_state(pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proc_state(pid) == "T"
        # WHEN the collector (shipped as `python3 -I -S -c <source>`) samples it, strace on
        doc, _, _, _ = run_collector(
            {
                "job_id": OTHER_JOB,
                "node": "nodeX",
                "samples": 2,
                "interval": 0.2,
                "strace_s": 0.5,
                "strace": [STRACE] if STRACE else [],
            },
        )
        # THEN its stack was read, strace stayed away, and it is still stopped, untraced
        (process,) = doc["processes"]
        assert process["pid"] == pid and process["state"] == "T"
        assert all(s["threads"] and s["error"] is None for s in process["samples"])
        assert process["samples"][0]["note"] == "read with --nonblocking: process in state T"
        assert "wait_for_peer" in {f["name"] for f in stack_frames(process)}
        if STRACE:
            assert process["strace"]["status"] == "skipped"
        time.sleep(0.2)
        assert proc_state(pid) == "T" and tracer_pid(pid) == 0
    finally:
        targets.kill_all()


def test_deadline_is_kept_and_skipped_samples_are_named(job: dict) -> None:
    # GIVEN 5 samples 1 s apart and a strace window, but only 3 s in all (strace starts with
    # ~2 s left: 2.5 s asked is always shortened)
    args = {
        "job_id": JOB,
        "node": "nodeX",
        "samples": 5,
        "interval": 1.0,
        "strace_s": 2.5,
        "strace": [STRACE] if STRACE else [],
        "deadline_s": 3.0,
    }
    # WHEN the collector runs
    doc, wall, _, _ = run_collector(args)
    # THEN the document arrives in time and says what was left out
    assert wall < 3.5
    assert any(e.startswith("skipped samples 4-5 of 5") for e in doc["errors"]), doc["errors"]
    ranks = [p for p in doc["processes"] if p["role"] == "rank"]
    assert len(ranks) == 3 and all(len(p["samples"]) == 3 for p in ranks)
    if STRACE:
        # strace traced the ranks during the later samples, its window cut to fit the deadline
        for p in ranks:
            assert p["strace"]["status"] == "ok", p["strace"]
            # the window asked of strace is shortened; the one measured also holds strace's
            # detach after SIGINT (0.15 s seen on a loaded machine)
            message = p["strace"]["message"]
            assert message.startswith("window shortened from 2.50 s to "), message
            assert float(message.split(" to ")[1].split(" s")[0]) < 2.5, message
            assert 1.0 < p["strace"]["window_s"] < 2.5
            # strace is attached from the start: the first sample is read without suspending
            # the rank; a later one too, or kept from an earlier one (a rank none of whose
            # threads ran), or read with the suspend once the shortened window has ended
            assert p["samples"][0]["note"] == "read with --nonblocking: strace attached"
            for sample in p["samples"][1:]:
                note = sample.get("note") or ""
                assert note in ("", "read with --nonblocking: strace attached") or (
                    note.startswith("same as sample")), note


def test_nvidia_smi_field_fallback_and_compute_apps(tmp_path: Path) -> None:
    # GIVEN an nvidia-smi of a pre-535 driver that does not know clocks_event_reasons
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        '  *clocks_event_reasons*) echo \'Field "clocks_event_reasons.active" is not a valid '
        "field to query.'; exit 2;;\n"
        "  --query-gpu=*) echo 'index, uuid, name'; echo '0, GPU-1234, NVIDIA A100'; exit 0;;\n"
        "  --query-compute-apps=*) echo 'gpu_uuid, pid, process_name, used_gpu_memory [MiB]';"
        " echo 'GPU-1234, 4242, python, 1000 MiB'; exit 0;;\n"
        "esac\nexit 9\n"
    )
    fake.chmod(0o755)
    # WHEN the collector runs with it (no job processes at all)
    doc, _, _, _ = run_collector(
        {"job_id": "1", "node": "n1", "samples": 0, "strace_s": 0, "nvidia_smi": [str(fake)]}
    )
    # THEN the second field set was used and both outputs are kept raw
    gpu = doc["gpu"]
    assert gpu["status"] == "ok" and doc["tools"]["nvidia-smi"] == str(fake)
    assert "clocks_throttle_reasons.active" in gpu["query_gpu"]["argv"][1]
    assert gpu["query_gpu"]["returncode"] == 0 and "NVIDIA A100" in gpu["query_gpu"]["text"]
    assert "4242" in gpu["compute_apps"]["text"]
    assert doc["processes"] == [] and any("no rank processes" in e for e in doc["errors"])


def test_timings_of_three_ranks_three_samples_are_reasonable(collected: dict) -> None:
    # 3 rounds 0.5 s apart + 1 s strace: about 2.2 s; the CPU is mostly py-spy and strace.
    print(f"collector wall {collected['wall']:.2f} s, CPU {collected['cpu']:.2f} s")
    assert collected["wall"] < 6
    assert collected["cpu"] < 3


# ---------------------------------------------------------------- pure parts


def test_parse_listpids_keeps_steps_and_drops_placeholders() -> None:
    text = (
        "PID      JOBID    STEPID   LOCALID GLOBALID\n"
        "-1       13073    extern   0       0\n"
        "3913206  13073    extern   -       -\n"
        "3913212  13073    batch    0       0\n"
        "3913230  13073    0        1       5\n"
    )
    assert discovery.parse_listpids(text) == [
        (3913206, "extern"),
        (3913212, "batch"),
        (3913230, "0"),
    ]


def test_raw_environ_names_the_node_of_a_process() -> None:
    # Where several slurmd share a host, a process of another node is dropped before its
    # environment is parsed; one that names this node is ours, one that names none is unknown.
    needle = discovery._node_needle("node002", cluster="")
    env = b"PATH=/bin\0SLURMD_NODENAME=%s\0SLURM_PROCID=3\0"
    whose = discovery._environ_node
    assert whose(env % b"node001", needle) == "foreign"
    assert whose(env % b"node002", needle) == "ours"
    assert whose(env % b"node0022", needle) == "foreign"  # a prefix is not the node
    assert whose(b"SLURMD_NODENAME=node002\0X=1\0", needle) == "ours"
    assert whose(b"SLURMD_NODENAME=node001\0X=1\0", needle) == "foreign"
    assert whose(b"PATH=/bin\0MY_SLURMD_NODENAME=node002\0", needle) is None
    assert whose(b"PATH=/bin\0MY_SLURMD_NODENAME=node001\0", needle) is None
    assert whose(b"", needle) is None  # a zombie's: nothing to say
    # Two clusters on one host (emulated) can share job ids and node names: a process that
    # names another cluster than our step's is foreign, whatever node it names
    needle = discovery._node_needle("node002", cluster="alpha")
    tagged = b"SLURM_CLUSTER_NAME=%s\0SLURMD_NODENAME=node002\0"
    assert whose(tagged % b"alpha", needle) == "ours"
    assert whose(tagged % b"beta", needle) == "foreign"
    assert whose(tagged % b"alphabet", needle) == "foreign"
    assert whose(b"SLURMD_NODENAME=node002\0", needle) == "ours"  # no cluster named: the node says
    assert procfs.parse_environ(env % b"node002")["SLURM_PROCID"] == "3"


def test_proc_net_tcp_addresses_and_states() -> None:
    text = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
        "timeout inode\n"
        "   0: 0100007F:1F90 0100007F:C350 01 00000010:00000002 00:00000000 00000000  0 0 "
        "12345 1 0000000000000000 20 4 30 10 -1\n"
    )
    table = sockets.parse_proc_net_tcp(text)
    assert table == {"12345": ("127.0.0.1", 8080, "127.0.0.1", 50000, "ESTABLISHED", 16, 2)}
    text6 = (
        "  sl  local_address                         remote_address                        st\n"
        "   0: 00000000000000000000000001000000:1F90 0000000000000000FFFF00000100007F:C350 0A "
        "00000000:00000000 00:00000000 00000000 0 0 777 1\n"
    )
    assert sockets.parse_proc_net_tcp(text6) == {
        "777": ("::1", 8080, "127.0.0.1", 50000, "LISTEN", 0, 0)
    }


def test_environment_allowlist() -> None:
    env = {
        "NCCL_DEBUG": "INFO",
        "NCCL_IB_AUTH_KEY": "k",
        "TORCH_HUB_TOKEN": "t",
        "GLOO_X": "1",
        "HF_TOKEN": "t",
        "AWS_ACCESS_KEY_ID": "a",
        "RANK": "3",
        "SLURM_JOB_ID": "1",
        "SLURM_JOB_ACCOUNT": "acct",
        "PATH": "/bin",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "NCCL_IB_Token": "t",  # the deny list is case-insensitive
        "NCCL_IB_PWD": "p",
        "TORCH_SESSION_COOKIE": "c",
        "PWD": "/home/u/secret-project",  # the working directory: not on the allowlist
        "TORCH_HOME": "https://user:pw@cache.example/torch",
    }
    assert procfs.allowed_env(env) == {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "GLOO_X": "1",
        "NCCL_DEBUG": "INFO",
        "RANK": "3",
        "SLURM_JOB_ID": "1",
        "TORCH_HOME": "https://user:***@cache.example/torch",
    }


@pytest.mark.parametrize(
    ("argv", "masked"),
    [
        (["train.py", "--wandb-api-key=abc123"], ["train.py", "--wandb-api-key=***"]),
        (["train.py", "--hf_token", "hf_x", "--lr", "0.1"], ["train.py", "--hf_token", "***", "--lr", "0.1"]),
        (["x", "--password", "pw", "--api_key=k", "--token", "t"],
         ["x", "--password", "***", "--api_key=***", "--token", "***"]),
        (["x", "--apiKey", "A", "--HF_TOKEN=B", "--db-pass", "C"],
         ["x", "--apiKey", "***", "--HF_TOKEN=***", "--db-pass", "***"]),
        (["env", "WANDB_API_KEY=abc", "wandb.api_key=q", "python"],
         ["env", "WANDB_API_KEY=***", "wandb.api_key=***", "python"]),
        (["x", "--data", "https://u:p@ss@host/d?q=a@b", "s3://AK:SK@bucket"],
         ["x", "--data", "https://u:***@host/d?q=a@b", "s3://AK:***@bucket"]),
        # not secrets: short options, look-alike words, a flag followed by an option, user names
        (["x", "-p", "8080", "--tokenizer", "gpt2", "--keep", "3", "--monkey=1"],
         ["x", "-p", "8080", "--tokenizer", "gpt2", "--keep", "3", "--monkey=1"]),
        (["x", "--no-auth", "--epochs", "3", "ssh://git@host/r", "lr=0.1"],
         ["x", "--no-auth", "--epochs", "3", "ssh://git@host/r", "lr=0.1"]),
        (["python", "-c", "key='a'; print(key)"], ["python", "-c", "key='a'; print(key)"]),
    ],
)
def test_secret_option_values_and_url_credentials_are_masked(argv, masked) -> None:
    assert procfs.mask_secrets(argv) == masked


def test_cmdline_of_a_real_process_is_masked(tmp_path) -> None:
    # GIVEN a real process started with a token on its command line and in a URL
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                             "--hf_token=hf_SECRET", "--url", "https://me:pw-SECRET@h/"])
    try:
        deadline = time.monotonic() + 5
        while "--url" not in procfs.read_cmdline(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        # WHEN the collector reads its command line THEN neither secret is in it
        argv = procfs.read_cmdline(proc.pid)
        assert argv[-3:] == ["--hf_token=***", "--url", "https://me:***@h/"]
        assert "SECRET" not in " ".join(argv)
    finally:
        proc.kill()
        proc.wait()


def _info(pid: int, ppid: int, cmdline: list[str], env: dict[str, str], comm: str = "python3"):
    return {
        "pid": pid,
        "env": env,
        "cmdline": cmdline,
        "step_id": "0",
        "stat": {
            "comm": comm,
            "ppid": ppid,
            "state": "S",
            "ticks": 0,
            "num_threads": 1,
            "starttime": 0,
            "rss_pages": 1,
        },
    }


def test_via_names_the_processes_between_a_rank_and_its_tool() -> None:
    # GIVEN rank 10 running a tool through sh and bash (shell=True running a script), and a
    # chain longer than MAX_VIA
    from slurmdiag.collector.main import MAX_VIA, _via

    def proc(pid: int, ppid: int, rank_pid: int | None = 10) -> dict:
        return {"pid": pid, "stat": {"ppid": ppid}, "rank_pid": rank_pid}

    procs = {p["pid"]: p for p in (proc(10, 1, None), proc(11, 10), proc(12, 11), proc(13, 12))}
    assert _via(procs, procs[13]) == [12, 11]
    assert _via(procs, procs[11]) == []
    chain = {p: proc(p, p - 1) for p in range(11, 11 + MAX_VIA + 3)}
    assert len(_via({10: proc(10, 1, None), **chain}, chain[10 + MAX_VIA + 2])) == MAX_VIA


def test_classify_torchrun_agent_ranks_and_workers() -> None:
    # GIVEN srun -> bash -> torchrun agent -> 2 ranks, one with a forked DataLoader worker
    slurm = {"SLURM_PROCID": "0", "SLURM_JOB_ID": "7"}
    procs = {
        10: _info(10, 1, ["/bin/bash", "run.sh"], slurm, comm="bash"),
        11: _info(11, 10, ["/usr/bin/python3", "/venv/bin/torchrun", "train.py"], slurm),
        12: _info(
            12,
            11,
            ["/usr/bin/python3", "-u", "train.py"],
            {**slurm, "RANK": "0", "TORCHELASTIC_RUN_ID": "x"},
        ),
        13: _info(
            13,
            11,
            ["/usr/bin/python3", "-u", "train.py"],
            {**slurm, "RANK": "1", "TORCHELASTIC_RUN_ID": "x"},
        ),
        14: _info(
            14,
            13,
            ["/usr/bin/python3", "-u", "train.py"],
            {**slurm, "RANK": "1", "TORCHELASTIC_RUN_ID": "x"},
            comm="pt_data_worker",
        ),
    }
    discovery.classify(procs)
    roles = {pid: (info["role"], info["rank_pid"]) for pid, info in procs.items()}
    assert roles == {
        10: (None, None),
        11: ("agent", None),
        12: ("rank", None),
        13: ("rank", None),
        14: ("dataloader_worker", 13),
    }
    assert discovery._launcher(procs[12], procs) == "torchrun"


def test_ranks_the_batch_script_started_itself_are_not_called_srun_ranks() -> None:
    # GIVEN a batch script (step "batch") that starts three ranks from a shell loop, with RANK
    # set by the loop, and an mpirun it started
    slurm = {"SLURM_PROCID": "0", "SLURM_JOB_ID": "7"}
    procs = {
        30: _info(30, 1, ["/bin/bash", "/var/spool/slurmd/job00007/slurm_script"], slurm,
                  comm="bash"),
        **{31 + i: _info(31 + i, 30, ["/usr/bin/python3", "train.py"],
                         {**slurm, "RANK": str(i), "WORLD_SIZE": "3"}) for i in range(3)},
        40: _info(40, 30, ["/usr/bin/python3", "mpi_train.py"],
                  {**slurm, "OMPI_COMM_WORLD_RANK": "1"}),
    }
    for info in procs.values():
        info["step_id"] = "batch"
    discovery.classify(procs)
    # THEN they are ranks whose launcher is the batch script, not srun (whose task count would
    # then be taken for the world size); mpirun stays mpirun
    assert [procs[p]["role"] for p in (31, 32, 33)] == ["rank"] * 3
    assert {discovery._launcher(procs[p], procs) for p in (31, 32, 33)} == {"batch"}
    assert discovery._launcher(procs[40], procs) == "mpirun"
    procs[31]["step_id"] = "0"  # the same process under srun
    assert discovery._launcher(procs[31], procs) == "srun"


def test_classify_submitit_parent_that_started_ranks_is_an_agent() -> None:
    slurm = {"SLURM_PROCID": "0", "SLURM_JOB_ID": "7", "SUBMITIT_FOLDER": "/x"}
    submit = ["/usr/bin/python3", "-u", "-m", "submitit.core._submit", "/x"]
    procs = {
        20: _info(20, 1, submit, slurm),
        21: _info(21, 20, ["/usr/bin/python3", "worker.py"], {**slurm, "RANK": "0"}),
        22: _info(22, 20, ["/usr/bin/python3", "worker.py"], {**slurm, "RANK": "1"}),
    }
    discovery.classify(procs)
    assert procs[20]["role"] == "agent" and procs[20]["agent_kind"] == "submitit"
    assert procs[21]["role"] == procs[22]["role"] == "rank"
    assert discovery._launcher(procs[22], procs) == "submitit"


def test_ranks_a_launcher_gives_their_rank_on_the_command_line() -> None:
    # GIVEN srun task 1 (node 1) running a home-grown launcher that starts two ranks with
    # subprocess, each told its rank by flags, inheriting the task's SLURM_PROCID and LOCALID
    slurm = {"SLURM_PROCID": "1", "SLURM_LOCALID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "7"}
    procs = {
        50: _info(50, 1, ["/usr/bin/python3", "-u", "launch.py"], slurm),
        51: _info(51, 50, ["/usr/bin/python3", "-u", "train.py", "--rank", "2", "--local-rank",
                           "0", "--world-size", "4"], slurm),
        52: _info(52, 50, ["/usr/bin/python3", "-u", "train.py", "--rank=3", "--local_rank=1",
                           "--world_size=4"], slurm),
        53: _info(53, 52, ["/usr/bin/python3", "-c",
                           "from multiprocessing.spawn import spawn_main; spawn_main()",
                           "--multiprocessing-fork"], slurm),
    }
    discovery.classify(procs)
    # THEN they are ranks 2 and 3 (local 0, 1, of 4), the launcher their agent
    roles = {pid: (info["role"], info["rank_pid"]) for pid, info in procs.items()}
    assert roles == {50: ("agent", None), 51: ("rank", None), 52: ("rank", None),
                     53: ("dataloader_worker", 52)}
    assert [discovery.identity(procs[p]) for p in (51, 52)] == [("2", "0", "4"), ("3", "1", "4")]


def _relaunching_node(task: int, children_env: list[dict[str, str]], script: str = "train.py"
                      ) -> dict[int, dict]:
    """srun task ``task`` (one a node) running train.py, a torch rank (14 threads), and the
    Python children it started with the given environments (SLURM_* inherited)."""
    slurm = {"SLURM_PROCID": str(task), "SLURM_NTASKS": "2", "SLURM_JOB_ID": "7"}
    base = 100 * (task + 1)
    procs = {base: _info(base, 1, ["/usr/bin/python3", "-u", "train.py", "--lr", "3"], slurm)}
    procs[base]["stat"]["num_threads"] = 14
    for index, env in enumerate(children_env, 1):
        procs[base + index] = _info(base + index, base, ["/venv/bin/python3", f"/home/u/{script}",
                                                         "--lr", "3"], {**slurm, **env})
        procs[base + index]["stat"]["num_threads"] = 14
    return procs


def test_a_rank_that_runs_its_script_again_for_its_nodes_other_ranks() -> None:
    # GIVEN on each of 2 nodes the srun task, local rank 0 and a rank itself, that ran its own
    # script again for local ranks 1-2 (Lightning's subprocess script launcher): LOCAL_RANK,
    # NODE_RANK and WORLD_SIZE in the children's environment, no RANK
    procs = {}
    for task in (0, 1):
        procs.update(_relaunching_node(task, [
            {"LOCAL_RANK": str(local), "NODE_RANK": str(task), "WORLD_SIZE": "6"}
            for local in (1, 2)]))
    discovery.classify(procs)
    # THEN all six are ranks, numbered NODE_RANK x 3 + local rank, the parents not launchers
    assert {pid: info["role"] for pid, info in procs.items()} == dict.fromkeys(procs, "rank")
    assert [discovery.identity(procs[p]) for p in (100, 101, 102, 200, 201, 202)] == [
        (str(r), str(r % 3), "6") for r in range(6)]
    assert "NODE_RANK (1) x 3 processes + its local rank (2)" in procs[202]["inferred"]
    # AND without NODE_RANK the task's SLURM_PROCID says the node, the tasks x 3 the world
    procs = _relaunching_node(1, [{"LOCAL_RANK": "1"}, {"LOCAL_RANK": "2"}])
    discovery.classify(procs)
    assert [discovery.identity(procs[p]) for p in (200, 201, 202)] == [
        ("3", "0", "6"), ("4", "1", "6"), ("5", "2", "6")]


@pytest.mark.parametrize("why, children_env, script", [
    # numbered from 0: the children are all of the node's ranks, their parent a launcher's
    # place (_mark_env_ranks' rule), not local rank 0
    ("from zero", [{"LOCAL_RANK": "0"}, {"LOCAL_RANK": "1"}], "train.py"),
    # another script given a LOCAL_RANK: the rank's evaluation, not its sibling
    ("other script", [{"LOCAL_RANK": "1"}], "evaluate.py"),
    # RANK in its environment: a launcher numbered it already
    ("has RANK", [{"LOCAL_RANK": "1", "RANK": "1"}], "train.py"),
    # a gap in the numbers (1 and 3): not 1..n-1
    ("gap", [{"LOCAL_RANK": "1"}, {"LOCAL_RANK": "3"}], "train.py"),
])
def test_children_that_are_not_a_relaunch_stay_as_they_were(why: str, children_env: list,
                                                            script: str) -> None:
    procs = _relaunching_node(0, children_env, script)
    discovery.classify(procs)
    assert not procs[100].get("relaunches"), why
    assert all("inferred" not in info or "runs its own script" not in info["inferred"]
               for info in procs.values()), why


def test_a_wrapper_or_a_rank_running_itself_again_is_no_relaunch() -> None:
    # GIVEN a parent of a launcher's one or two threads: a wrapper, not local rank 0
    procs = _relaunching_node(0, [{"LOCAL_RANK": "1"}])
    procs[100]["stat"]["num_threads"] = 2
    discovery.classify(procs)
    assert not procs[100].get("relaunches")
    # AND the same script run again with the parent's own LOCAL_RANK (torchrun's rank running
    # itself again for another purpose) is no sibling either
    procs = _relaunching_node(0, [{"LOCAL_RANK": "1"}])
    procs[100]["env"]["LOCAL_RANK"] = procs[101]["env"]["LOCAL_RANK"] = "1"
    discovery.classify(procs)
    assert (procs[101]["role"], procs[101]["rank_pid"]) == ("child", 100)


def test_one_child_given_a_rank_on_its_command_line_stays_its_parents_child() -> None:
    # GIVEN rank 0 running an evaluation script with --rank 0, and rank 1 a helper with --rank 5
    slurm = {"SLURM_JOB_ID": "7"}
    procs = {
        60: _info(60, 1, ["/usr/bin/python3", "train.py"], {**slurm, "SLURM_PROCID": "0"}),
        61: _info(61, 60, ["/usr/bin/python3", "eval.py", "--rank", "0"],
                  {**slurm, "SLURM_PROCID": "0"}),
        62: _info(62, 1, ["/usr/bin/python3", "train.py"], {**slurm, "SLURM_PROCID": "1"}),
        63: _info(63, 62, ["/usr/bin/python3", "serve_shards.py", "--rank", "5"],
                  {**slurm, "SLURM_PROCID": "1"}),
    }
    discovery.classify(procs)
    # THEN the ranks are the srun tasks; their lone children are theirs (a launcher starts two
    # or more ranks, with distinct ranks)
    roles = {pid: (info["role"], info["rank_pid"]) for pid, info in procs.items()}
    assert roles == {60: ("rank", None), 61: ("child", 60), 62: ("rank", None), 63: ("child", 62)}
    # AND two data servers that a torch rank (its threads) starts as --rank 0 and --rank 1 are
    # its children too: a launcher runs one or two threads
    procs[64] = _info(64, 62, ["/usr/bin/python3", "serve_shards.py", "--rank", "6"],
                      {**slurm, "SLURM_PROCID": "1"})
    procs[62]["stat"]["num_threads"] = 14
    discovery.classify(procs)
    assert [procs[p]["role"] for p in (62, 63, 64)] == ["rank", "child", "child"]
    procs[62]["stat"]["num_threads"] = 1  # (the same tree under a one-thread launcher)
    discovery.classify(procs)
    assert [procs[p]["role"] for p in (62, 63, 64)] == ["agent", "rank", "rank"]


def test_a_launchers_rank_whose_sibling_died_unreaped_keeps_its_flags() -> None:
    # GIVEN a one-thread launcher (one srun task a node, SLURM_PROCID 1) that started ranks 2
    # and 3 with --rank flags; rank 3 exited before the launcher waited for it: a zombie,
    # its command line and environment gone
    env = {"SLURM_JOB_ID": "7", "SLURM_PROCID": "1"}
    procs = {
        90: _info(90, 1, ["/usr/bin/python3", "launch.py"], env),
        91: _info(91, 90, ["/usr/bin/python3", "launch.py", "--rank", "2", "--world-size", "4"],
                  env),
        92: {**_info(92, 90, [], {}), "zombie": True},
    }
    procs[92]["stat"].update(state="Z", comm="python3")
    discovery.classify(procs)
    # THEN the live rank is rank 2, not the launcher's task number; the zombie is no rank
    assert discovery.identity(procs[91]) == ("2", None, "4")
    assert [procs[p]["role"] for p in (90, 91, 92)] == ["agent", "rank", None]
    # AND without the zombie, a lone child's --rank stays unread (a LoRA --rank 8, an
    # evaluation's --rank 0): the task number is its identity, as before
    del procs[92]
    discovery.classify(procs)
    assert discovery.identity(procs[91])[0] == "1"


def test_the_launchers_variables_come_before_the_command_line() -> None:
    # GIVEN torchrun-style ranks whose RANK says otherwise than their flags
    env = {"SLURM_PROCID": "0", "SLURM_JOB_ID": "7", "TORCHELASTIC_RUN_ID": "x"}
    procs = {
        70: _info(70, 1, ["/usr/bin/python3", "/venv/bin/torchrun", "train.py"], env),
        71: _info(71, 70, ["/usr/bin/python3", "train.py", "--rank", "9"],
                  {**env, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}),
        72: _info(72, 70, ["/usr/bin/python3", "train.py", "--rank", "8"],
                  {**env, "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"}),
    }
    discovery.classify(procs)
    assert [discovery.identity(procs[p]) for p in (71, 72)] == [("0", "0", "2"), ("1", "1", "2")]


def test_the_child_of_a_python_wrapper_is_the_rank() -> None:
    # GIVEN srun tasks running a wrapper written in Python (conda run, a launch.py: one thread)
    # that runs the training command as its only child (a torch rank: many threads), and a
    # torch rank that runs a pure-Python evaluation script as its child
    slurm = {"SLURM_JOB_ID": "7"}
    procs = {
        80: _info(80, 1, ["/usr/bin/python3", "-u", "wrapper.py", "python", "train.py"],
                  {**slurm, "SLURM_PROCID": "0"}),
        81: _info(81, 80, ["/usr/bin/python3", "train.py"], {**slurm, "SLURM_PROCID": "0"}),
        82: _info(82, 1, ["/usr/bin/python3", "train.py"], {**slurm, "SLURM_PROCID": "1"}),
        83: _info(83, 82, ["/usr/bin/python3", "score.py"], {**slurm, "SLURM_PROCID": "1"}),
    }
    procs[81]["stat"]["num_threads"] = procs[82]["stat"]["num_threads"] = 14
    discovery.classify(procs)
    # THEN the wrapper is the rank's launcher and the evaluation stays its rank's child
    roles = {pid: (info["role"], info["rank_pid"]) for pid, info in procs.items()}
    assert roles == {80: ("agent", None), 81: ("rank", None), 82: ("rank", None),
                     83: ("child", 82)}
    # and a wrapper whose child has not started its threads yet is taken for the rank
    procs[81]["stat"]["num_threads"] = 1
    discovery.classify(procs)
    assert (procs[80]["role"], procs[81]["role"]) == ("rank", "child")


def _run_with_stuck_collect(
    args: dict[str, Any], send_sigterm: bool, deaf: bool = False
) -> tuple[dict, float]:
    """Run main() with a collect phase that never returns; returns (document, wall s).

    ``deaf``: the main thread blocks SIGALRM first, so its handler never runs, as when a read
    of /proc sits in the kernel (a process in D state, a dead mount): only the backup thread
    can emit.
    """
    driver = (
        "import posix, signal, sys, time; sys.path.insert(0, sys.argv.pop(1))\n"
        "from slurmdiag.collector import main\n"
        "def stuck(options, clock, doc, status):\n"
        "    status['phase'] = 'py-spy sampling'\n"
        f"    if {deaf}: signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGALRM}})\n"
        "    time.sleep(60)\n"
        "main.collect = stuck\n"
        "posix._exit(main.main(sys.argv))\n"
    )
    argv = ["python3", "-I", "-S", "-c", driver, str(REPO), json.dumps(full_args(args))]
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        hello = proc.stdout.readline()
        assert hello.startswith("@SDG1-HELLO n1 ")
        if send_sigterm:
            time.sleep(0.3)
            proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    wall = time.monotonic() - started
    frames = decode_frames(hello + rest)
    assert frames.damaged == {} and frames.noise == []
    return frames.documents["n1"], wall


def test_watchdog_emits_a_partial_document_before_the_deadline() -> None:
    doc, wall = _run_with_stuck_collect({"job_id": "1", "node": "n1", "deadline_s": 1.5}, False)
    # On the collector's own clock (from main(): a loaded machine's interpreter start-up is not
    # the watchdog's), the alarm comes WATCHDOG_MARGIN_S before the deadline
    assert 1.2 < doc["duration_s"] < 1.5 and wall < 5.0
    assert doc["errors"] == ["deadline reached during py-spy sampling; document is partial"]
    assert doc["node"] == "n1" and doc["processes"] == []


def test_backup_thread_emits_when_the_main_thread_cannot_take_the_alarm() -> None:
    # GIVEN a collector whose main thread is stuck where the deadline's signal cannot reach it
    # WHEN the deadline comes
    doc, wall = _run_with_stuck_collect(
        {"job_id": "1", "node": "n1", "deadline_s": 1.5}, False, deaf=True)
    # THEN the backup thread writes the partial document, a little after the alarm would have
    # (and still before the deadline, on the collector's own clock)
    assert 1.35 < doc["duration_s"] < 1.6 and wall < 5.0
    assert doc["errors"] == [
        ("deadline reached (collector blocked in the kernel) during py-spy sampling; "
         "document is partial")]
    assert doc["node"] == "n1" and doc["processes"] == []


def test_sigterm_emits_a_partial_document_at_once() -> None:
    doc, wall = _run_with_stuck_collect({"job_id": "1", "node": "n1", "deadline_s": 20}, True)
    assert wall < 2.0
    assert doc["errors"] == ["signal 15 received during py-spy sampling; document is partial"]


# ---------------------------------------------------------------- torch.multiprocessing.spawn

SPAWNED = REPO / "tests/fixtures/py_spy/local_pyspy0.4_json_locals_mp_spawn_rank1.json"


def test_spawned_rank_identity_from_real_locals() -> None:
    # GIVEN py-spy --locals of rank 1 of a job whose ranks mp.spawn started (real dump)
    threads = json.loads(SPAWNED.read_text())
    # THEN the index comes from _wrap's i, rank and world size from the spawned function
    assert stacks.spawn_identity(threads) == {"local_rank": 1, "rank": 1, "world_size": 4}
    # AND a stack without _wrap says nothing
    plain = json.loads((REPO / "tests/fixtures/py_spy/local_pyspy0.4_json_blocked.json").read_text())
    assert stacks.spawn_identity(plain) == {"local_rank": None, "rank": None, "world_size": None}


def _entry(pid: int, ppid: int, role: str, rank_pid: int | None, threads: list | None,
           rank: int | None = None, world_size: int | None = None) -> dict:
    return {"pid": pid, "ppid": ppid, "role": role, "rank_pid": rank_pid, "rank": rank,
            "local_rank": None, "world_size": world_size, "launcher": "srun", "errors": [],
            "samples": [{"t": 0.1, "threads": threads, "error": None}]}


def _fake_pyspy(tmp_path: Path, dumps: dict[int, Path]) -> str:
    """A py-spy that replays a saved dump for each pid (``dump --json --locals --pid P``)."""
    cases = "".join(f"  {pid}) cat {path};;\n" for pid, path in dumps.items())
    tool = tmp_path / "py-spy"
    tool.write_text(f'#!/bin/sh\ncase "$5" in\n{cases}  *) exit 1;;\nesac\n')
    tool.chmod(0o755)
    return str(tool)


@pytest.mark.parametrize("named", [True, False])
def test_spawned_children_become_ranks_and_their_script_an_agent(tmp_path: Path, named: bool) -> None:
    # GIVEN the srun task of node 1 (SLURM_PROCID 1 of 2) whose two "workers" run _wrap, its
    # resource tracker, and a DataLoader worker of the second child
    real = json.loads(SPAWNED.read_text())
    if not named:  # a spawned function that keeps the rank in no local of its own
        for frame in real[0]["frames"]:
            if frame["name"] == "run":
                frame["locals"] = [v for v in frame["locals"]
                                   if v["name"] not in ("rank", "world_size")]
    dumps: list[Path] = []
    for index in (0, 1):
        threads = json.loads(json.dumps(real))
        for frame in threads[0]["frames"]:
            for item in frame.get("locals") or ():
                if frame["name"] == "_wrap" and item["name"] == "i":
                    item["repr"] = str(index)
        path = tmp_path / f"dump{index}.json"
        path.write_text(json.dumps(threads))
        dumps.append(path)
    slim = stacks.slim_threads(real)
    entries = [
        _entry(100, 1, "rank", None, [], rank=1, world_size=2),
        _entry(101, 100, "dataloader_worker", 100, slim),
        _entry(102, 100, "dataloader_worker", 100, slim),
        _entry(103, 100, "child", 100, []),  # multiprocessing's resource tracker
        _entry(104, 102, "dataloader_worker", 100, []),
    ]
    # WHEN they are adopted (py-spy replays each child's dump)
    by_pid = {e["pid"]: e for e in entries}
    pyspy = _fake_pyspy(tmp_path, {101: dumps[0], 102: dumps[1]})
    adopted = stacks.adopt_spawned_ranks(entries, pyspy, tools.Clock(20), 2)
    # THEN the children are ranks with their identity, the script an agent
    assert [e["pid"] for e in adopted] == [101, 102]
    assert by_pid[100]["role"] == "agent" and by_pid[100]["launcher"] == "mp.spawn"
    assert by_pid[100]["rank"] is None
    for pid, local in ((101, 0), (102, 1)):
        entry = by_pid[pid]
        assert (entry["role"], entry["launcher"], entry["local_rank"]) == ("rank", "mp.spawn", local)
        if named:  # what the function computed (a real dump: its rank was 1, world 4)
            assert (entry["rank"], entry["world_size"], entry["errors"]) == (1, 4, [])
        else:  # the usual formula from the script's own rank, and said so
            assert entry["rank"] == 1 * 2 + local and entry["world_size"] == 2 * 2
            assert "inferred" in entry["errors"][0]
    # AND the DataLoader worker hangs under its own rank, the tracker under nobody
    assert by_pid[104]["rank_pid"] == 102
    assert by_pid[103]["rank_pid"] is None and by_pid[103]["role"] == "child"


MP_PROCESS = REPO / "tests/fixtures/py_spy"


def _mp_process_dump(name: str) -> list:
    return json.loads((MP_PROCESS / f"local_pyspy0.4_json_locals_mp_process_{name}.json").read_text())


@pytest.mark.parametrize("start", ["spawn", "fork"])
def test_tutorial_process_ranks_become_ranks_and_their_script_an_agent(tmp_path: Path, start: str) -> None:
    # GIVEN the srun task of node 1 (SLURM_PROCID 1 of 2) waiting in Process.join, its two
    # multiprocessing.Process children in torch.distributed (real dumps: a spawned rank 0, a
    # forked rank 1, the rank an argument of the target init_process(rank, size, fn)), and its
    # resource tracker
    parent = stacks.slim_threads(_mp_process_dump("parent"))
    dumps = {201: "spawn_rank0", 202: "fork_rank1"}
    role = "dataloader_worker" if start == "spawn" else "child"  # spawn_main's argv, or a fork's
    entries = [
        _entry(200, 1, "rank", None, parent, rank=1, world_size=2),
        *(_entry(pid, 200, role, 200, stacks.slim_threads(_mp_process_dump(name)))
          for pid, name in dumps.items()),
        _entry(203, 200, "child", 200, []),  # multiprocessing's resource tracker
    ]
    by_pid = {e["pid"]: e for e in entries}
    paths = {}
    for pid, name in dumps.items():
        paths[pid] = MP_PROCESS / f"local_pyspy0.4_json_locals_mp_process_{name}.json"
    pyspy = _fake_pyspy(tmp_path, paths)
    # WHEN they are adopted
    adopted = stacks.adopt_spawned_ranks(entries, pyspy, tools.Clock(20), 2)
    # THEN the children are ranks, their ranks the target's argument, the script an agent
    assert [e["pid"] for e in adopted] == [201, 202]
    assert by_pid[200]["role"] == "agent" and by_pid[200]["rank"] is None
    assert [(by_pid[p]["role"], by_pid[p]["rank"], by_pid[p]["local_rank"]) for p in (201, 202)] \
        == [("rank", 0, 0), ("rank", 1, 1)]
    # (the target names the world "size", not a name kept for it: the task's 2 tasks x 2)
    assert by_pid[201]["world_size"] == 4 and by_pid[201]["errors"] == []
    assert by_pid[203]["role"] == "child" and by_pid[203]["rank_pid"] is None


def test_tutorial_rank_identity_comes_from_the_process_target() -> None:
    # GIVEN real py-spy --locals of the tutorial's ranks, spawned and forked
    # THEN the rank is the target's (init_process's) argument; no index, no world size named so
    assert stacks.spawn_identity(_mp_process_dump("spawn_rank0")) == {
        "local_rank": None, "rank": 0, "world_size": None}
    assert stacks.spawn_identity(_mp_process_dump("fork_rank1"))["rank"] == 1


ELASTIC = REPO / "tests/fixtures/py_spy"


def _elastic_dump(rank: int) -> list:
    return json.loads((ELASTIC / f"local_pyspy0.4_json_locals_elastic_api_rank{rank}.json").read_text())


def test_elastic_launch_rank_identity_comes_from_the_rendezvous() -> None:
    # GIVEN real py-spy --locals of ranks that torch elastic's agent started from a launch
    # script (elastic_launch, a function entrypoint): the rendezvous put ranks 0-1 on the
    # job's second node and 2-3 on its first, so node 1's process 0 is rank 0
    # THEN the rank is the worker environment elastic's _wrap keeps (env_), not the index
    assert stacks.spawn_identity(_elastic_dump(0)) == {
        "local_rank": 0, "rank": 0, "world_size": None}  # WORLD_SIZE cut from py-spy's repr
    assert stacks.spawn_identity(_elastic_dump(3))["rank"] == 3


@pytest.mark.parametrize("text, rank, world", [
    ('{"RANK": "3", "GROUP_RANK": "1", "LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "4"}', 3, 4),
    # the liars: keys that end the same are other keys
    ('{"GROUP_RANK": "1", "LOCAL_WORLD_SIZE": "2", ...}', None, None),
    ('{"ROLE_RANK": "1", "RANK": "6", "GROUP_WORLD_SIZE": "2", ...}', 6, None),
    ('{"RANK": "...", "WORLD_SIZE": "8"}', None, 8),
])
def test_elastic_worker_env_reads_only_its_own_keys(text: str, rank: int | None,
                                                    world: int | None) -> None:
    frames = [{"name": "_wrap", "filename": "/x/" + stacks.ELASTIC_WRAP_FILE,
               "locals": [{"name": "env_", "repr": text}]}]
    assert stacks.elastic_worker_env(frames) == {"rank": rank, "world_size": world}
    # AND a frame of that name elsewhere says nothing
    frames[0]["filename"] = "/x/torch/multiprocessing/spawn.py"
    assert stacks.elastic_worker_env(frames) == {"rank": None, "world_size": None}


def test_elastic_launch_ranks_become_ranks_numbered_by_the_rendezvous(tmp_path: Path) -> None:
    # GIVEN the srun task of node 2 (SLURM_PROCID 1 of 2), elastic's agent, and its two
    # spawned workers: real dumps of ranks 0 and 1 (the rendezvous put them on this node)
    zero = _elastic_dump(0)
    one = json.loads(json.dumps(zero))  # rank 1: index 1, its env_ says RANK 1
    for frame in one[0]["frames"]:
        for item in frame.get("locals") or ():
            if item["name"] in ("i", "local_rank"):
                item["repr"] = "1"
            if item["name"] == "env_":
                item["repr"] = item["repr"].replace('{"RANK": "0"', '{"RANK": "1"')
    paths = {301: tmp_path / "r0.json", 302: tmp_path / "r1.json"}
    paths[301].write_text(json.dumps(zero))
    paths[302].write_text(json.dumps(one))
    entries = [_entry(300, 1, "rank", None, [], rank=1, world_size=2),
               _entry(301, 300, "dataloader_worker", 300, stacks.slim_threads(zero)),
               _entry(302, 300, "dataloader_worker", 300, stacks.slim_threads(one))]
    by_pid = {e["pid"]: e for e in entries}
    # WHEN they are adopted
    stacks.adopt_spawned_ranks(entries, _fake_pyspy(tmp_path, paths), tools.Clock(20), 2)
    # THEN their ranks are the rendezvous' (0, 1), not SLURM_PROCID x 2 + index (2, 3), and
    # nothing is said inferred; the launching script is elastic's agent
    assert [(by_pid[p]["rank"], by_pid[p]["local_rank"], by_pid[p]["launcher"], by_pid[p]["errors"])
            for p in (301, 302)] == [(0, 0, "elastic", []), (1, 1, "elastic", [])]
    assert by_pid[301]["world_size"] == 4  # cut from the repr: the task's 2 tasks x 2
    assert by_pid[300]["role"] == "agent" and by_pid[300]["launcher"] == "elastic"


def _children_of_a_rank(parent_threads: list, child_threads: list) -> list[dict]:
    return [_entry(300, 1, "rank", None, parent_threads, rank=0, world_size=2),
            _entry(301, 300, "child", 300, child_threads)]


def test_a_ranks_helper_in_torch_distributed_stays_its_helper(tmp_path: Path) -> None:
    # GIVEN the liars: a child in torch.distributed (an asynchronous checkpoint's process
    # group) whose parent is a rank in a collective itself, or at its own work (not joining)
    child = stacks.slim_threads(_mp_process_dump("fork_rank1"))
    in_collective = stacks.slim_threads(_mp_process_dump("spawn_rank0"))
    at_work = stacks.slim_threads(json.loads(
        (REPO / "tests/fixtures/py_spy/local_pyspy0.4_json_blocked.json").read_text()))
    pyspy = _fake_pyspy(tmp_path, {})
    for parent in (in_collective, at_work):
        entries = _children_of_a_rank(parent, child)
        # THEN nothing is adopted: the rank stays the rank, its helper its child
        assert stacks.adopt_spawned_ranks(entries, pyspy, tools.Clock(20), 2) == []
        assert [e["role"] for e in entries] == ["rank", "child"]
    # AND a DataLoader worker (no torch.distributed frame) of a joining script is no rank
    joining = stacks.slim_threads(_mp_process_dump("parent"))
    entries = _children_of_a_rank(joining, at_work)
    assert stacks.adopt_spawned_ranks(entries, pyspy, tools.Clock(20), 2) == []


def test_tools_get_neither_our_source_nor_the_callers_locale(monkeypatch) -> None:
    # GIVEN the step's environment, with the collector's source in it
    import posix

    monkeypatch.setitem(posix.environ, tools.SOURCE_ENV, b"eNq...")
    monkeypatch.setattr(tools, "_ENV", {})
    monkeypatch.setattr(tools, "_ENVIRON", {})
    # THEN py-spy, strace and nvidia-smi run without it, in the C locale, marked as ours
    env = tools._child_env()
    # (the collector cannot import slurmdiag: its copy of the name must be the controller's)
    from slurmdiag.transport.collect import PAYLOAD_ENV

    assert tools.SOURCE_ENV == PAYLOAD_ENV.encode()
    assert tools.SOURCE_ENV not in env
    assert env[b"LC_ALL"] == b"C" and env[tools.MARKER_ENV.encode()] == b"1"
    assert "SLURMDIAG_COLLECTOR_SOURCE" not in tools._environ()
    assert tools._environ()["PATH"] == os.environ["PATH"]


def test_a_syscall_stop_of_our_own_strace_is_not_reported_as_stopped(monkeypatch) -> None:
    # GIVEN a rank our strace stops at two syscall boundaries in a row, then blocked in a call
    states = iter(["t", "t", "S"])
    monkeypatch.setattr(strace, "read_stat", lambda pid: {"state": next(states)})
    # WHEN its state is read while strace is attached THEN the settled state comes back
    assert strace._untraced_stat(1234)["state"] == "S"
    # AND a rank that stays in a tracing stop is reported as it is
    monkeypatch.setattr(strace, "read_stat", lambda pid: {"state": "t"})
    assert strace._untraced_stat(1234, tries=3)["state"] == "t"


def test_a_rank_read_as_its_sleep_ends_is_read_again_until_the_kernel_names_its_wait() -> None:
    # GIVEN three real processes read at the end of a look as runnable with no wait channel:
    # one asleep (read at the instant its sleep ended), one spinning that used no CPU by the
    # reading (starved), one asleep whose reading says it used a core
    from types import SimpleNamespace

    from slurmdiag.collector import main as collector

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    # (and one read asleep whose wait channel was read as it woke: "S", no wait channel; and
    # one read asleep in ptrace_stop: our strace's stop as it attached or left)
    between = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    stopped = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.5)  # the sleepers asleep, the spinner spinning
        procs = (sleeper, spinner, worker, between, stopped)
        entries = [{"pid": p.pid, "state": state, "wchan": None, "cpu_percent": cpu}
                   for p, cpu, state in zip(procs, (0.0, 0.0, 90.0, 30.0, 1.0), "RRRSS")]
        entries[4]["wchan"] = "ptrace_stop"
        starts = {p.pid: (0.0, 0, procfs.read_stat(p.pid)["starttime"]) for p in procs}
        run = SimpleNamespace(tracing=None, window_start=starts,
                              clock=tools.Clock(30.0))
        # WHEN they are read again
        began = time.monotonic()
        collector.reread_woken(run, entries)
        spent = time.monotonic() - began
        # THEN the sleeper's wait is named, the spinner stays runnable (read for no longer than
        # the re-read's bound), and the one that worked is not read again
        assert entries[0]["state"] == "S" and "sleep" in entries[0]["wchan"], entries[0]
        assert entries[1]["state"] == "R" and entries[1]["wchan"] is None, entries[1]
        assert entries[2] == {"pid": worker.pid, "state": "R", "wchan": None, "cpu_percent": 90.0}
        assert spent < collector.WOKEN_REREAD_S + 0.5, spent
        # AND the one read asleep gets its wait named, whatever its CPU
        assert entries[3]["state"] == "S" and "sleep" in entries[3]["wchan"], entries[3]
        # AND so does the one read in our strace's stop
        assert entries[4]["state"] == "S" and "sleep" in entries[4]["wchan"], entries[4]
    finally:
        for p in (sleeper, spinner, worker, between, stopped):
            p.kill()
            p.wait()


# ---------------------------------------------------------------- a sample kept, not read again


@pytest.mark.skipif(STRACE is None, reason="strace not found: the rounds suspend the ranks")
def test_a_rank_none_of_whose_threads_ran_keeps_its_sample(job: dict) -> None:
    # GIVEN the job (rank 1 blocked in one sleep, ranks 0 and 2 waking every 50 ms) read with
    # strace attached over all three samples (its attach and its detach wake every thread)
    args = {"job_id": JOB, "node": "nodeX", "samples": 3, "interval": 0.5, "strace_s": 2.0,
            "strace": [STRACE] if STRACE else [], "deadline_s": 25.0}
    doc, _, _, _ = run_collector(args)
    by_pid = {p["pid"]: p for p in doc["processes"]}
    blocked = by_pid[job["ranks"][1]]["samples"]
    # THEN the blocked rank's last sample is one read before (the first, or the second when
    # strace's attach came after the first was read), with its own time and a fresh CPU reading
    same = blocked[2].get("same_as")
    assert same in (0, 1) and "same_as" not in blocked[same], [s.get("same_as") for s in blocked]
    assert blocked[2]["threads"] == blocked[same]["threads"]
    assert blocked[2]["t"] > blocked[1]["t"] and blocked[2]["usage"]["threads"]
    assert blocked[2]["note"].startswith(f"same as sample {same + 1}: none of its threads ran")
    # AND ranks whose threads ran are read every time
    for rank in (0, 2):
        assert [s.get("same_as") for s in by_pid[job["ranks"][rank]]["samples"]] == [None] * 3


RUNNER = '''
import faulthandler, os, sys, threading, time

def started_by_a_thread():
    time.sleep(3600)

def starter(fd):
    while os.read(fd, 1) != b"x":  # "y": wake, do nothing, block again
        pass
    threading.Thread(target=started_by_a_thread, daemon=True).start()
    time.sleep(3600)

def main():
    r, w = os.pipe()
    threading.Thread(target=starter, args=(r,), daemon=True).start()
    if sys.argv[1] == "native":
        # faulthandler's watchdog is a C thread without a Python thread state: py-spy never
        # shows it, and it runs every 20 ms
        faulthandler.dump_traceback_later(0.02, repeat=True, file=open(os.devnull, "w"))
    print("ready", os.getpid(), w, flush=True)
    time.sleep(3600)

main()
'''


def _dump_threads(pid: int) -> list[dict]:
    out = subprocess.run([PYSPY, "dump", "--json", "--nonblocking", "--pid", str(pid)],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    return stacks.slim_threads(json.loads(out))


@pytest.mark.parametrize("native", [False, True])
def test_a_sample_is_kept_only_while_none_of_its_threads_ran(tmp_path: Path, native: bool) -> None:
    script = tmp_path / "runner.py"
    script.write_text(RUNNER)
    proc = subprocess.Popen([sys.executable, str(script), "native" if native else "quiet"],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        words = proc.stdout.readline().split()
        pid = int(words[1])
        # GIVEN a process whose two Python threads are blocked, read as the collector does
        time.sleep(0.3)
        before = stacks.read_schedule(pid)
        sample = {"threads": _dump_threads(pid)}
        assert len(sample["threads"]) == 2
        time.sleep(0.3)
        # WHEN nothing of it ran since (or only faulthandler's C thread, 15 times)
        now = stacks.read_schedule(pid)
        assert before is not None and now is not None
        if native:
            assert any(before[t] != now[t] for t in now), "the C thread did not run"
        # THEN the sample still holds
        assert stacks.unchanged_sample(sample, before, now)
        # WHEN one of its threads wakes (and blocks again, on the same line)
        def wake(byte: bytes) -> None:
            with open(f"/proc/{pid}/fd/{words[2]}", "wb", buffering=0) as pipe:
                pipe.write(byte)
            time.sleep(0.3)

        wake(b"y")
        # THEN it does not: its stack may have moved
        assert not stacks.unchanged_sample(sample, before, stacks.read_schedule(pid))
        # WHEN it wakes and starts a third thread THEN neither, and a new read shows the third
        before = stacks.read_schedule(pid)
        wake(b"x")
        assert not stacks.unchanged_sample(sample, before, stacks.read_schedule(pid))
        assert len(_dump_threads(pid)) == 3
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


def test_a_thread_created_or_ended_since_means_a_new_read() -> None:
    # GIVEN a sample of thread 7 and the schedules before and after: thread 7 did not run
    sample = {"threads": [{"os_thread_id": 7, "frames": []}]}
    before = {"7": ("3", "100"), "8": ("5", "900")}
    # THEN a thread not in the sample may run (a native one: no Python frames to change)
    assert stacks.unchanged_sample(sample, before, {"7": ("3", "100"), "8": ("9", "1200")})
    # BUT a thread that appeared (or ended) meanwhile may be one py-spy would show now
    assert not stacks.unchanged_sample(sample, before, {**before, "9": ("1", "10")})
    assert not stacks.unchanged_sample(sample, before, {"7": ("3", "100")})
    # AND a thread py-spy could not tie to an OS thread, or a sample without stacks, is read again
    assert not stacks.unchanged_sample({"threads": [{"os_thread_id": None}]}, before, before)
    assert not stacks.unchanged_sample({"threads": None}, before, before)
    assert not stacks.unchanged_sample(sample, None, before)


@pytest.mark.skipif(STRACE is None, reason="strace not found")
def test_the_first_round_waits_for_strace_only_where_it_attaches(tmp_path: Path) -> None:
    # GIVEN a rank blocked in a sleep and a stopped one (strace does not attach to it)
    script = tmp_path / "sleeper.py"
    script.write_text("import os, time\nprint(os.getpid(), flush=True)\ntime.sleep(3600)\n")
    procs = [subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                              start_new_session=True) for _ in range(2)]
    try:
        pids = [int(p.stdout.readline()) for p in procs if p.stdout is not None]
        os.kill(pids[1], signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while proc_state(pids[1]) != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        ranks = [{"pid": pid} for pid in pids]
        errors: list[str] = []
        traced, tasks, _ = strace.start_strace(ranks, STRACE, 1.0, tools.Clock(20.0), errors)
        assert tasks is not None and tasks[1].done  # skipped: stopped
        # WHEN the first round waits for the attach
        began = time.monotonic()
        strace.wait_attached(traced, tasks, began + 5.0)
        # THEN strace holds every thread of the running one, and the stopped one cost no wait
        assert time.monotonic() - began < 2.0
        assert strace._traced(pids[0]) and tracer_pid(pids[0]) != 0
        assert not strace._traced(pids[1])
        strace.finish_strace(traced, tasks, None)
        assert [r["strace"]["status"] for r in ranks] == ["ok", "skipped"]
    finally:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)


SPAWN_SCRIPT = '''
import os, sys, time
import torch.multiprocessing as mp


def run(i, world_size):
    rank = int(os.environ["RANK"]) * 2 + i
    print("ready", os.getpid(), rank, world_size, flush=True)
    time.sleep(3600)


if __name__ == "__main__":
    mp.spawn(run, args=(4,), nprocs=2)
'''


@pytest.mark.skipif(STRACE is None, reason="strace not found")
def test_ranks_torch_spawns_are_traced_though_strace_started_on_their_script(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    # GIVEN the srun task of node 1 (SLURM_PROCID 1) whose script spawns two ranks (real torch)
    script = tmp_path / "spawner.py"
    script.write_text(SPAWN_SCRIPT)
    job = str(_JOB_BASE + 3)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
           **rank_env(1, job=job), "WORLD_SIZE": "2"}
    proc = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        spawned = sorted(int(proc.stdout.readline().split()[1]) for _ in range(2))
        # WHEN the collector reads the node with strace from the start (the default)
        doc, _, _, _ = run_collector({"job_id": job, "node": "nodeX", "samples": 2,
                                      "interval": 0.5, "strace_s": 1.0, "deadline_s": 25.0,
                                      "strace": [STRACE]})
        ranks = {p["pid"]: p for p in doc["processes"] if p["role"] == "rank"}
        # THEN the spawned processes are the ranks, and strace traced them, not only the script
        assert sorted(ranks) == spawned, doc["processes"]
        assert sorted(p["rank"] for p in ranks.values()) == [2, 3]
        for rank in ranks.values():
            assert rank["strace"]["status"] == "ok" and rank["strace"]["window_s"] >= 0.9, rank
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


def test_joined_tracing_keeps_each_ranks_own_outcome() -> None:
    # GIVEN strace skipped on the script (deadline) but started, shortened, on the ranks it
    # spawned (found later), and on a third with the window it was asked for
    first = ([{"pid": 1}], None, "skipped: deadline too close")
    done = {"status": "ok", "message": None, "window_s": 1.0, "text": "% time"}
    then = ([{"pid": 2}], [tools.Task(strace._finished(dict(done)))], "window shortened")
    last = ([{"pid": 3}], [tools.Task(strace._finished(dict(done)))], None)
    ranks, tasks, message = strace.join_tracing(strace.join_tracing(first, then), last)
    strace.finish_strace(ranks, tasks, message)
    # THEN each keeps its own outcome and what was said of it
    assert [(r["strace"]["status"], r["strace"]["message"]) for r in ranks] == [
        ("skipped", "skipped: deadline too close"), ("ok", "window shortened"), ("ok", None)]


@pytest.mark.skipif(STRACE is None, reason="strace not found")
def test_strace_after_the_first_round_keeps_one_suspended_sample(job: dict) -> None:
    # GIVEN the collector's other choice (bench/README.md measures both): strace from the end
    # of the first round, which is read with the rank suspended
    doc, _, _, _ = run_collector({"job_id": JOB, "node": "nodeX", "samples": 3, "interval": 0.5,
                                  "strace_s": 1.0, "strace": [STRACE], "deadline_s": 25.0,
                                  "strace_overlap": "first"})
    for rank in (p for p in doc["processes"] if p["role"] == "rank"):
        samples = rank["samples"]
        # THEN the first sample was read with the suspend, the later ones without it (or kept)
        assert "note" not in samples[0] and samples[0]["threads"], samples[0]
        for sample in samples[1:]:
            assert sample["note"] == "read with --nonblocking: strace attached" or (
                sample["note"].startswith("same as sample")), sample["note"]
        # AND strace traced every rank for its whole window
        assert rank["strace"]["status"] == "ok" and rank["strace"]["window_s"] >= 0.9


# ---------------------------------------------------------------- the go (align_s)


def run_collector_with_input(args: dict[str, Any], after_hello: str) -> tuple[dict, float]:
    """Run the collector with a pipe on its stdin, as srun --input=all gives it; once it said
    hello: "go" (after 0.6 s), "close" (at once) or "silent" (keep it open, write nothing).
    Returns (document, seconds from the hello to the go or close)."""
    full = full_args(args)
    options = AttachOptions(node_python="python3", node_cache="")
    argv = node_command(args["job_id"], options, program=(collector_payload(), full))
    proc = subprocess.Popen(argv, env={"PATH": TOOL_PATH, "LANG": "C.UTF-8"},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        hello = proc.stdout.readline()
        assert hello.startswith("@SDG1-HELLO "), hello
        heard = time.monotonic()
        if after_hello == "go":
            time.sleep(0.6)
            proc.stdin.write("go\n")
            proc.stdin.flush()
        if after_hello != "silent":
            proc.stdin.close()
        signalled = time.monotonic() - heard
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "no document within 60 s"
        out = proc.stdout.read()  # to the end: the collector exits after its document
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        if not proc.stdin.closed:
            proc.stdin.close()
        proc.stdout.close()
    node = full.get("node", "nodeX")
    assert f"@SDG1-READY {node}\n" in out  # what the controller's StartGate counts
    frames = decode_frames(hello + out)
    assert frames.noise == [] and frames.damaged == {}, (frames.noise, frames.damaged)
    return frames.documents[node], signalled


def _first_samples(doc: dict) -> list[float]:
    return [p["samples"][0]["t"] for p in doc["processes"] if p["role"] == "rank"]


@pytest.mark.parametrize("after_hello", ["go", "close", "silent"])
def test_a_collector_told_to_wait_samples_after_the_go_or_its_own_limit(
    job: dict, after_hello: str
) -> None:
    # GIVEN a collector asked to wait at most 1.5 s (from its start) for the controller's go
    args = {"job_id": JOB, "node": "nodeX", "samples": 1, "strace_s": 0.0, "deadline_s": 20.0,
            "align_s": 1.5}
    # WHEN the go comes 0.6 s after its hello, or its input ends at once, or nothing comes
    doc, signalled = run_collector_with_input(args, after_hello)
    by = {"go": "go", "close": "closed", "silent": "timeout"}[after_hello]
    # THEN it says how its look began and how long it waited, and no sample came before that
    assert doc["aligned"]["by"] == by, doc["aligned"]
    waited = doc["aligned"]["waited_s"]
    assert "waiting for the other nodes" in doc["timings"]
    firsts = _first_samples(doc)
    assert len(firsts) == 3
    if by == "go":
        assert signalled >= 0.6 and 0.2 < waited < 1.5
        assert min(firsts) >= 0.6  # seconds from the collector's start, before its hello
    elif by == "closed":
        assert waited < 0.3
    else:
        assert min(firsts) >= 1.45 and waited < 1.5
    assert doc["errors"] == [] or all("scanned /proc" in e for e in doc["errors"]), doc["errors"]


# ------------------------------------------- a wait that changed after the last sample: read again

MOVES_ON = """
import os, sys, time
os.read(int(sys.argv[1]), 1)  # READ-HERE
time.sleep(60)  # SLEEP-HERE
"""


def _wchan_of(pid: int) -> str:
    return Path(f"/proc/{pid}/wchan").read_text().strip()


def _wait_for_wchan(pid: int, word: str) -> None:
    deadline = time.monotonic() + 10
    while word not in _wchan_of(pid):
        assert time.monotonic() < deadline, _wchan_of(pid)
        time.sleep(0.01)


def test_a_rank_whose_wait_changed_after_its_last_sample_is_sampled_again(tmp_path) -> None:
    # GIVEN a real process blocked in a pipe read, sampled in a round (its wait read before it)

    from slurmdiag.collector import main as collector
    from slurmdiag.collector.options import read_options

    script = tmp_path / "moves_on.py"
    script.write_text(MOVES_ON)
    lines = MOVES_ON.splitlines()
    read_line = next(i for i, line in enumerate(lines, 1) if "READ-HERE" in line)
    sleep_line = next(i for i, line in enumerate(lines, 1) if "SLEEP-HERE" in line)
    r, w = os.pipe()
    child = subprocess.Popen([sys.executable, str(script), str(r)], pass_fds=(r,))
    os.close(r)
    try:
        _wait_for_wchan(child.pid, "pipe")
        options = read_options(full_args({"job_id": JOB, "node": "nodeX", "samples": 1}))
        doc = {"tools": {"py-spy": PYSPY}, "errors": []}
        run = collector.Collection(options, tools.Clock(30.0), doc, {"timings": {}})
        entry = {"pid": child.pid, "role": "rank", "samples": [], "errors": []}
        run.ranks, run.entries = [entry], [entry]
        run.window_start = {child.pid: (0.0, 0, procfs.read_stat(child.pid)["starttime"])}
        collector.sample_round(run, first=False)
        # WHEN its state is read after the read returned and it went to sleep
        os.write(w, b"x")
        _wait_for_wchan(child.pid, "sleep")
        entry["wchan"] = collector._wchan(child.pid)
        # as read_process_state leaves it: the window's CPU, none for a process that waits (so
        # a reading caught as py-spy's detach restarts the sleep, R, is read again: a flake
        # under load before)
        entry["cpu_percent"] = 0.0
        collector.sample_again(run)
        # THEN it is sampled once more, and that sample shows where the new wait is, its state
        # read again with it
        tops = [s["threads"][0]["frames"][0]["line"] for s in entry["samples"]]
        assert tops == [read_line, sleep_line], entry["samples"]
        assert entry["samples"][1]["again"] is True and "again" not in entry["samples"][0]
        assert entry["state"] == "S" and "sleep" in entry["wchan"], entry
        # AND a rank whose wait stayed the same is not read again
        collector.sample_again(run)
        assert len(entry["samples"]) == 2
    finally:
        os.close(w)
        child.kill()
        child.wait()


def _flaky_pyspy(tmp_path: Path, failures: int, message: str) -> tuple[str, Path]:
    """A py-spy that fails ``failures`` times with ``message``, then dumps a real recording;
    its calls are counted in a file."""
    dump = REPO / "tests/fixtures/py_spy/local_pyspy0.4_json_blocked.json"
    count = tmp_path / "calls"
    tool = tmp_path / "py-spy"
    tool.write_text(
        "#!/bin/sh\n"
        f'echo x >> "{count}"\n'
        f'if [ "$(wc -l < "{count}")" -le {failures} ]; then echo "{message}" >&2; exit 1; fi\n'
        f'cat "{dump}"\n')
    tool.chmod(0o755)
    return str(tool), count


@pytest.mark.parametrize("failures, message, calls, read", [
    # py-spy 0.4 on a running rank (rank0_prepare_barrier, --samples 1: a false alarm)
    (1, "Error: Failed to copy PyCodeObject Caused by: Bad address (os error 14)", 2, True),
    (2, "Error: Failed to copy PyCodeObject Caused by: Bad address (os error 14)", 2, False),
    (1, "Error: Permission denied (os error 13)", 1, False),  # a refusal is not read again
])
def test_a_torn_pyspy_read_is_read_once_more(tmp_path: Path, failures: int, message: str,
                                             calls: int, read: bool) -> None:
    pyspy, count = _flaky_pyspy(tmp_path, failures, message)
    sample = tools.run_tasks([stacks.dump_stack(pyspy, os.getpid(), False, tools.Clock(20))], 1)[0]
    assert len(count.read_text().splitlines()) == calls
    if read:
        assert sample["threads"] and sample["error"] is None
        assert sample["note"].startswith("read twice: the first read was torn (Error: Failed")
    else:
        assert sample["threads"] is None and message.split(" Caused")[0] in sample["error"]


def _suspend_hangs_pyspy(tmp_path: Path) -> tuple[str, Path]:
    """A py-spy whose blocking dump never returns (a thread its suspend waits for for ever)
    and whose --nonblocking dump is a real recording; its argument lists kept, one a line."""
    dump = REPO / "tests/fixtures/py_spy/local_pyspy0.4_json_blocked.json"
    calls = tmp_path / "calls"
    tool = tmp_path / "py-spy"
    tool.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{calls}"\n'
        'case "$*" in *--nonblocking*) ;; *) exec sleep 60;; esac\n'
        f'cat "{dump}"\n')
    tool.chmod(0o755)
    return str(tool), calls


def test_a_suspend_that_never_completes_is_read_without_it_then_and_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a rank one of whose threads waits where no stop reaches it (another thread's read
    # on a FUSE mount whose server does not answer: stalled_mount_read), so a blocking dump's
    # suspend never completes
    pyspy, calls = _suspend_hangs_pyspy(tmp_path)
    monkeypatch.setattr(stacks, "SUSPEND_WAIT_S", 0.5)
    monkeypatch.setattr(stacks, "_NOT_SUSPENDED", {})
    dump = lambda: tools.run_tasks(
        [stacks.dump_stack(pyspy, os.getpid(), False, tools.Clock(20))], 1)[0]
    started = time.monotonic()
    sample = dump()
    # THEN after the suspend's wait it is read as it is, and said so
    assert sample["threads"] and sample["error"] is None
    assert sample["note"] == "read with --nonblocking: its suspend did not complete in 0.5 s"
    assert time.monotonic() - started < 5
    assert ["--nonblocking" in c for c in calls.read_text().splitlines()] == [False, True]
    # AND the next round reads it so at once, without waiting for a suspend again
    calls.unlink()
    assert dump()["threads"] and "--nonblocking" in calls.read_text()
    assert len(calls.read_text().splitlines()) == 1


def test_a_native_dump_keeps_its_whole_timeout(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a --native dump that takes longer than the suspend's wait (py-spy reading libtorch's
    # symbols: seconds on a loaded node; the suite's --native attach lost every native frame)
    dump = REPO / "tests/fixtures/py_spy/local_pyspy0.4_json_blocked.json"
    calls = tmp_path / "calls"
    tool = tmp_path / "py-spy"
    tool.write_text(f'#!/bin/sh\necho "$*" >> "{calls}"\nsleep 1.2\ncat "{dump}"\n')
    tool.chmod(0o755)
    monkeypatch.setattr(stacks, "SUSPEND_WAIT_S", 0.3)
    monkeypatch.setattr(stacks, "_NOT_SUSPENDED", {})
    sample = tools.run_tasks(
        [stacks.dump_stack(str(tool), os.getpid(), True, tools.Clock(20))], 1)[0]
    # THEN it is not cut at the suspend's wait: one dump, with --native, read whole
    assert sample["threads"] and "note" not in sample
    assert [("--native" in c, "--nonblocking" in c) for c in calls.read_text().splitlines()] == [
        (True, False)]


def test_a_main_thread_waiting_on_a_fuse_server_is_read_without_a_suspend(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a rank whose main thread waits for a FUSE server's answer (state S, wchan
    # request_wait_answer: py-spy's interrupt would make the wait uninterruptible for ever)
    pyspy, calls = _suspend_hangs_pyspy(tmp_path)
    monkeypatch.setattr(stacks, "_NOT_SUSPENDED", {})
    real_read = stacks._read
    monkeypatch.setattr(stacks, "_read", lambda path, *a, **k: "request_wait_answer\n"
                        if path.endswith("/wchan") else real_read(path, *a, **k))
    sample = tools.run_tasks([stacks.dump_stack(pyspy, os.getpid(), False, tools.Clock(20))], 1)[0]
    # THEN it is read with --nonblocking from the first try, and said why
    assert sample["threads"] and calls.read_text().count("\n") == 1
    assert sample["note"] == ("read with --nonblocking: its main thread waits for a FUSE file "
                              "system's answer (request_wait_answer)")
    # AND any other wait is read with the suspend, as before (the liar: a rank in a futex)
    monkeypatch.setattr(stacks, "_read", lambda path, *a, **k: "futex_do_wait\n"
                        if path.endswith("/wchan") else real_read(path, *a, **k))
    assert stacks._unsuspendable(os.getpid(), "S", False) is None


def _launched(threads: int, children: list[dict[str, str]], same_cmdline: bool = True) -> dict:
    """A node's srun task (SLURM_PROCID 1 of 2) with ``threads`` threads, and its Python
    children, each with the task's environment plus its own extra variables."""
    task_env = {"SLURM_JOB_ID": "7", "SLURM_PROCID": "1", "SLURM_NTASKS": "2",
                "SLURM_LOCALID": "0"}
    script = ["/usr/bin/python3", "-u", "/job/train.py"]
    procs = {100: _info(100, 1, script, task_env)}
    procs[100]["stat"]["num_threads"] = threads
    for index, extra in enumerate(children):
        cmd = script if same_cmdline else [*script[:2], "/job/worker.py"]
        procs[101 + index] = _info(101 + index, 100, cmd, {**task_env, **extra})
        procs[101 + index]["stat"]["num_threads"] = 9
    return procs


def test_a_launchers_children_told_apart_by_local_rank_alone_are_ranks() -> None:
    # GIVEN a one-thread launcher that started the same script twice with LOCAL_RANK 0 and 1
    # in the environment (no RANK: each computes its rank), as Popen(..., env=...) does
    procs = _launched(1, [{"LOCAL_RANK": "0"}, {"LOCAL_RANK": "1"}])
    discovery.classify(procs)
    # THEN the children are ranks 2 and 3 (task 1 x 2 + LOCAL_RANK, said inferred), the
    # launcher their agent
    assert procs[100]["role"] == "agent"
    assert [(procs[p]["role"], discovery.identity(procs[p])) for p in (101, 102)] == [
        ("rank", ("2", "0", "4")), ("rank", ("3", "1", "4"))]
    assert "inferred" in procs[101]["inferred"] and "LOCAL_RANK (0)" in procs[101]["inferred"]


@pytest.mark.parametrize("case", ["torch rank parent", "forked workers", "rank given", "one child"])
def test_children_with_a_local_rank_of_their_own_that_are_not_a_launchers_ranks(case: str) -> None:
    # GIVEN the liars: a rank (many threads) running two helpers with LOCAL_RANK given; forks
    # that inherit the task's LOCAL_RANK; children given RANK too (read from it as before);
    # a single child
    procs = {
        "torch rank parent": lambda: _launched(12, [{"LOCAL_RANK": "0"}, {"LOCAL_RANK": "1"}],
                                               same_cmdline=False),
        "forked workers": lambda: _launched(1, [{}, {}]),
        "rank given": lambda: _launched(1, [{"LOCAL_RANK": "0", "RANK": "6"},
                                            {"LOCAL_RANK": "1", "RANK": "7"}]),
        "one child": lambda: _launched(1, [{"LOCAL_RANK": "1"}]),
    }[case]()
    discovery.classify(procs)
    # THEN no identity is inferred from LOCAL_RANK
    assert not any(p.get("inferred") for p in procs.values())
