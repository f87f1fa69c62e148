"""Submit a scenario job to Slurm and wait until every rank has reached its hang.

    run = submit("rank_gated_collective", state_dir)   # sbatch (or submitit), returns at once
    ranks = run.wait_ready(timeout=60)                  # {rank: {"pid": ..., "role": ...}}
    ...
    run.cancel()

From a shell (the local cluster's SLURM_CONF exported):

    python tests/scenarios/launch.py rank_gated_collective /tmp/state   # prints the job id

The ground truth of each scenario is tests/scenarios/<name>.json; its "launcher" decides
how the ranks start: `srun python` (rank = SLURM_PROCID), `torchrun` under srun (one agent
per node, workers carry RANK), `torchrun-batch` (torchrun itself in the batch script, one
node, no srun), `background` (the batch script starts each rank with `&`), or submitit (which writes its own sbatch script and srun
line). Stdlib only, except that the submitit launcher imports submitit.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCENARIO_DIR = Path(__file__).resolve().parent
REPO_ROOT = SCENARIO_DIR.parents[1]
#: sbatch --time: the safety net that ends every scenario job, hung or not.
TIME_LIMIT_MINUTES = 30
#: Ranks run at a lower priority so a spinning rank does not starve the test itself.
NICENESS = 5
LAUNCHERS = ("srun", "torchrun", "submitit", "mp.spawn", "torchrun-batch", "background",
             "torchrun-standalone", "mpirun", "srun-multi-prog", "srun-het", "salloc")
#: Variables of the submitting shell that would confuse the ranks or sbatch itself.
_INHERITED_VARS_TO_DROP = re.compile(
    r"^(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|GROUP_RANK|MASTER_ADDR|MASTER_PORT"
    r"|TORCHELASTIC_.*|SUBMITIT_.*|SLURM_(?!CONF$).*)$"
)
_ALIVE_JOB_STATES = {"PENDING", "CONFIGURING", "RUNNING", "REQUEUED", "RESIZING"}
#: A rank writes its file a moment before it blocks; give the last one time to get there.
_READY_GRACE_SECONDS = 0.3


class ScenarioError(RuntimeError):
    """A scenario job could not be submitted or did not reach its hang."""


def scenario_names() -> list[str]:
    """Every scenario with a ground truth file, sorted."""
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.json"))


def suite_scenarios() -> list[str]:
    """The scenarios the pytest cluster tests run: all but those whose truth says
    `"suite": false` (each job costs ~0.8 GB and a share of 2 cores; `make accuracy` runs
    every scenario). SLURMDIAG_ALL_SCENARIOS=1 gives every scenario, to check a new truth."""
    if os.environ.get("SLURMDIAG_ALL_SCENARIOS") == "1":
        return scenario_names()
    return [n for n in scenario_names() if load_truth(n).get("suite", True)]


def load_truth(name: str) -> dict[str, Any]:
    path = SCENARIO_DIR / f"{name}.json"
    if not path.is_file():
        raise ScenarioError(f"no scenario {name!r}: {path} missing (have {scenario_names()})")
    return json.loads(path.read_text())


def waiting_sites(truth: Mapping[str, Any]) -> list[str]:
    """``waiting_ranks_site`` as a list: one site, or several when the waiting ranks wait in
    different collectives (each waiting rank's stack holds one of them)."""
    site = truth.get("waiting_ranks_site")
    if site is None:
        return []
    return [site] if isinstance(site, str) else list(site)


def torchrun_step(python: str, program: Path, nodes: int, per_node: int,
                  srun_args: Sequence[str] = ("-K0",), wrapper: Sequence[str] = ()) -> list[str]:
    """The batch script's lines of one torchrun agent a node under srun; the agent on the job's
    first node hosts the c10d rendezvous store, whose address and port come from the same code
    the ranks use. ``wrapper`` runs the agent's line as its child, after its own steps."""
    torchrun = str(Path(python).parent / "torchrun")
    read = ("read -r RDZV_ADDR RDZV_PORT < <(" + shlex.quote(python) + " -c "
            + shlex.quote("import _harness as h; "
                          "print(h.master_address(), h.derived_ports(h.job_id())[1])")
            + ")")
    agent = (
        'exec nice -n ' + str(NICENESS) + ' "$0" --nnodes=' + str(nodes)
        + ' --nproc-per-node=' + str(per_node)
        + ' --rdzv-backend=c10d --rdzv-endpoint="$1" --rdzv-id="$SLURM_JOB_ID"'
        + ' --rdzv-conf=is_host=$(( SLURM_NODEID == 0 )) --max-restarts=0 "$2"'
    )
    argv = ["srun", *srun_args, f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1",
            *wrapper, "bash", "-c", agent, torchrun]
    return [read, shlex.join(argv) + ' "$RDZV_ADDR:$RDZV_PORT" ' + shlex.quote(str(program))]


# ---------------------------------------------------------------- build (pure)

def batch_script(truth: Mapping[str, Any], state_dir: Path, python: str) -> str:
    """The sbatch script for an srun or torchrun scenario."""
    program = REPO_ROOT / truth["program"]
    het = [] if truth["launcher"] != "srun-het" else [
        # a heterogeneous job: one component a node (sbatch_argv leaves the shape to these)
        line for i in range(truth["nodes"]) for line in (
            *(["#SBATCH hetjob"] if i else []),
            f"#SBATCH --nodes=1 --ntasks-per-node={truth['ntasks_per_node']}")]
    lines = [
        "#!/bin/bash",
        *het,
        f"# Scenario {truth['name']} ({truth['launcher']}), written by tests/scenarios/launch.py",
        "set -u",
        *_environment_lines(state_dir),
        # the truth's own settings for the job (torchrun's LOGLEVEL for a ready_pattern)
        *(f"export {k}={shlex.quote(str(v))}" for k, v in truth.get("environment", {}).items()),
        'echo "scenario ' + truth["name"] + ': job $SLURM_JOB_ID on $SLURM_JOB_NODELIST"',
    ]
    nodes, per_node = truth["nodes"], truth["ntasks_per_node"]
    if truth.get("export_rendezvous"):
        # the batch script exports the store's address and the world's size for every step
        # it starts, as many do at their top (the monitor inherits them too)
        lines.append(
            "read -r MASTER_PORT _ < <(" + shlex.quote(python) + " -c "
            + shlex.quote("import _harness as h; print(*h.derived_ports(h.job_id()))") + ")")
        lines.append(f"export MASTER_ADDR=127.0.0.1 MASTER_PORT WORLD_SIZE={truth['world_size']}")
    if truth.get("monitor"):
        # A per-node monitor started first and left in the background: as a step of its own
        # (--overlap: it shares the training step's CPUs, as a site's logger does), or, in a
        # job whose ranks the batch script starts itself, by the batch script too.
        monitor = [python, "-u", str(REPO_ROOT / truth["monitor"])]
        if truth["launcher"] not in ("torchrun-batch", "background"):
            monitor = ["srun", "--overlap", f"--nodes={nodes}", f"--ntasks={nodes}",
                       "--ntasks-per-node=1", *monitor]
        lines.append(shlex.join(monitor) + " &")
        lines.append("sleep 3  # the monitor's step is the job's first: its pids come first too")
    if truth.get("packed_with"):
        # Two trainings packed in one allocation (a sweep's shape): the companion and the
        # scenario's program, each its own srun step of ntasks_per_node ranks and its own
        # world (MASTER_PORT of its own), run side by side; the companion reports its
        # readiness in a folder of its own.
        if truth["launcher"] != "srun" or nodes != 1:
            raise ScenarioError(f"{truth['name']}: packed trainings are srun steps on one node")
        lines.append(
            "read -r PORT_A PORT_B < <(" + shlex.quote(python) + " -c "
            + shlex.quote("import _harness as h; print(*h.derived_ports(h.job_id()))") + ")")
        for port, folder, target in (("$PORT_A", "companion", truth["packed_with"]),
                                     ("$PORT_B", "", truth["program"])):
            # --overlap: both steps share the allocation's CPUs (--exact would need twice the
            # tasks allocated)
            step = ["srun", "-K0", "--overlap", "--nodes=1", f"--ntasks={per_node}", "nice", "-n",
                    str(NICENESS), python, "-u", str(REPO_ROOT / target)]
            where = shlex.quote(str(state_dir / folder)) if folder else '"$SLURMDIAG_SCENARIO_DIR"'
            if folder:
                lines.append(f"mkdir -p {where}")
            lines.append(f"MASTER_PORT={port} SLURMDIAG_SCENARIO_DIR={where} "
                         + shlex.join(step) + " &")
            if folder:
                lines.append("sleep 3  # the companion's step comes first")
        lines.append("wait")
        return "\n".join(lines) + "\n"
    if truth["launcher"] == "srun":
        # -K0: when one task exits non-zero the others keep running (and keep hanging);
        # the cluster's KillOnBadExit would otherwise decide.
        argv = ["srun", "-K0", f"--nodes={nodes}", f"--ntasks-per-node={per_node}",
                "nice", "-n", str(NICENESS), *_rank_command(truth, python, program)]
        if truth.get("batch_driver"):
            # the batch script's work done by a Python program that runs srun as its child
            argv = ["exec", python, "-u", str(REPO_ROOT / truth["batch_driver"]), *argv]
        lines.append(shlex.join(argv))
    elif truth["launcher"] == "srun-het":
        # one step across every component of the heterogeneous job (its ranks in order)
        groups = ",".join(str(i) for i in range(nodes))
        lines.append(shlex.join(["srun", "-K0", f"--het-group={groups}", "nice", "-n",
                                 str(NICENESS), *_rank_command(truth, python, program)]))
    elif truth["launcher"] == "srun-multi-prog":
        # `srun --multi-prog`: a configuration file gives some tasks (truth "multi_prog": task
        # ids -> [program, args...]) another command than the rest, which run the program.
        config = state_dir / "multi-prog.conf"

        def rank_line(command: list[str]) -> str:
            return shlex.join(["nice", "-n", str(NICENESS), python, "-u", *command])

        entries = [f"{ids} {rank_line([str(REPO_ROOT / other[0]), *other[1:]])}"
                   for ids, other in truth["multi_prog"].items()]
        entries.append("* " + rank_line([str(program)]))
        lines.append(f"cat > {shlex.quote(str(config))} <<'MULTIPROG'")
        lines.extend(entries)
        lines.append("MULTIPROG")
        lines.append(shlex.join(["srun", "-K0", f"--nodes={nodes}",
                                 f"--ntasks-per-node={per_node}", "--multi-prog", str(config)]))
    elif truth["launcher"] == "torchrun":
        wrapper = ["bash", str(REPO_ROOT / truth["wrapper"])] if truth.get("wrapper") else []
        lines += torchrun_step(python, program, nodes, per_node, wrapper=wrapper)
    elif truth["launcher"] == "torchrun-standalone":
        # The single-node torchrun line copied to a multi-node job (the field's D2 mistake):
        # one `torchrun --standalone` a node, each hosting its own rendezvous: every node
        # forms a world of its own, numbering its ranks from 0.
        torchrun = str(Path(python).parent / "torchrun")
        argv = ["srun", "-K0", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1",
                "nice", "-n", str(NICENESS), torchrun, "--standalone",
                f"--nproc-per-node={per_node}", "--max-restarts=0", str(program)]
        lines.append(shlex.join(argv))
    elif truth["launcher"] == "torchrun-batch":
        # torchrun straight in the batch script, as single-node jobs often do: no srun, the
        # agent and its workers live in the job's batch step.
        if nodes != 1:
            raise ScenarioError(f"{truth['name']}: torchrun-batch runs on one node")
        torchrun = str(Path(python).parent / "torchrun")
        lines.append(shlex.join(["nice", "-n", str(NICENESS), torchrun, "--standalone",
                                 f"--nproc-per-node={per_node}", "--max-restarts=0",
                                 str(program)]))
    elif truth["launcher"] == "background":
        # Hand-rolled: the batch script starts each rank in the background with its own RANK
        # and waits, as small single-node scripts do: no srun, no launcher process.
        if nodes != 1:
            raise ScenarioError(f"{truth['name']}: background ranks run on one node")
        lines.append("export MASTER_ADDR=127.0.0.1 MASTER_PORT=$(( 20000 + SLURM_JOB_ID % 10000 ))"
                     f" WORLD_SIZE={per_node}")
        for rank in range(per_node):
            lines.append(f"RANK={rank} LOCAL_RANK={rank} "
                         + shlex.join(["nice", "-n", str(NICENESS), *_rank_command(truth, python,
                                                                                 program)])
                         + " &")
        lines.append("wait")
    elif truth["launcher"] == "mp.spawn":
        # One task per node; the program spawns its ntasks_per_node ranks itself.
        argv = ["srun", "-K0", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1",
                "nice", "-n", str(NICENESS), python, "-u", str(program)]
        lines.append(shlex.join(argv))
    elif truth["launcher"] == "mpirun":
        # Open MPI's mpirun in the batch script, as MPI-minded sites and DeepSpeed's openmpi
        # launcher do: it starts one orted a node through srun, and the orteds the ranks (each
        # given its place in OMPI_COMM_WORLD_*; the program sets torch's RANK from it).
        # --allow-run-as-root: the local cluster runs its jobs as root.
        argv = ["mpirun", "--allow-run-as-root", "-np", str(nodes * per_node), "--map-by",
                f"ppr:{per_node}:node", "--bind-to", "none", "nice", "-n", str(NICENESS),
                *_rank_command(truth, python, program)]
        lines.append(shlex.join(argv))
    else:
        raise ScenarioError(f"{truth['name']}: launcher {truth['launcher']!r} has no batch script")
    return "\n".join(lines) + "\n"


def _rank_command(truth: Mapping[str, Any], python: str, program: Path) -> list[str]:
    """What each srun task runs: python on the program, `python -m` on its module, or a
    wrapper shell script (truth "wrapper") that runs that python line as its child."""
    if truth.get("module"):
        command = [python, "-u", "-m", str(truth["module"])]
    else:
        command = [python, "-u", str(program)]
    if truth.get("wrapper"):
        return ["bash", str(REPO_ROOT / truth["wrapper"]), *command]
    return command


def sbatch_argv(truth: Mapping[str, Any], state_dir: Path, script: Path) -> list[str]:
    shape = [] if truth["launcher"] == "srun-het" else [  # a het job's is in its script
        f"--nodes={truth['nodes']}", f"--ntasks-per-node={truth['ntasks_per_node']}"]
    return [
        "sbatch", "--parsable",
        f"--job-name=slurmdiag-{truth['name']}",
        *shape,
        f"--time={TIME_LIMIT_MINUTES}",
        f"--output={state_dir}/job-%j.out",
        f"--chdir={REPO_ROOT}",
        str(script),
    ]


def _environment_lines(state_dir: Path) -> list[str]:
    return [
        "unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT",
        # One intra-op thread a rank unless the run asks otherwise (tests/accuracy.py --threads):
        # "default" leaves torch its own count, as a job started by plain srun gets.
        'export OMP_NUM_THREADS="${SLURMDIAG_SCENARIO_THREADS:-1}"',
        'if [ "$OMP_NUM_THREADS" = default ]; then unset OMP_NUM_THREADS; fi',
        "export PYTHONUNBUFFERED=1",
        f"export SLURMDIAG_SCENARIO_DIR={shlex.quote(str(state_dir))}",
        # The scenario programs import _harness and _training from their own directory;
        # under submitit they run via runpy, which does not put that directory on sys.path.
        f"export PYTHONPATH={shlex.quote(str(SCENARIO_DIR))}${{PYTHONPATH:+:$PYTHONPATH}}",
    ]


def submission_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not _INHERITED_VARS_TO_DROP.match(k)}
    env.update(extra or {})
    return env


