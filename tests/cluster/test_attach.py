"""attach against the real local Slurm cluster and real hung torch.distributed jobs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scenarios.launch import load_truth, suite_scenarios

from slurmdiag.api import attach_job, collect_snapshot
from slurmdiag.config import output_silence
from slurmdiag.hostlist import compress_hostlist
from slurmdiag.options import AttachOptions

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
SLURMDIAG = [sys.executable, "-m", "slurmdiag.cli"]
CLUSTER_DIR = Path(os.environ.get("SLURMDIAG_CLUSTER_DIR", "/tmp/slurmdiag-cluster"))
ALLOWED_EXACT = {
    "CUDA_VISIBLE_DEVICES", "MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE",
    "LOCAL_WORLD_SIZE", "GROUP_RANK", "TORCHELASTIC_RUN_ID", "OMP_NUM_THREADS", "SLURM_JOB_ID",
    "SLURM_STEP_ID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_NODEID",
    "SLURMD_NODENAME", "SLURM_JOB_NODELIST", "SLURM_CPUS_ON_NODE",
}


def env_is_allowlisted(name: str) -> bool:
    if name in ALLOWED_EXACT:
        return True
    return name.startswith(("NCCL_", "GLOO_", "TORCH_")) and not any(
        word in name for word in ("TOKEN", "KEY", "SECRET", "PASS", "CRED", "AUTH")
    )


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 90):
    return subprocess.run([*SLURMDIAG, *args], capture_output=True, text=True, timeout=timeout,
                          check=False,
                          env=env, cwd=REPO)


def job_descendants(pids: set[int]) -> set[int]:
    """The given pids and every process below them, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    seen, stack = set(), list(pids)
    while stack:
        pid = stack.pop()
        if pid not in seen:
            seen.add(pid)
            stack.extend(children.get(pid, ()))
    return seen


@pytest.fixture(scope="module", autouse=True)
def start_every_scenario(scenario_run):
    # Submit them all at once: each needs 10-20 s to import torch and reach its hang.
    scenario_run.start(*suite_scenarios())


@pytest.mark.parametrize("scenario", suite_scenarios())
def test_every_rank_is_found_with_its_global_rank_and_stacks(scenario_run, scenario):
    # GIVEN a real hung job (srun, torchrun under srun, or submitit)
    run = scenario_run(scenario)
    truth = run.truth
    records = run.rank_records()
    # WHEN slurmdiag attaches (1 sample is enough to identify ranks)
    snapshot, _ = collect_snapshot(run.job_id, AttachOptions(samples=2, interval_s=0.5, strace_s=0))
    # THEN every node answered and every live rank is there once, with the right global rank
    assert [n.status for n in snapshot.nodes] == ["ok"] * len(snapshot.nodes), [
        (n.name, n.message) for n in snapshot.nodes
    ]
    # (found below the job's own slurmstepd processes, without asking slurmd)
    assert {n.discovery for n in snapshot.nodes} == {"stepd"}
    # AND every node's first sample waited for the go srun passed to all once all had started
    assert {n.aligned for n in snapshot.nodes} == {"go"}, [(n.name, n.aligned) for n in snapshot.nodes]
    found = {r.rank: r for _, r in snapshot.all_ranks()}
    expected = {r for r in range(truth["world_size"]) if records[r].get("role") != "dead"}
    assert set(found) == expected, {r: (found[r].pid, found[r].cmdline, found[r].state) for r in found}
    assert len(snapshot.all_ranks()) == len(expected), [  # agents and workers are not ranks
        (n.name, r.rank, r.pid, r.step_id, r.cmdline, r.state) for n, r in snapshot.all_ranks()]
    for rank, record in records.items():
        if rank in found:
            assert found[rank].pid == int(record["pid"]), f"rank {rank} has the wrong pid"
    for rank in found.values():
        assert rank.launcher == truth["launcher"]
        assert rank.world_size == truth["world_size"]
        assert rank.samples and all(s.threads for s in rank.samples), rank.samples
    workers = truth.get("dataloader_workers_per_rank", 0)
    for rank in found.values():
        # DataLoader workers hang under their rank (they carry its RANK), never as ranks
        loaders = [w for w in rank.workers if w.role == "dataloader_worker"]
        assert len(loaders) == workers, (rank.rank, rank.workers)
    if truth["launcher"] == "torchrun":
        agents = [p for n in snapshot.nodes for p in n.other_processes if p.role == "agent"]
        assert len(agents) == truth["nodes"], "one torchrun agent per node, reported apart"


