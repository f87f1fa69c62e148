"""Plumbing shared by the scenario programs: who am I, where is rank 0, tell the test I'm there.

Everything a real training script would get from its launcher lives here, so that the
scenario files themselves read like training code. Stdlib only at import time: torch is
imported inside `init_distributed`, so unit tests can import this module cheaply.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

#: Collectives must stay hung while slurmdiag looks at them; gloo's default is 30 min.
PROCESS_GROUP_TIMEOUT = timedelta(hours=2)
#: A rank kills itself after this long even outside Slurm (sbatch --time=30 does it inside).
SAFETY_NET_SECONDS = int(os.environ.get("SLURMDIAG_SCENARIO_TIMEOUT", "1800"))
#: Ports derived from the job id: 20000-29999, below Linux's ephemeral range (32768+) and
#: clear of slurmctld (6817) and the emulated slurmds (17001+).
_PORT_BASE = 20000
_PORT_SLOTS = 5000


@dataclass(frozen=True)
class RankInfo:
    """This process's place in the job, whichever launcher started it."""

    rank: int
    world_size: int
    local_rank: int
    node_rank: int
    launcher: str  # torchrun | env | submitit | srun | mp.spawn | single


def rank_info(environ: Mapping[str, str] | None = None) -> RankInfo:
    """Resolve rank and world size: RANK/WORLD_SIZE, else submitit, else SLURM_PROCID/NTASKS."""
    env = os.environ if environ is None else environ
    if "RANK" in env and "WORLD_SIZE" in env:
        # torchrun (or a hand launch) sets the full contract; the torchrun agent itself
        # is not a rank and never runs this code.
        launcher = "torchrun" if "TORCHELASTIC_RUN_ID" in env else "env"
        return RankInfo(
            rank=int(env["RANK"]),
            world_size=int(env["WORLD_SIZE"]),
            local_rank=int(env.get("LOCAL_RANK", "0")),
            node_rank=int(env.get("GROUP_RANK", env.get("SLURM_NODEID", "0"))),
            launcher=launcher,
        )
    if env.get("SUBMITIT_EXECUTOR") == "slurm" and environ is None:
        import submitit  # only inside a submitit job, where it is importable by construction

        job = submitit.JobEnvironment()
        return RankInfo(
            rank=job.global_rank,
            world_size=job.num_tasks,
            local_rank=job.local_rank,
            node_rank=job.node,
            launcher="submitit",
        )
    if "SLURM_PROCID" in env:
        return RankInfo(
            rank=int(env["SLURM_PROCID"]),
            world_size=int(env.get("SLURM_NTASKS", "1")),
            local_rank=int(env.get("SLURM_LOCALID", "0")),
            node_rank=int(env.get("SLURM_NODEID", "0")),
            launcher="submitit" if env.get("SUBMITIT_EXECUTOR") == "slurm" else "srun",
        )
    return RankInfo(rank=0, world_size=1, local_rank=0, node_rank=0, launcher="single")


def first_hostname(nodelist: str) -> str:
    """First host of a Slurm host list: 'node[003-004,007],gpu1' -> 'node003'."""
    depth, end = 0, len(nodelist)
    for index, char in enumerate(nodelist):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            end = index
            break
    first = nodelist[:end].strip()
    if not first:
        raise ValueError(f"not a Slurm host list: {nodelist!r}")
    # Each bracket group contributes its first value: 'r[2-3]n[1-2]' -> 'r2n1'.
    return re.sub(r"\[([^\]]*)\]", lambda m: m.group(1).split(",")[0].split("-")[0], first)


def node_address(name: str) -> str | None:
    """An address for a Slurm node name: DNS first, then the node's NodeAddr from scontrol."""
    try:
        return str(socket.getaddrinfo(name, None, socket.AF_INET)[0][4][0])
    except OSError:
        pass
    # Emulated clusters (and some real ones) name nodes that DNS does not know.
    try:
        out = subprocess.run(
            ["scontrol", "show", "node", name, "-o"],
            capture_output=True, text=True, timeout=20, check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"\bNodeAddr=(\S+)", out)
    return found.group(1) if found else None


def master_address(environ: Mapping[str, str] | None = None) -> str:
    """MASTER_ADDR, else the first node of the job, else loopback."""
    env = os.environ if environ is None else environ
    if env.get("MASTER_ADDR"):
        return env["MASTER_ADDR"]
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if nodelist:
        address = node_address(first_hostname(nodelist))
        if address:
            return address
    return "127.0.0.1"


def derived_ports(job_id: str | int | None) -> tuple[int, int]:
    """(MASTER_PORT, torchrun rendezvous port) for a job: distinct for concurrent jobs."""
    if job_id is None or str(job_id) == "":
        return 29500, 29400
    slot = int(str(job_id).split("_")[0]) % _PORT_SLOTS
    master = _PORT_BASE + 2 * slot
    return master, master + 1


def job_id(environ: Mapping[str, str] | None = None) -> str | None:
    env = os.environ if environ is None else environ
    return env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")


def setup(info: RankInfo | None = None) -> RankInfo:
    """First call of every scenario: arm the safety net and say who we are.

    ``info``: a rank that knows its place without its environment (one started by mp.spawn).
    """
    # SIGALRM's default action ends the process even while it is blocked inside gloo.
    signal.alarm(SAFETY_NET_SECONDS)
    info = info or rank_info()
    log(info, f"pid {os.getpid()} on {socket.gethostname()} "
              f"(node {os.environ.get('SLURMD_NODENAME', '?')}, launcher {info.launcher})")
    return info


