"""Build snapshots in code from compact stack specs, for the analysis tests.

A frame spec is ``"function path:line"`` (``"function path"`` for a frame without a line; a
path without ``.py`` and no line is a native frame). Stacks list frames innermost first, as
py-spy prints them. ``snap(node(...), node(...))`` assembles a snapshot; ``rank(r, s1, s2)``
makes a rank whose main thread showed stack ``s1`` in the first sample and ``s2`` in the second.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from slurmdiag.snapshot import (
    Connection,
    Frame,
    GpuState,
    Job,
    LogFinding,
    NicState,
    Node,
    Rank,
    Sample,
    Snapshot,
    StraceSummary,
    ThreadStack,
    WorkerProcess,
)

SITE = "/opt/venv/lib/python3.11/site-packages"
C10D = f"{SITE}/torch/distributed/distributed_c10d.py"
C10D_LOGGER = f"{SITE}/torch/distributed/c10d_logger.py"
DATALOADER = f"{SITE}/torch/utils/data/dataloader.py"
STDLIB = "/usr/lib/python3.11"
TRAIN = "/home/alice/proj/train.py"

Stack = tuple[Frame, ...]
#: Snapshots of real scenario jobs that `make accuracy` recorded (tests/fixtures/LOCAL_SOURCES.md).
ACCURACY = Path(__file__).resolve().parent.parent / "fixtures" / "accuracy"


def recorded(name: str) -> Snapshot:
    """The recorded snapshot tests/fixtures/accuracy/<name>.json."""
    return Snapshot.from_json((ACCURACY / f"{name}.json").read_text())


def map_rank(snapshot: Snapshot, number: int, change: Callable[[Rank], Rank]) -> Snapshot:
    """``snapshot`` with rank ``number`` replaced by ``change(rank)``."""
    return replace(snapshot, nodes=tuple(
        replace(n, ranks=tuple(change(r) if r.rank == number else r for r in n.ranks))
        for n in snapshot.nodes))


def map_every_rank(snapshot: Snapshot, change: Callable[[Rank], Rank]) -> Snapshot:
    """``snapshot`` with every rank replaced by ``change(rank)``."""
    return replace(snapshot, nodes=tuple(
        replace(n, ranks=tuple(change(r) for r in n.ranks)) for n in snapshot.nodes))


def with_traffic(**fields: object) -> Callable[[Rank], Rank]:
    """A rank change: its ``recent_traffic`` (which must be read) with ``fields`` replaced."""
    def change(rank: Rank) -> Rank:
        assert rank.recent_traffic is not None
        return replace(rank, recent_traffic=replace(rank.recent_traffic, **fields))
    return change


def frame(spec: str) -> Frame:
    function, _, location = spec.partition(" ")
    file, sep, line = location.rpartition(":")
    if not sep or not line.isdigit():
        file, line = location, ""
    native = not line and not file.endswith(".py") and not file.startswith("<")
    return Frame(function=function, file=file, line=int(line) if line else None, native=native)


def stack(*specs: str) -> Stack:
    return tuple(frame(s) for s in specs)


def user_frames(*calls: tuple[str, int], file: str = TRAIN) -> list[str]:
    """("train_step", 50), ("main", 80) -> specs in TRAIN, innermost first."""
    return [f"{fn} {file}:{line}" for fn, line in calls]


def loop(line: int = 50, fn: str = "train_step", file: str = TRAIN) -> list[str]:
    """The outer user frames every test stack shares: fn at line <- main:80 <- <module>:90."""
    return [f"{fn} {file}:{line}", f"main {file}:80", f"<module> {file}:90"]


def collective(
    op: str, user_line: int = 50, fn: str = "train_step", op_line: int = 2501, file: str = TRAIN
) -> Stack:
    """A rank waiting in torch.distributed `op`, called from `fn` at `user_line`."""
    return stack(f"{op} {C10D}:{op_line}", f"wrapper {C10D_LOGGER}:83", *loop(user_line, fn, file))


def in_user(line: int, fn: str = "train_step", file: str = TRAIN) -> Stack:
    """The innermost frame is the user's own line (computing, or in a C call from it)."""
    return stack(*loop(line, fn, file))