# ---------------------------------------------------------------- run

def _run(argv: list[str], *, timeout: float = 30, env: Mapping[str, str] | None = None,
         ) -> subprocess.CompletedProcess[str]:
    """The one place this module starts a command."""
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          env=dict(env) if env is not None else None, check=False)


def submit(name: str, state_dir: Path | str, *, env: Mapping[str, str] | None = None,
           python: str | None = None, truth: Mapping[str, Any] | None = None) -> ScenarioRun:
    """Submit scenario `name`; its rank files and output go to state_dir. Returns at once.
    ``truth``: its truth changed (another shape: nodes, ntasks_per_node, world_size)."""
    truth = dict(truth) if truth is not None else load_truth(name)
    state_dir = Path(state_dir).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    # An earlier run's rank files would make this one "ready" before its job even started
    # (`make accuracy` reuses /tmp/slurmdiag-accuracy/batchN/<name>).
    for stale in state_dir.glob("rank*.json"):
        stale.unlink()
    python = python or sys.executable
    (state_dir / "job_id").unlink(missing_ok=True)
    if truth.get("stalled_mount"):
        _mount_stalled_dataset(truth, state_dir, python)
    if truth["launcher"] == "submitit":
        job_id = _submit_with_submitit(truth, state_dir, python, env or {})
    elif truth["launcher"] == "salloc":
        job_id = _submit_interactively(truth, state_dir, python, env or {})
    else:
        script = state_dir / "job.sbatch"
        script.write_text(batch_script(truth, state_dir, python))
        argv = sbatch_argv(truth, state_dir, script)
        done = _run(argv, env=submission_environment(env))
        if done.returncode != 0:
            raise ScenarioError(f"{name}: {shlex.join(argv)} failed: {done.stderr.strip()}")
        job_id = done.stdout.strip().split(";")[0]
    (state_dir / "job_id").write_text(job_id + "\n")
    return ScenarioRun(name=name, job_id=job_id, truth=truth, state_dir=state_dir)


