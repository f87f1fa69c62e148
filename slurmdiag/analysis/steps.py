"""Which processes of the job are its ranks, and how many trainings (worlds) they form.

A batch script often starts a per-node helper beside the training: as a step of its own
(``srun --overlap --ntasks-per-node=1 python gpu_logger.py &``) or in the batch step itself
(``python monitor.py &``, or the batch script written in Python). Such a process carries its
step's SLURM_PROCID, 0, 1, ...: the training ranks' numbers. Taken for a rank, a monitor asleep
between two samples stood for rank 0 (the first process found was kept, the rank left out) and
was blamed. A rank of a distributed program shows it: a torch.distributed frame in a sample, or
the per-process variables a launcher sets (RANK, LOCAL_RANK, torchrun's run id) in its
environment, or a connection to another process of its step (``one_world``):

- when the ranks of two steps collide, a step showing none of these signs, beside one that shows
  them (or, none showing any, one with more processes), is set apart;
- a process that claims a rank held by a process showing the signs, showing none itself, is set
  apart too, in any step.

Set apart, they are kept on their nodes as other processes of the job (role ``not a rank``),
with their stacks. Left alone: steps whose ranks do not collide (a heterogeneous job's
components number their ranks on), a tie (nothing tells the claimants apart: the analysis notes
the processes claiming one rank).

Steps that each show the signs and number the same ranks are trainings of their own, and so are
the rendezvous of one step (torchrun's run id, the store's address): trainings packed in one
allocation, or ``torchrun --standalone`` on each node of a multi-node job (``worlds``). The
analysis judges each on its own ranks.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from slurmdiag.snapshot import Node, Rank, Snapshot, WorkerProcess
from slurmdiag.vocabulary import NodeStatus

NOT_A_RANK = "not a rank"
# Set for each process by the launchers that build a torch.distributed world (torchrun, the
# hand-rolled ones), never by srun alone. Not MASTER_ADDR, MASTER_PORT or WORLD_SIZE: a batch
# script exports those at its top, for every step it starts, its monitor's too
# (node_monitor_exported_env).
RANK_ENV = ("RANK", "LOCAL_RANK", "TORCHELASTIC_RUN_ID")


def _distributed(rank: Rank, node: Node | None = None,
                 peers: frozenset[str] = frozenset()) -> bool:
    """The process shows it is a rank of a distributed program: a torch.distributed frame in
    any sample (any thread), a variable its launcher set for it alone (RANK_ENV), or an open
    connection to another process of its step (``peers``: their local endpoints; a gloo mesh,
    the store), which a rank between two collectives still holds."""
    if any(name in rank.env for name in RANK_ENV):
        return True
    if node is not None and peers:
        own = {_endpoint(node, c.local) for c in rank.connections}
        for c in rank.connections:
            if c.state == "ESTABLISHED":
                far = _endpoint(node, c.remote)
                if far in peers and far not in own:
                    return True
    return any("/torch/distributed/" in frame.file
               for sample in rank.samples for thread in sample.threads for frame in thread.frames)


_LOOPBACK = ("127.", "[::1]", "localhost", "[::ffff:127.")


def _endpoint(node: Node, address: str) -> str:
    """An endpoint as one node sees it: a loopback address is that node's own."""
    return f"{node.name}/{address}" if address.startswith(_LOOPBACK) else address


def _endpoints(nodes: tuple[Node, ...]) -> dict[str | None, frozenset[str]]:
    """Per step, the local endpoints of its processes' connections."""
    found: dict[str | None, set[str]] = defaultdict(set)
    for node in nodes:
        for rank in node.ranks:
            found[rank.step_id].update(_endpoint(node, c.local) for c in rank.connections)
    return {step: frozenset(ends) for step, ends in found.items()}