def spinning_in(fn: str, line: int, caller_line: int = 60) -> Stack:
    return stack(
        f"{fn} {TRAIN}:{line}",
        f"train_step {TRAIN}:{caller_line}",
        f"main {TRAIN}:80",
        f"<module> {TRAIN}:90",
    )


def dataloader_wait(user_line: int = 44) -> Stack:
    return stack(
        f"wait {STDLIB}/threading.py:320",
        f"get {STDLIB}/queue.py:171",
        f"_try_get_data {DATALOADER}:1133",
        f"_get_data {DATALOADER}:1294",
        f"_next_data {DATALOADER}:1332",
        f"__next__ {DATALOADER}:631",
        *loop(user_line),
    )


def thread(
    frames: Stack, name: str = "MainThread", active: bool = False, thread_id: int = 1,
    owns_gil: bool | None = None,
) -> ThreadStack:
    """A thread; an active one runs Python and holds the GIL unless ``owns_gil`` says not (a
    tensor kernel or a C call that released it)."""
    return ThreadStack(
        name=name, thread_id=thread_id, os_thread_id=thread_id, active=active, frames=frames,
        owns_gil=active if owns_gil is None else owns_gil,
    )


def rank(
    r: int | None,
    *samples: Stack | Sample,
    pid: int | None = None,
    state: str = "S",
    cpu: float | None = 0.0,
    active: bool = False,
    world: int | None = None,
    local_rank: int | None = None,
    env: dict[str, str] | None = None,
    wchan: str | None = None,
    extra_threads: Sequence[ThreadStack] = (),
    connections: Sequence[Connection] = (),
    workers: Sequence[WorkerProcess] = (),
    strace: StraceSummary | None = None,
    launcher: str = "srun",
) -> Rank:
    built = []
    for i, s in enumerate(samples):
        if isinstance(s, Sample):
            built.append(s)
        else:
            built.append(Sample(t=float(i), threads=(thread(s, active=active), *extra_threads)))
    return Rank(
        rank=r,
        pid=pid if pid is not None else 1000 + (r if r is not None else 900),
        local_rank=local_rank,
        world_size=world,
        launcher=launcher,
        state=state,
        cpu_percent=cpu,
        wchan=wchan,
        env=env or {},
        samples=tuple(built),
        strace=strace,
        connections=tuple(connections),
        workers=tuple(workers),
    )


def node(
    name: str,
    *ranks: Rank,
    status: str = "ok",
    message: str | None = None,
    hostname: str | None = None,
    nics: NicState | None = None,
    gpus: GpuState | None = None,
) -> Node:
    return Node(
        name=name,
        status=status,
        message=message,
        hostname=hostname or name,
        ranks=tuple(ranks),
        nics=nics,
        gpus=gpus,
    )


def snap(
    *nodes: Node,
    job_nodes: Iterable[str] | None = None,
    ntasks: int | None = None,
    log_findings: Sequence[LogFinding] = (),
) -> Snapshot:
    names = tuple(job_nodes) if job_nodes is not None else tuple(n.name for n in nodes)
    return Snapshot(
        job=Job(id="123", state="RUNNING", nodes=names, ntasks=ntasks),
        nodes=tuple(nodes),
        log_findings=tuple(log_findings),
    )


def job(
    n_nodes: int,
    per_node: int | Sequence[int],
    stacks_of: Callable[[int], Sequence[Stack]],
    *,
    world: int | None = None,
    overrides: dict[int, dict[str, object]] | None = None,
    skip: Iterable[int] = (),
) -> Snapshot:
    """A block-layout job: node i holds the next per_node ranks; stacks_of(rank) gives samples."""
    counts = [per_node] * n_nodes if isinstance(per_node, int) else list(per_node)
    total = world if world is not None else sum(counts)
    skipped = set(skip)
    nodes = []
    r = 0
    for i, count in enumerate(counts):
        ranks = []
        for local in range(count):
            if r not in skipped:
                kwargs: dict[str, object] = {"world": total, "local_rank": local}
                kwargs.update((overrides or {}).get(r, {}))
                ranks.append(rank(r, *stacks_of(r), **kwargs))  # type: ignore[arg-type]
            r += 1
        nodes.append(node(f"node{i + 1:03d}", *ranks))
    return snap(*nodes)