def salloc_argv(truth: Mapping[str, Any]) -> list[str]:
    """An interactive allocation as `salloc` makes one, without its shell (the step comes
    from outside, as a user's srun typed at salloc's prompt does)."""
    return ["salloc", "--no-shell", f"--job-name=slurmdiag-{truth['name']}",
            f"--nodes={truth['nodes']}", f"--ntasks-per-node={truth['ntasks_per_node']}",
            f"--time={TIME_LIMIT_MINUTES}"]


def interactive_step_script(truth: Mapping[str, Any], state_dir: Path, python: str,
                            job_id: str) -> str:
    """What the user types at salloc's prompt: the environment, then srun into the allocation."""
    program = REPO_ROOT / truth["program"]
    return "\n".join([
        "#!/bin/bash",
        f"# Scenario {truth['name']} (salloc), written by tests/scenarios/launch.py",
        "set -u",
        *_environment_lines(state_dir),
        shlex.join(["srun", f"--jobid={job_id}", "-K0", f"--nodes={truth['nodes']}",
                    f"--ntasks-per-node={truth['ntasks_per_node']}", "nice", "-n",
                    str(NICENESS), *_rank_command(truth, python, program)]),
    ]) + "\n"


def _submit_interactively(truth: Mapping[str, Any], state_dir: Path, python: str,
                          env: Mapping[str, str]) -> str:
    """An allocation from `salloc --no-shell`, its step started from here by srun (running on
    this host, outside the job, as at salloc's prompt: the job has no batch step and no output
    file of its own); srun's output goes to <state_dir>/job-J.out."""
    done = _run(salloc_argv(truth), timeout=120, env=submission_environment(env))
    granted = re.search(r"Granted job allocation (\d+)", done.stderr + done.stdout)
    if done.returncode != 0 or granted is None:
        raise ScenarioError(f"{truth['name']}: salloc failed: {done.stderr.strip()}")
    job_id = granted.group(1)
    script = state_dir / "step.sh"
    script.write_text(interactive_step_script(truth, state_dir, python, job_id))
    with open(state_dir / f"job-{job_id}.out", "w") as out:
        subprocess.Popen(["bash", str(script)], stdout=out, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL, cwd=REPO_ROOT, start_new_session=True,
                         env=submission_environment(env))
    return job_id