def test_only_the_jobs_own_processes_are_inspected(scenario_run):
    # GIVEN several scenario jobs share the same nodes (oversubscribed)
    run = scenario_run("rank_gated_collective")
    scenario_run("healthy_slow")
    own = job_descendants({int(r["pid"]) for r in run.rank_records().values()})
    # WHEN attaching to one of them
    snapshot, _ = collect_snapshot(run.job_id, AttachOptions(samples=1, strace_s=0))
    # THEN every inspected pid belongs to that job
    inspected = {r.pid for _, r in snapshot.all_ranks()}
    inspected |= {w.pid for _, r in snapshot.all_ranks() for w in r.workers}
    assert inspected and inspected <= own
    # AND only allowlisted environment variables left the nodes
    names = {k for _, r in snapshot.all_ranks() for k in r.env}
    assert "RANK" in names or "SLURM_PROCID" in names
    assert all(env_is_allowlisted(k) for k in names), sorted(names)
    assert "PATH" not in names and "SLURM_CONF" not in names


def test_no_rank_left_stopped_and_no_step_left_behind(scenario_run):
    # GIVEN a hung job
    run = scenario_run("blocked_outside_collective")
    pids = [int(r["pid"]) for r in run.rank_records().values()]
    # WHEN attached to with samples and strace (both ptrace the ranks)
    snapshot, _ = collect_snapshot(run.job_id, AttachOptions(samples=2, interval_s=0.5, strace_s=1))
    assert all(r.strace is not None for _, r in snapshot.all_ranks())
    # THEN no rank is left in state T and no collector step remains in Slurm
    for pid in pids:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        assert state not in ("T", "t"), f"pid {pid} left in state {state}"
    steps = subprocess.run(["squeue", "-h", "-s", "-j", run.job_id, "-o", "%i %j"],
                           capture_output=True, text=True, check=True).stdout
    assert "slurmdiag-collect" not in steps


def slurmd_pid(node: str) -> int:
    return int((CLUSTER_DIR / "run" / f"slurmd-{node}.pid").read_text().strip())


def test_stopped_slurmd_marks_its_node_and_keeps_the_others(scenario_run):
    # GIVEN a hung job, and the slurmd of its last node stopped (SIGSTOP: alive, not answering)
    # as attach begins, so that the step cannot start there
    run = scenario_run("rank_gated_collective")
    nodes = run_nodes(run.job_id)
    victim = nodes[-1]
    pid = slurmd_pid(victim)
    os.kill(pid, signal.SIGSTOP)
    try:
        start = time.monotonic()
        snapshot, _ = collect_snapshot(
            run.job_id, AttachOptions(samples=1, strace_s=0, timeout_s=8))
        elapsed = time.monotonic() - start
    finally:
        os.kill(pid, signal.SIGCONT)
    # THEN attach returned within its deadline (plus clean-up), the victim is marked with a reason,
    # and the other node is complete
    assert elapsed < 8 + 6
    by_name = {n.name: n for n in snapshot.nodes}
    assert by_name[victim].status in ("timeout", "unreachable", "error")
    assert by_name[victim].message
    for name in nodes[:-1]:
        assert by_name[name].status == "ok" and by_name[name].ranks
        # AND each began its look at its own limit, align_s: srun reads its stdin only once
        # every node's step has connected its I/O (src/api/step_io.c, _file_readable), so the
        # go never reaches anyone while the victim's step cannot start
        assert by_name[name].aligned == "timeout"
        # (its first dump's moment, counted from the collector's start: the wait ends at align_s
        # of that start; the tool loop wakes a little later on a loaded host, so the bound above
        # is loose, and the wait is not measured alone: it starts after discovery)
        align_s = AttachOptions().align_s
        first = min(r.samples[0].t for r in by_name[name].ranks)
        assert align_s - 0.01 <= first < align_s + 1.0
    # AND no collector step of ours is left in the job once slurmd is back
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        steps = subprocess.run(["squeue", "-h", "-s", "-j", run.job_id, "-o", "%i %j"],
                               capture_output=True, text=True, check=False).stdout
        if "slurmdiag-collect" not in steps:
            break
        time.sleep(0.5)
    assert "slurmdiag-collect" not in steps


def run_nodes(job_id: str) -> list[str]:
    out = subprocess.run(["scontrol", "show", "hostnames",
                          subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%N"],
                                         capture_output=True, text=True,
                                         check=True).stdout.strip()],
                         capture_output=True, text=True, check=True).stdout
    return out.split()