def init_distributed(info: RankInfo, file_store: bool = False) -> None:
    """init_process_group on gloo with a timeout long enough that hangs stay hung.

    ``file_store``: rendezvous through a file on the shared file system (torch's FileStore,
    ``init_method="file://..."``: no TCP store, no MASTER_ADDR), in the job's state folder."""
    import torch
    import torch.distributed as dist

    # tests/accuracy.py --threads: "default" leaves torch its own intra-op thread count.
    threads = os.environ.get("SLURMDIAG_SCENARIO_THREADS", "1")
    if threads != "default":
        torch.set_num_threads(int(threads))
    if os.environ.get("SLURMDIAG_SCENARIO_FLIGHT_RECORDER") == "1":
        # What a user adds to a training script to get Flight Recorder dumps on demand.
        import slurmdiag.torch

        slurmdiag.torch.install()
    if file_store:
        folder = os.environ.get("SLURMDIAG_SCENARIO_DIR") or f"/tmp/slurmdiag-filestore-{job_id()}"
        dist.init_process_group(
            backend="gloo",
            init_method=f"file://{folder}/rendezvous",
            rank=info.rank,
            world_size=info.world_size,
            timeout=PROCESS_GROUP_TIMEOUT,
        )
        return
    os.environ.setdefault("MASTER_ADDR", master_address())
    os.environ.setdefault("MASTER_PORT", str(derived_ports(job_id())[0]))
    dist.init_process_group(
        backend="gloo",
        rank=info.rank,
        world_size=info.world_size,
        timeout=PROCESS_GROUP_TIMEOUT,
    )


def report_ready(info: RankInfo, phase: str, role: str) -> None:
    """Write <state_dir>/rank<R>.json just before this rank enters its hang.

    role: culprit | waiting | dead | healthy. The file is replaced atomically so a reader
    never sees half a record.
    """
    record = {
        **asdict(info),
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "node": os.environ.get("SLURMD_NODENAME"),
        "job_id": job_id(),
        "phase": phase,
        "role": role,
        "time": time.time(),
    }
    log(info, f"ready: {role}: {phase}")
    state_dir = os.environ.get("SLURMDIAG_SCENARIO_DIR")
    if not state_dir:
        return
    path = Path(state_dir) / f"rank{info.rank}.json"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record) + "\n")
    os.replace(tmp, path)


def log(info: RankInfo, message: str) -> None:
    print(f"[rank {info.rank}/{info.world_size}] {message}", file=sys.stdout, flush=True)


def train_plainly(info: RankInfo, steps: range) -> None:
    """The shared training loop once past a scenario's own start: a fresh model, one
    `_training.train_step` and one log line per step."""
    import _training as training  # torch: imported by the ranks only, as in init_distributed

    model = training.build_model()
    for step in steps:
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        log(info, f"step {step} loss {loss:.4f}")


def train_healthy(info: RankInfo, steps: range, next_batch: Callable[[int], Any]) -> None:
    """The controls' loop: ``next_batch(step)`` (the scenario's own slow part, returning a
    batch), one `_training.train_step` and one log line per step; ready (role healthy) once
    the first step is done."""
    import _training as training  # torch: imported by the ranks only, as in init_distributed

    model = training.build_model()
    for step in steps:
        loss = training.train_step(model, next_batch(step))
        log(info, f"step {step} loss {loss:.4f}")
        if step == 0:
            report_ready(info, "training", role="healthy")


def train_with_rank0_phase(info: RankInfo, every: int, cycles: int,
                           phase: Callable[[int], str], what: str) -> None:
    """The rank-gated controls' loop (rank0_*_barrier): cycles of ``every`` training steps,
    then ``phase(cycle)`` on rank 0 alone, its result logged, while the others wait in a
    barrier (``if rank == 0: ...`` then ``dist.barrier()`` on every rank); ready (role
    healthy) when the first phase starts: ``what`` on rank 0, "barrier" on the others."""
    import _training as training  # torch: imported by the ranks only, as in init_distributed
    import torch.distributed as dist

    model = training.build_model()
    step = 0
    for cycle in range(cycles):
        for _ in range(every):
            loss = training.train_step(model, training.synthetic_batch(info.rank, step))
            log(info, f"step {step} loss {loss:.4f}")
            step += 1
        if cycle == 0:
            report_ready(info, what if info.rank == 0 else "barrier", role="healthy")
        if info.rank == 0:
            log(info, phase(cycle))
        dist.barrier()


def run_then_barrier(prepare: Callable[[RankInfo], None]) -> None:
    """A job of one phase: the process group, ``prepare(info)`` (where the scenario hangs),
    then a barrier and the end."""
    import torch.distributed as dist  # torch: imported by the ranks only, as in init_distributed

    info = setup()
    init_distributed(info)
    prepare(info)
    dist.barrier()
    dist.destroy_process_group()


def train_in_epochs(info: RankInfo, epochs: int, steps_per_epoch: int,
                    before_epoch: Callable[[int], None]) -> None:
    """Train for ``epochs`` of ``steps_per_epoch`` logged steps, calling ``before_epoch(epoch)``
    first in each (the scenario's own phase); ready (a healthy control) after epoch 1."""
    import _training as training  # torch: imported by the ranks only

    model = training.build_model()
    step = 0
    for epoch in range(epochs):
        before_epoch(epoch)
        for _ in range(steps_per_epoch):
            loss = training.train_step(model, training.synthetic_batch(info.rank, step))
            log(info, f"step {step} loss {loss:.4f}")
            step += 1
        if epoch == 1:
            report_ready(info, "training", role="healthy")