def ranks_step(nodes: tuple[Node, ...]) -> tuple[str | None, tuple[str, ...]]:
    """(the step that holds the job's ranks, the steps whose processes are none of them), or
    (None, ()) when every step's ranks are its own or nothing tells the steps apart."""
    claims: dict[str, set[int]] = defaultdict(set)
    count: dict[str, int] = defaultdict(int)
    for node in nodes:
        for rank in node.ranks:
            if rank.rank is not None and rank.step_id is not None:
                claims[rank.step_id].add(rank.rank)
                count[rank.step_id] += 1
    if len(claims) < 2:
        return None, ()
    evidence: dict[str, int] = defaultdict(int)
    peers = _endpoints(nodes)
    for node in nodes:
        for rank in node.ranks:
            if rank.rank is not None and rank.step_id is not None:
                evidence[rank.step_id] += _distributed(rank, node, peers[rank.step_id])
    order = sorted(claims, key=lambda s: (evidence[s], count[s]), reverse=True)
    best = order[0]
    # A step that shows a rank's signs is never set apart (two trainings in one job are two
    # worlds); one that shows none is, beside a step that shows some or has more processes.
    others = tuple(
        s for s in order[1:]
        if claims[s] & claims[best] and not evidence[s]
        and (evidence[best] or count[best] > count[s])
    )
    return (best, others) if others else (None, ())


def _impostors(nodes: tuple[Node, ...], apart: set[tuple[str, int]]) -> set[tuple[str, int]]:
    """(node, pid) of processes that claim a rank another process holds, the other showing a rank's
    signs and they none (a monitor the batch script started beside torchrun's workers: the
    batch step's SLURM_PROCID, 0, in the ranks' own step)."""
    claims: dict[int, list[tuple[Node, Rank]]] = defaultdict(list)
    for node in nodes:
        for rank in node.ranks:
            if rank.rank is not None and (node.name, rank.pid) not in apart:
                claims[rank.rank].append((node, rank))
    found: set[tuple[str, int]] = set()
    collisions = [members for members in claims.values() if len(members) > 1]
    peers = _endpoints(nodes) if collisions else {}
    for members in collisions:
        signs = [_distributed(r, n, peers[r.step_id]) for n, r in members]
        if any(signs):
            found |= {(n.name, r.pid) for (n, r), sign in zip(members, signs) if not sign}
    return found


def _as_other(rank: Rank) -> WorkerProcess:
    return WorkerProcess(pid=rank.pid, role=NOT_A_RANK, state=rank.state,
                         cpu_percent=rank.cpu_percent, cmdline=rank.cmdline,
                         samples=rank.samples, step_id=rank.step_id)


def one_world(snapshot: Snapshot) -> Snapshot:
    """The snapshot with the processes that are no ranks of the job (a colliding step's that
    shows no rank's signs, and any process claiming a rank held by one that does) moved to
    their nodes' other processes, their workers with them; unchanged when there are none."""
    _, others = ranks_step(snapshot.nodes)
    # (node, pid): pids repeat across nodes
    apart = {(n.name, r.pid) for n in snapshot.nodes for r in n.ranks
             if r.step_id in others and r.rank is not None}
    apart |= _impostors(snapshot.nodes, apart)
    if not apart:
        return snapshot
    nodes = []
    for node in snapshot.nodes:
        moved = [r for r in node.ranks if (node.name, r.pid) in apart]
        if not moved:
            nodes.append(node)
            continue
        kept = tuple(r for r in node.ranks if (node.name, r.pid) not in apart)
        extra = [p for r in moved for p in (_as_other(r), *r.workers)]
        nodes.append(replace(node, ranks=kept, other_processes=(*node.other_processes, *extra)))
    return replace(snapshot, nodes=tuple(nodes))