def test_missing_py_spy_is_a_message_per_node(scenario_run, tmp_path):
    # GIVEN nodes whose PATH has no py-spy, and a wrong --py-spy path
    run = scenario_run("healthy_slow")
    env = dict(os.environ, PATH="/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin")
    # WHEN attaching through the CLI
    result = run_cli("attach", run.job_id, "--py-spy", "/nonexistent/py-spy", "--samples", "1",
                     "--strace", "0", "--json", "--no-report", "--out", str(tmp_path), env=env)
    # THEN attach succeeds and each node says py-spy is missing
    assert result.returncode == 0, result.stderr
    snapshot = json.loads(result.stdout)
    for node in snapshot["nodes"]:
        assert any("py-spy not found" in e for e in node["errors"]), node["errors"]


def test_nodes_keep_the_compiled_collector_in_the_cache_directory_given(scenario_run, tmp_path):
    # GIVEN a job, and a cache root of our own
    run = scenario_run("healthy_slow")
    cache = tmp_path / "cache"
    cache.mkdir()
    # WHEN attaching twice through the CLI
    for _ in range(2):
        result = run_cli("attach", run.job_id, "--node-cache", str(cache), "--samples", "1",
                         "--strace", "0", "--json", "--no-report", "--out", str(tmp_path))
        assert result.returncode == 0, result.stderr
        snapshot = json.loads(result.stdout)
        assert {n["status"] for n in snapshot["nodes"]} == {"ok"}
    # THEN the nodes (one host here) keep one private compiled collector for their interpreter
    (private,) = cache.iterdir()
    assert private.name == f"slurmdiag-{os.getuid()}" and private.stat().st_mode & 0o777 == 0o700
    versions = {n["python"] for n in snapshot["nodes"]}
    assert len(list(private.iterdir())) == len(versions) == 1
    # AND '' turns the cache off
    result = run_cli("attach", run.job_id, "--node-cache", "", "--samples", "1", "--strace", "0",
                     "--json", "--no-report", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert {n["status"] for n in json.loads(result.stdout)["nodes"]} == {"ok"}


def test_unknown_job_exits_3_with_one_line_error():
    result = run_cli("attach", "987654")
    assert result.returncode == 3
    assert result.stderr.startswith("error: job 987654 is not known to Slurm")
    assert "hint:" in result.stderr and "Traceback" not in result.stderr


def test_pending_job_exits_4_naming_its_state(local_cluster):
    # GIVEN a job that cannot start for an hour
    job = subprocess.run(["sbatch", "--parsable", "--begin=now+3600", "--wrap", "true"],
                         capture_output=True, text=True, check=True).stdout.strip()
    try:
        result = run_cli("attach", job)
        assert result.returncode == 4
        assert "PENDING" in result.stderr and "hint:" in result.stderr
    finally:
        subprocess.run(["scancel", job], check=False)


def test_ranks_the_batch_script_starts_itself_are_found_with_launcher_batch(local_cluster, tmp_path):
    # GIVEN a job whose batch script starts two ranks from a shell loop (no srun, no launcher
    # agent) and waits; each rank blocks in a read, as a hung collective does
    ready = tmp_path / "ready"
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/sh\n"
        "export WORLD_SIZE=2\n"
        "for r in 0 1; do\n"
        f"  RANK=$r {sys.executable} -I -S -c "
        f"\"import os; open('{ready}' + os.environ['RANK'], 'w').close(); os.read(os.pipe()[0], 1)\" &\n"
        "done\n"
        "wait\n"
    )
    job = subprocess.run(["sbatch", "--parsable", "-N1", "-o", str(tmp_path / "out"), str(script)],
                         capture_output=True, text=True, check=True).stdout.strip()
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"ready{r}").exists() for r in (0, 1)):
            assert time.monotonic() < deadline, (tmp_path / "out").read_text() if (tmp_path / "out").exists() else ""
            time.sleep(0.2)
        # WHEN slurmdiag attaches
        snapshot, _ = collect_snapshot(job, AttachOptions(samples=1, strace_s=0))
        # THEN both are ranks of the batch step, with their RANK, launched by the batch script
        # (not srun: the job's one task is not their world size); the shell is not a rank
        ranks = {r.rank: r for _, r in snapshot.all_ranks()}
        assert sorted(ranks) == [0, 1], [(r.rank, r.pid, r.cmdline) for _, r in snapshot.all_ranks()]
        assert {(r.launcher, r.step_id, r.world_size) for r in ranks.values()} == {("batch", "batch", 2)}
        assert all(r.samples and r.samples[0].threads for r in ranks.values())
    finally:
        subprocess.run(["scancel", job], check=False)


