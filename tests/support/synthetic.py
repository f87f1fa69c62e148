"""Synthetic hung jobs for the report's tests and benchmark (not part of the public surface).

``rank_gated_job`` builds a Snapshot shaped like what the collector returns for a torch.distributed
job where one rank skipped a collective: every other rank waits in ``all_reduce``, the culprit has
moved on to ``barrier``. Its verdicts are fixed texts, so tests can pin what the report shows
independently of the analysis' wording. ``with_hostile_strings`` adds markup-like strings to any
snapshot (a thread name, a file path, an env value, the job name).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from slurmdiag.hostlist import format_int_ranges
from slurmdiag.snapshot import (
    Connection,
    Frame,
    Gpu,
    GpuState,
    IbPort,
    Interface,
    Job,
    NicState,
    Node,
    Rank,
    Sample,
    Snapshot,
    StraceSummary,
    SyscallCount,
    ThreadStack,
    Verdict,
)

HOSTILE_THREAD = "<script>alert(1)</script>"
HOSTILE_DIR = "/home/o'brien/<llm> & \"exp\""
HOSTILE_ENV = "<b>\"x\" & 'y'</b>"
HOSTILE_JOB_NAME = "<img src=x onerror=alert(1)>"

_SITE = "/opt/venv/lib/python3.11/site-packages"
_STDLIB = "/usr/lib/python3.11"
_C10D = f"{_SITE}/torch/distributed/distributed_c10d.py"
_LOGGER = f"{_SITE}/torch/distributed/c10d_logger.py"


@dataclass(frozen=True)
class JobShape:
    """What to build; the defaults are a 2-node x 2-rank job like the local scenarios."""

    nodes: int = 2
    ranks_per_node: int = 2
    gpus_per_node: int = 2
    culprit: int = 3
    samples: int = 3
    hostile: bool = False
    infiniband: bool = False
    failed_nodes: tuple[int, ...] = ()  # node indices that timed out (their ranks go missing)
    hot_gpu_nodes: tuple[int, ...] = ()
    moving_nodes: tuple[int, ...] = ()  # nodes whose ranks are loading data, stack changing
    job_id: str = "4242"
    extra: dict[str, str] = field(default_factory=dict)


def rank_gated_job(shape: JobShape = JobShape()) -> Snapshot:
    """A hung job where rank ``shape.culprit`` skipped the all_reduce all other ranks wait in."""
    user_dir = HOSTILE_DIR if shape.hostile else "/home/alice/llm"
    train = f"{user_dir}/train.py"
    outer = (Frame("main", train, 80, "__main__"), Frame("<module>", train, 90, "__main__"))
    waiting = (
        Frame("all_reduce", _C10D, 2810, "torch.distributed.distributed_c10d"),
        Frame("wrapper", _LOGGER, 81, "torch.distributed.c10d_logger"),
        Frame("train_step", train, 58, "__main__"),
    ) + outer
    skipped = (
        Frame("barrier", _C10D, 4159, "torch.distributed.distributed_c10d"),
        Frame("wrapper", _LOGGER, 81, "torch.distributed.c10d_logger"),
        Frame("train_step", train, 64, "__main__"),
    ) + outer
    loading = [
        (
            Frame(fn, f"{_SITE}/torch/utils/data/dataloader.py", line, "torch.utils.data.dataloader"),
            Frame("__next__", f"{_SITE}/torch/utils/data/dataloader.py", 631),
            Frame("train_loop", train, 70, "__main__"),
        ) + outer
        for fn, line in (("_next_data", 1328), ("_get_data", 1294), ("_try_get_data", 1133))
    ]
    watchdog = (
        Frame("wait", f"{_STDLIB}/threading.py", 324, "threading"),
        Frame("_watchdog", train, 30, "__main__"),
        Frame("run", f"{_STDLIB}/threading.py", 982, "threading"),
        Frame("_bootstrap_inner", f"{_STDLIB}/threading.py", 1045, "threading"),
        Frame("_bootstrap", f"{_STDLIB}/threading.py", 1002, "threading"),
    )
    watchdog_name = HOSTILE_THREAD if shape.hostile else "Thread-1 (_watchdog)"
    world = shape.nodes * shape.ranks_per_node
    names = [f"node{i + 1:0{max(3, len(str(shape.nodes)))}d}" for i in range(shape.nodes)]
    master = names[0]
    sync_samples = {
        stack: tuple(
            Sample(
                t=0.5 * k,
                threads=(
                    ThreadStack("MainThread", 139872001, 1001, active=True, owns_gil=False,
                                frames=stack),
                    ThreadStack(watchdog_name, 139872002, 1002, frames=watchdog),
                ),
            )
            for k in range(shape.samples)
        )
        for stack in (waiting, skipped)
    }
    moving_samples = tuple(
        Sample(
            t=0.5 * k,
            threads=(
                ThreadStack("MainThread", 139872001, 1001, active=True, owns_gil=True,
                            frames=loading[k % len(loading)]),
            ),
        )
        for k in range(shape.samples)
    )
    futex = StraceSummary(
        status="ok", window_s=1.0, total_seconds=1.0,
        syscalls=(
            SyscallCount("futex", 12, 4, 0.998, 99.8),
            SyscallCount("poll", 40, 0, 0.0015, 0.15),
            SyscallCount("clock_gettime", 80, 0, 0.0005, 0.05),
        ),
    )
    nodes = []
    for n, name in enumerate(names):
        address = f"10.0.{n // 250}.{n % 250 + 1}"
        if n in shape.failed_nodes:
            nodes.append(Node(
                name=name, status="timeout",
                message=f"no answer from the collector within 30.0 s (srun step on {name})",
                duration_s=30.0,
            ))
            continue
        ranks = []
        for local in range(shape.ranks_per_node):
            rank = n * shape.ranks_per_node + local
            if n in shape.moving_nodes:
                samples = moving_samples
            else:
                samples = sync_samples[skipped if rank == shape.culprit else waiting]
            env = {
                "RANK": str(rank), "LOCAL_RANK": str(local), "WORLD_SIZE": str(world),
                "MASTER_ADDR": master, "MASTER_PORT": "29500", "GLOO_SOCKET_IFNAME": "eth0",
                "SLURM_JOB_ID": shape.job_id, "SLURM_PROCID": str(rank),
                "CUDA_VISIBLE_DEVICES": str(local % max(1, shape.gpus_per_node)),
            }
            if shape.hostile:
                env["EXPERIMENT"] = HOSTILE_ENV
            env.update(shape.extra)
            ranks.append(Rank(
                rank=rank, pid=20000 + local, local_rank=local, world_size=world, launcher="srun",
                step_id=f"{shape.job_id}.0",
                cmdline=("/opt/venv/bin/python", "-u", train, "--config", f"{user_dir}/cfg.yaml"),
                state="S", cpu_percent=0.0 if n not in shape.moving_nodes else 37.0,
                wchan="futex_wait_queue", num_threads=6, rss_kb=1_850_000, env=env,
                samples=samples, strace=futex,
                connections=(
                    Connection(f"{address}:{41000 + local}", "10.0.0.1:29500", "ESTABLISHED",
                               "ib0" if shape.infiniband else "eth0"),
                    Connection(f"{address}:{42000 + local}",
                               f"10.0.{(n + 1) % shape.nodes // 250}.{(n + 1) % shape.nodes % 250 + 1}"
                               f":{43000 + local}", "ESTABLISHED",
                               "ib0" if shape.infiniband else "eth0"),
                ),
            ))
        nodes.append(Node(
            name=name, status="ok", duration_s=1.4, collector_version="0.1.0", python="3.11.2",
            tools={"py-spy": "0.4.1", "strace": "6.1", "nvidia-smi": "570.124.06"},
            ranks=tuple(ranks),
            gpus=_gpus(shape, n),
            nics=_nics(shape, address),
        ))
    job = Job(
        id=shape.job_id, state="RUNNING", user="alice",
        name=HOSTILE_JOB_NAME if shape.hostile else "llm-pretrain",
        nodes=tuple(names), ntasks=world, partition="debug",
        submit_time="2026-11-22T00:09:58", start_time="2026-11-22T00:10:12",
        run_time="00:14:05", time_limit="01:00:00", work_dir=user_dir,
        stdout=f"{user_dir}/slurm-{shape.job_id}.out", stderr=f"{user_dir}/slurm-{shape.job_id}.out",
    )
    others = [
        r for r in range(world)
        if r != shape.culprit and r // shape.ranks_per_node not in shape.failed_nodes
        and r // shape.ranks_per_node not in shape.moving_nodes
    ]
    verdicts = [Verdict(
        kind="divergent_collective", severity="critical",
        summary=(f"Rank {shape.culprit} waits in barrier at train.py:64 while ranks "
                 f"{format_int_ranges(others)} wait in all_reduce at train.py:58: rank "
                 f"{shape.culprit} skipped a collective the others entered."),
        culprit_ranks=(shape.culprit,),
        sites=(f"{train}:64", f"{train}:58"),
        evidence=(
            (f"{len(others)} of {world} ranks stationary in all_reduce "
            f"(torch/distributed/distributed_c10d.py:2810) over {shape.samples} samples"),
            (f"rank {shape.culprit} stationary in barrier "
            f"(torch/distributed/distributed_c10d.py:4159) over {shape.samples} samples"),
            "every rank sleeps in futex (strace: 99.8 % of 1.0 s)",
        ),
        next_step=(f"Read {train} around lines 58-64: a collective behind a rank-dependent "
                   "condition must be reached by every rank."),
    )]
    if shape.gpus_per_node > 1 and shape.nodes > 1 and shape.nodes - 1 not in shape.failed_nodes:
        verdicts.append(Verdict(
            kind="gpu_query_error", severity="info",
            summary=f"nvidia-smi answered [Unknown Error] for power.draw of GPU 1 on {names[-1]}.",
            evidence=(f"{names[-1]} GPU 1 power.draw = [Unknown Error]",),
            next_step="Not the cause of this hang; check the GPU with the cluster admins later.",
        ))
    for n in shape.hot_gpu_nodes:
        verdicts.append(Verdict(
            kind="gpu_thermal", severity="warning",
            summary=f"GPU 0 on {names[n]} is at 91 °C and hardware-throttled.",
            culprit_ranks=(n * shape.ranks_per_node,),
            evidence=(f"{names[n]} GPU 0 temperature.gpu = 91, clocks_event_reasons = 0x40",),
            next_step=f"Drain {names[n]} and ask the admins to check its cooling.",
        ))
    return Snapshot(
        job=job, nodes=tuple(nodes), slurmdiag_version="0.1.0", created="2026-11-22T00:24:17Z",
        duration_s=1.9, transport="srun", options={"samples": shape.samples},
        verdicts=tuple(verdicts),
    )


def _gpus(shape: JobShape, n: int) -> GpuState:
    gpus = []
    for index in range(shape.gpus_per_node):
        hot = n in shape.hot_gpu_nodes and index == 0
        idle = (n * shape.ranks_per_node + index) == shape.culprit
        raw = {
            "index": str(index), "name": "NVIDIA A100 80GB PCIe",
            "utilization.gpu": "0" if idle else "100", "temperature.gpu": "91" if hot else "41",
            "power.draw": "71.20", "clocks_event_reasons.active": "0x40" if hot else "0x0",
        }
        power: float | None = 71.2
        if n == shape.nodes - 1 and index == 1 and shape.nodes > 1:
            raw["power.draw"] = "[Unknown Error]"
            power = None
        gpus.append(Gpu(
            index=index, uuid=f"GPU-{n:04x}{index:04x}-5b1c-4d0e-9f3a-2a4c6e8f0b1d",
            name="NVIDIA A100 80GB PCIe", utilization_gpu=0.0 if idle else 100.0,
            utilization_memory=0.0 if idle else 3.0, memory_used_mib=1532.0,
            memory_total_mib=81920.0, temperature_c=91.0 if hot else 41.0, power_w=power,
            clocks_event_reasons="0x0000000000000040" if hot else "0x0000000000000000",
            ecc_uncorrected_volatile=0.0, pcie_gen=4.0, pcie_width=16.0,
            retired_pending="[N/A]", remapped_pending="No", raw=raw,
        ))
    return GpuState(status="ok" if gpus else "absent",
                    message=None if gpus else "nvidia-smi: command not found", gpus=tuple(gpus))


def _nics(shape: JobShape, address: str) -> NicState:
    interfaces = [
        Interface("lo", "UNKNOWN", 65536, None, ("127.0.0.1/8",), "loopback"),
        Interface("eth0", "UP", 1500, 10000, (f"{address}/16",), "ether"),
    ]
    ports: tuple[IbPort, ...] = ()
    if shape.infiniband:
        interfaces.append(Interface("ib0", "UP", 4092, 200000, (f"172.16.{address[5:]}/16",),
                                    "infiniband"))
        ports = tuple(
            IbPort(f"mlx5_{i}", 1, "4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)", "InfiniBand")
            for i in range(4)
        )
    return NicState(interfaces=tuple(interfaces), ib_ports=ports)


def with_hostile_strings(snapshot: Snapshot) -> Snapshot:
    """Add the hostile strings to any snapshot: a thread name, a file path, an env value."""
    hostile_frame = Frame("<module>", f"{HOSTILE_DIR}/launch.py", 7)
    nodes = []
    for node in snapshot.nodes:
        ranks = []
        for rank in node.ranks:
            samples = tuple(
                replace(sample, threads=sample.threads + (
                    ThreadStack(HOSTILE_THREAD, 666, 666, frames=(hostile_frame,)),
                ))
                for sample in rank.samples
            )
            ranks.append(replace(rank, samples=samples,
                                 env={**rank.env, "EXPERIMENT": HOSTILE_ENV},
                                 cmdline=rank.cmdline + (f"--out={HOSTILE_DIR}",)))
        nodes.append(replace(node, ranks=tuple(ranks)))
    job = replace(snapshot.job, name=HOSTILE_JOB_NAME, work_dir=HOSTILE_DIR)
    return replace(snapshot, job=job, nodes=tuple(nodes))