def set_apart_note(snapshot: Snapshot) -> str | None:
    """What the analysis says of the processes set apart by one_world."""
    found = [p for node in snapshot.nodes for p in node.other_processes if p.role == NOT_A_RANK]
    if not found:
        return None
    steps = sorted({p.step_id or "?" for p in found})
    programs = sorted({program_of(p.cmdline) for p in found})
    return (f"{len(found)} process(es) of the job claimed ranks and showed none of a "
            f"torch.distributed rank's signs beside processes that do (step(s) "
            f"{', '.join(steps)}: {', '.join(programs)}): not taken for ranks (listed with the "
            "nodes' other processes)")


def program_of(cmdline: tuple[str, ...]) -> str:
    """The script or module a command line runs, else its command."""
    args = list(cmdline)
    for i, arg in enumerate(args[1:], 1):
        if arg == "-m" and i + 1 < len(args):
            return args[i + 1]
        if not arg.startswith("-"):
            return arg.rsplit("/", 1)[-1]
    return args[0].rsplit("/", 1)[-1] if args else "?"


def _world_key(rank: Rank) -> tuple[str, str | None]:
    """(step, the rendezvous its launcher made): torchrun's run id, else the store's address;
    None when the environment names neither (srun's ranks: the step is the world)."""
    run = rank.env.get("TORCHELASTIC_RUN_ID")
    if not run and rank.env.get("MASTER_ADDR") and rank.env.get("MASTER_PORT"):
        run = f"{rank.env['MASTER_ADDR']}:{rank.env['MASTER_PORT']}"
    return (rank.step_id or "?", run or None)


def worlds(snapshot: Snapshot) -> tuple[tuple[str, Snapshot], ...]:
    """The job's trainings judged apart: (a label, the snapshot of that world's ranks) for each
    world whose processes show a rank's signs, when two or more number the same ranks. A world
    is a step, or within a step a rendezvous of its own (torchrun's run id, the store's
    address): trainings packed in one allocation, a sweep's shape (`srun -n2 python a.py &
    srun -n2 python b.py &`), or `torchrun --standalone` on each node of a multi-node job (a
    world a node). Each holds the nodes with ranks of its world, and the nodes that failed to
    report. Empty when the job holds one world (or its worlds number their ranks on)."""
    claims: dict[tuple[str, str | None], set[int]] = defaultdict(set)
    hosts: dict[tuple[str, str | None], list[str]] = defaultdict(list)
    for node in snapshot.nodes:
        for rank in node.ranks:
            if rank.rank is not None and rank.step_id is not None:
                key = _world_key(rank)
                claims[key].add(rank.rank)
                if node.name not in hosts[key]:
                    hosts[key].append(node.name)
    if len(claims) < 2:
        return ()
    signs: dict[tuple[str, str | None], bool] = defaultdict(bool)
    peers = _endpoints(snapshot.nodes)
    for node in snapshot.nodes:
        for rank in node.ranks:
            if rank.rank is not None and rank.step_id is not None:
                key = _world_key(rank)
                signs[key] = signs[key] or _distributed(rank, node, peers[rank.step_id])
    keys = sorted((k for k in claims if signs[k]), key=lambda k: (_step_order(k[0]), hosts[k]))
    # (by place: a key's rendezvous may be None, which no string orders against)
    if len(keys) < 2 or not any(claims[a] & claims[b] for i, a in enumerate(keys)
                                for b in keys[i + 1:]):
        return ()
    out = []
    for key in keys:
        shared = sum(1 for k in keys if k[0] == key[0]) > 1
        label = f"step {key[0]}" + (f" on {', '.join(hosts[key])}" if shared else "")
        nodes = tuple(
            replace(node, ranks=tuple(r for r in node.ranks if _world_key(r) == key))
            for node in snapshot.nodes
            if any(_world_key(r) == key for r in node.ranks) or node.status != NodeStatus.OK
        )
        job = replace(snapshot.job, nodes=tuple(n.name for n in nodes))
        out.append((label, replace(snapshot, job=job, nodes=nodes)))
    return tuple(out)


def _step_order(step: str) -> tuple[int, str]:
    return (int(step), "") if step.isdigit() else (1 << 30, step)