def test_bad_job_id_is_a_usage_error():
    result = run_cli("attach", "12.batch")
    assert result.returncode == 2
    assert "is step batch of job 12" in result.stderr and "Traceback" not in result.stderr


def test_gpus_from_the_replayed_nvidia_smi(scenario_run):
    # GIVEN nvidia-smi on the nodes is the stand-in replaying a real A100 (MIG) XML report
    run = scenario_run("uneven_inputs")
    os.environ["SLURMDIAG_FAKE_NVSMI_DIR"] = str(REPO / "tests/fixtures/nvsmi_replay/xml_a100_mig")
    try:
        snapshot, _ = collect_snapshot(
            run.job_id, AttachOptions(samples=1, strace_s=0,
                                      nvidia_smi_paths=(str(REPO / "tests/tools/nvidia-smi"),)))
    finally:
        del os.environ["SLURMDIAG_FAKE_NVSMI_DIR"]
    # THEN every node reports that GPU, read through the collector and the parsers
    for node in snapshot.nodes:
        assert node.gpus.status == "ok", node.gpus.message
        assert node.gpus.gpus[0].name == "NVIDIA A100-SXM4-80GB"


def test_gpu_finding_from_a_replayed_unknown_error(scenario_run):
    # GIVEN nodes whose nvidia-smi (the stand-in) replays a real A100 CSV where one GPU reports
    # "[Unknown Error]" for its power limit
    run = scenario_run("rank_gated_collective")
    os.environ["SLURMDIAG_FAKE_NVSMI_DIR"] = str(
        REPO / "tests/fixtures/nvsmi_replay/csv_a100_unknown_error")
    try:
        result = attach_job(
            run.job_id, AttachOptions(samples=2, interval_s=0.5, strace_s=0,
                                      nvidia_smi_paths=(str(REPO / "tests/tools/nvidia-smi"),)),
            write=False)
    finally:
        del os.environ["SLURMDIAG_FAKE_NVSMI_DIR"]
    # THEN the bracketed value is kept verbatim and the analysis flags that GPU
    gpus = [g for n in result.snapshot.nodes for g in n.gpus.gpus]
    assert any("[Unknown Error]" in g.raw.values() for g in gpus)
    kinds = {v.kind for v in result.snapshot.verdicts}
    assert "gpu_unknown_error" in kinds, kinds
    # AND the hang verdict (critical with 2 samples) still comes first
    assert result.snapshot.verdicts[0].kind == "mismatched_collective"


def test_truth_files_cover_every_launcher():
    launchers = {load_truth(name)["launcher"] for name in suite_scenarios()}
    assert launchers == {"srun", "torchrun", "submitit", "mp.spawn"}


def test_nodes_without_the_system_python_are_collected_with_another(scenario_run, monkeypatch):
    # GIVEN a hung job on nodes that lack the system Python the controller has
    from slurmdiag.transport import collect

    run = scenario_run("rank_gated_collective")
    monkeypatch.setattr(collect, "SYSTEM_PYTHON", "/nonexistent/bin/python3")
    monkeypatch.setattr(collect, "controller_has_system_python", lambda: True)
    # WHEN slurmdiag attaches
    snapshot, _ = collect_snapshot(run.job_id, AttachOptions(samples=1, strace_s=0))
    # THEN every node answered, from the controller's interpreter, in the second step
    assert [n.status for n in snapshot.nodes] == ["ok"] * len(snapshot.nodes), [
        (n.name, n.message) for n in snapshot.nodes]
    assert {n.python for n in snapshot.nodes} == {"{}.{}.{}".format(*sys.version_info[:3])}
    assert {r.rank for _, r in snapshot.all_ranks()} == set(run.rank_records())


@pytest.mark.parametrize(("how", "method"), [("auto", "stepd"), ("walk", "stepd"),
                                             ("listpids", "listpids")])