def _mount_stalled_dataset(truth: Mapping[str, Any], state_dir: Path, python: str) -> None:
    """The truth's "stalled_mount": <state_dir>/dataset served by _stalled_mount.py (outside the
    job, as a site's storage is), whose reads of the given ranks' shards from the given step
    are never answered; it unmounts itself once the job (state_dir/job_id) has left squeue."""
    mountpoint = state_dir / "dataset"
    if os.path.ismount(mountpoint):  # an earlier run's, its server gone or going
        _run(["umount", "-l", str(mountpoint)])
    stall = truth["stalled_mount"]
    with open(state_dir / "stalled_mount.log", "w") as log:  # the server keeps its own copy
        subprocess.Popen(
            [python, str(SCENARIO_DIR / "_stalled_mount.py"), str(mountpoint),
             str(state_dir / "job_id"), "--stall-ranks", ",".join(str(r) for r in stall["ranks"]),
             "--from-step", str(stall.get("from_step", 0)),
             "--delay-s", str(stall.get("delay_s", 0.0))],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
            start_new_session=True)
    deadline = time.monotonic() + 10
    while not os.path.ismount(mountpoint):
        if time.monotonic() > deadline:
            raise ScenarioError(f"{truth['name']}: {mountpoint} not mounted after 10 s: "
                                + (state_dir / "stalled_mount.log").read_text()[-500:])
        time.sleep(0.1)