def test_every_way_of_finding_processes_finds_the_same_ones(scenario_run, how, method):
    # GIVEN a hung job, and the collector told how to find the job's processes: from our
    # stepd's siblings (the default), by a walk of all /proc, or by `scontrol listpids`
    from slurmdiag.transport.collect import collector_args, node_environment
    from slurmdiag.transport.framing import decode_frames
    from slurmdiag.transport.srun import srun_argv

    run = scenario_run("rank_gated_collective")
    nodes = run_nodes(run.job_id)
    # (no node cache: the collector's source comes from the step's environment)
    options = AttachOptions(samples=1, strace_s=0, node_cache="")
    argv = srun_argv(run.job_id, nodes, options)
    argv[-1] = json.dumps({**collector_args(run.job_id, options), "discovery": how})
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False,
                          env=node_environment(os.environ))
    documents = decode_frames(done.stdout).documents
    # THEN every node used that way and found exactly the ranks' pids
    assert set(documents) == set(nodes), done.stderr[-500:]
    assert {d["discovery"] for d in documents.values()} == {method}, done.stderr[-500:]
    pids = {p["pid"] for d in documents.values() for p in d["processes"] if p["role"] == "rank"}
    assert pids == {int(r["pid"]) for r in run.rank_records().values()}


def test_no_node_answering_exits_6_and_still_writes_the_report(scenario_run, tmp_path):
    # GIVEN a hung job and an ssh transport nobody answers (port 1 on loopback)
    run = scenario_run("rank_gated_collective")
    out = tmp_path / "out"
    result = run_cli("attach", run.job_id, "--transport", "ssh", "--ssh-port", "1",
                     "--samples", "1", "--strace", "0", "--timeout", "10", "--out", str(out))
    # THEN the exit code says no node answered, in one line with a hint
    assert result.returncode == 6, result.stderr
    assert "error: no node answered" in result.stderr and "hint:" in result.stderr
    assert "Traceback" not in result.stderr
    # AND the snapshot and report were written all the same, each node with its reason
    snapshot = json.loads((out / "snapshot.json").read_text())
    assert {n["status"] for n in snapshot["nodes"]} == {"unreachable"}
    assert all(n["message"] for n in snapshot["nodes"])
    assert snapshot["nodes"][0]["name"] in (out / "report.html").read_text()


def test_progress_is_shown_on_a_terminal_only(scenario_run, tmp_path):
    # GIVEN stderr is a terminal (a pty), stdout is not
    import pty

    run = scenario_run("rank_gated_collective")
    leader, follower = pty.openpty()
    try:
        done = subprocess.run([*SLURMDIAG, "attach", run.job_id, "--samples", "1", "--strace", "0",
                               "--no-report", "--out", str(tmp_path)], stdout=subprocess.PIPE,
                              stderr=follower, timeout=90, cwd=REPO, check=False)
        os.close(follower)
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(leader)
    # THEN the terminal saw the node count progress, and stdout (data) did not
    assert done.returncode == 0
    nodes = len(run_nodes(run.job_id))
    assert f"nodes answered {nodes}/{nodes}".encode() in seen
    assert b"nodes answered" not in done.stdout



def test_an_hour_of_silent_output_is_said_in_the_first_verdict(scenario_run, tmp_path):
    # GIVEN a hung job whose output file was last written an hour ago (its mtime set back)
    run = scenario_run("rank_gated_collective")
    files = run.output_files()
    assert files, run.output_tail()
    kept = {f: f.stat() for f in files}
    for f, st in kept.items():
        os.utime(f, (st.st_atime, st.st_mtime - 3600))
    try:
        result = run_cli("attach", run.job_id, "--samples", "1", "--strace", "0",
                         "--no-report", "--out", str(tmp_path))
    finally:
        for f, st in kept.items():
            os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert result.returncode == 0, result.stderr
    # THEN the snapshot holds the silence, read from the job's own file
    snapshot = json.loads((tmp_path / "snapshot.json").read_text())
    quiet = snapshot["job"]["output_quiet_s"]
    assert 3600 <= quiet < 3600 + 900, quiet
    # AND the first verdict (rank 0 gated into its barrier) says it as the file's fact, and
    # the terminal's header says it too
    first = snapshot["verdicts"][0]
    assert first["culprit_ranks"] == [0], first
    said = [e for e in first["evidence"] if "no line from any rank since" in e]
    assert len(said) == 1, first["evidence"]
    assert f"was last written {output_silence(quiet)} before" in said[0], said
    header = result.stdout.splitlines()[0]
    assert f" · output quiet {output_silence(quiet)} · " in header, header


HET_SCRIPT = """#!/bin/bash
#SBATCH --time=10
#SBATCH -N1 --ntasks-per-node=1
#SBATCH hetjob
#SBATCH -N1 --ntasks-per-node=1
srun --het-group=0,1 {python} -c 'import time
def wait_for_peer():
    time.sleep(3600)
wait_for_peer()'
"""


def test_each_component_of_a_heterogeneous_job(local_cluster, tmp_path):
    from slurmdiag.errors import JobNotRunning

    # GIVEN a heterogeneous job: one step across both components (ranks 0 and 1)
    script = tmp_path / "het.sh"
    script.write_text(HET_SCRIPT.format(python=sys.executable))
    leader = subprocess.run(["sbatch", "--parsable", f"--output={tmp_path}/out", str(script)],
                            capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    leader = leader.split("+")[0].split(";")[0]
    try:
        found = {}
        deadline = time.monotonic() + 150  # het jobs wait for a backfill pass to start
        while len(found) < 2:
            for offset in (0, 1):
                try:
                    snapshot, _ = collect_snapshot(
                        f"{leader}+{offset}", AttachOptions(samples=1, strace_s=0))
                except JobNotRunning:  # still pending
                    continue
                ranks = [r for _, r in snapshot.all_ranks() if r.samples and r.samples[0].threads]
                if ranks:
                    found[offset] = (snapshot, ranks)
            assert time.monotonic() < deadline, found
            time.sleep(2)
        # WHEN attaching to one component, then to the whole job by its plain id
        result = attach_job(
            f"{leader}+1", AttachOptions(samples=2, interval_s=0.3, strace_s=0), write=False)
        whole = attach_job(leader, AttachOptions(samples=1, strace_s=0), write=False)
        # (and doctor, by the plain id, checks every component's nodes: a step a component)
        doctored = subprocess.run([sys.executable, "-m", "slurmdiag", "doctor", leader, "--json"],
                                  capture_output=True, text=True, timeout=180, check=False)
        # (and probe: the whole job's nodes, each component's step fed one peer map; and one
        # component alone, through the leader's id)
        probed = {ref: subprocess.run(
            [sys.executable, "-m", "slurmdiag", "probe", ref, "--no-collective", "--timeout", "30",
             "--json", "--no-report", "--out", str(tmp_path / ref)],
            capture_output=True, text=True, timeout=120, check=False)
            for ref in (leader, f"{leader}+1")}
    finally:
        subprocess.run(["scancel", leader], capture_output=True, timeout=30, check=False)
    # THEN each component's step ran (srun needs the leader's id and --het-group), its own
    # rank is found, and the other component's rank is unknown, not dead
    assert [r.rank for r in found[0][1]] == [0] and [r.rank for r in found[1][1]] == [1]
    assert found[1][0].job.het_job_offset == "1"
    assert result.analysis.missing_ranks == () and result.analysis.unknown_ranks == (0,)
    assert "missing_rank" not in {v.kind for v in result.snapshot.verdicts}
    # AND the whole job is looked at in one go: a step a component, both ranks in one snapshot
    nodes = [n.name for n in found[0][0].nodes] + [n.name for n in found[1][0].nodes]
    assert [n.name for n in whole.snapshot.nodes] == nodes
    assert sorted(r.rank for _, r in whole.snapshot.all_ranks() if r.samples) == [0, 1]
    assert (whole.snapshot.job.het_job_id, whole.snapshot.job.het_job_offset) == (leader, None)
    assert whole.analysis.missing_ranks == () and whole.analysis.unknown_ranks == ()
    srun_lines = [c for c in json.loads(doctored.stdout)["checks"] if c["name"] == "srun"]
    assert [(c["status"], c["where"]) for c in srun_lines] == [
        ("ok", compress_hostlist(nodes))], doctored.stdout + doctored.stderr
    assert srun_lines[0]["detail"].endswith("ran on 2/2 node(s)")
    both = json.loads(probed[leader].stdout)["probe"]
    assert [n["name"] for n in both["nodes"]] == nodes, probed[leader].stderr
    assert {n["status"] for n in both["nodes"]} == {"ok"}, both["nodes"]
    assert sorted((link["source"], link["target"], link["connect"]) for link in both["links"]) == sorted(
        [(nodes[0], nodes[1], True), (nodes[1], nodes[0], True)])
    alone = json.loads(probed[f"{leader}+1"].stdout)["probe"]
    assert [(n["name"], n["status"]) for n in alone["nodes"]] == [
        (nodes[1], "ok")], probed[f"{leader}+1"].stderr