def _submit_with_submitit(truth: Mapping[str, Any], state_dir: Path, python: str,
                          env: Mapping[str, str]) -> str:
    import runpy

    import submitit

    setup = _environment_lines(state_dir)
    setup += [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
    executor = submitit.AutoExecutor(
        folder=state_dir / "submitit", cluster="slurm",
        slurm_python=f"nice -n {NICENESS} {shlex.quote(python)}",
    )
    executor.update_parameters(
        name=f"slurmdiag-{truth['name']}",
        nodes=truth["nodes"],
        tasks_per_node=truth["ntasks_per_node"],
        timeout_min=TIME_LIMIT_MINUTES,
        slurm_setup=setup,
        slurm_srun_args=["-K0"],
    )
    # runpy is pickled by reference, so the workers need nothing but the program's path;
    # the program's frames then carry its real file name, as with srun.
    job = executor.submit(runpy.run_path, str(REPO_ROOT / truth["program"]), run_name="__main__")
    return str(job.job_id)


# ---------------------------------------------------------------- a submitted job

@dataclass
class ScenarioRun:
    """One submitted scenario job."""

    name: str
    job_id: str
    truth: dict[str, Any]
    state_dir: Path
    ready: dict[int, dict[str, Any]] = field(default_factory=dict)

    def rank_records(self) -> dict[int, dict[str, Any]]:
        """The rank<R>.json files written so far."""
        records = {}
        for path in self.state_dir.glob("rank*.json"):
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # replaced atomically, so only a vanished file lands here
            records[int(record["rank"])] = record
        return records

    def wait_ready(self, timeout: float = 60.0) -> dict[int, dict[str, Any]]:
        """Wait until every rank reported and the dead ones are gone; raise with the log tail."""
        deadline = time.monotonic() + timeout
        # ranks whose process the job never starts (run_with_staging.sh) never report
        world_size = int(self.truth["world_size"]) - len(self.truth.get("unstarted_ranks", ()))
        # the look taken while the other ranks are not started yet (healthy_slow_staging)
        early = set(self.truth.get("ready_ranks", ()))
        # a job that starts no rank (torchrun_node_staging) is ready when its log says so
        pattern = re.compile(self.truth["ready_pattern"]) if self.truth.get("ready_pattern") else None
        while True:
            records = self.rank_records()
            if (early <= set(records) if early else len(records) == world_size) and not any(
                _process_alive(r) for r in records.values() if r.get("role") == "dead"
            ) and (pattern is None or pattern.search(self.output())):
                time.sleep(_READY_GRACE_SECONDS)
                self.ready = records
                return records
            state = self.job_state()
            if state is not None and state not in _ALIVE_JOB_STATES:
                raise ScenarioError(
                    f"scenario {self.name}: job {self.job_id} is {state} before all ranks "
                    f"were ready ({sorted(records)} of {world_size} reported)\n"
                    + self.output_tail()
                )
            if time.monotonic() > deadline:
                raise ScenarioError(
                    f"scenario {self.name}: job {self.job_id} ({state}) not ready after "
                    f"{timeout:.0f} s ({sorted(records)} of {world_size} ranks reported)\n"
                    + self.output_tail()
                )
            time.sleep(0.5)

    def pid(self, rank: int) -> int:
        records = self.ready or self.rank_records()
        return int(records[rank]["pid"])

    def job_state(self) -> str | None:
        """JobState from scontrol, or None when Slurm does not know the job (any more)."""
        try:
            done = _run(["scontrol", "show", "job", "-o", self.job_id], timeout=20)
        except subprocess.TimeoutExpired:
            return None
        found = re.search(r"\bJobState=(\S+)", done.stdout)
        return found.group(1) if found else None

    def output_files(self) -> list[Path]:
        files = sorted(self.state_dir.glob("job-*.out"))
        files += sorted((self.state_dir / "submitit").glob("*_log.*"))
        return files

    def output(self) -> str:
        return "".join(f"==> {p.name} <==\n{p.read_text(errors='replace')}"
                       for p in self.output_files())

    def output_tail(self, lines: int = 40) -> str:
        tail = self.output().splitlines()[-lines:]
        return "\n".join(tail) if tail else f"(no job output in {self.state_dir})"

    def cancel(self) -> None:
        _run(["scancel", self.job_id], timeout=30)


def _process_alive(record: Mapping[str, Any]) -> bool:
    """Whether a rank's process still runs; only knowable on this host."""
    if record.get("host") != socket.gethostname():
        return False
    try:
        stat = Path(f"/proc/{int(record['pid'])}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", choices=scenario_names())
    parser.add_argument("state_dir", type=Path)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="extra environment for the ranks (repeatable)")
    args = parser.parse_args(argv)
    run = submit(args.name, args.state_dir, env=dict(e.split("=", 1) for e in args.env))
    print(run.job_id, flush=True)
    try:
        for rank, record in sorted(run.wait_ready(args.timeout).items()):
            print(f"rank {rank}: pid {record['pid']} on {record.get('node')}: "
                  f"{record['role']}: {record['phase']}", file=sys.stderr)
    except ScenarioError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
