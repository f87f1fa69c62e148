"""Benchmark: diagnose a synthetic 4096-node x 8-rank snapshot built from real py-spy stacks.

Plain script, not a test:

    python bench/bench_analysis.py                  # 4096 x 8 ranks, 3 samples, shared frames
    python bench/bench_analysis.py --frames copies  # every rank its own Frame objects
    python bench/bench_analysis.py --culprit straggler --nodes 512

Stacks are the real Megatron-DeepSpeed dumps in tests/fixtures/py_spy (bigscience tr11) plus the
locally recorded py-spy 0.4 JSON. Every rank waits in the all_reduce of the tr11 eval hang; one
rank (the culprit) waits in the broadcast (``--culprit mismatch``) or sits in the DataLoader
(``--culprit straggler``). Each sample also carries two other threads (a heartbeat and a
pin-memory thread) so that picking the main thread costs what it costs on real dumps.

``--frames shared`` builds each distinct frame once, as a snapshot loader that interns frames
would; ``--frames copies`` gives every rank fresh Frame objects and tuples, as a plain
``Snapshot.from_json`` does. Prints build time, diagnose time, peak RSS (getrusage) and the
verdict, and exits non-zero when the verdict misses the culprit or the diagnosis is over budget
(issue 4: under 3 s of wall time and 1 GB of peak RSS).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Issue 4's budget for the diagnosis of a 4096 x 8 snapshot on this 2-core machine.
DIAGNOSE_BUDGET_S = 3.0
RSS_BUDGET_MIB = 1024
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # support.pyspy_text: the public text dumps

from support.pyspy_text import parse_pyspy_text

from slurmdiag.analysis import diagnose
from slurmdiag.parsers.pyspy import parse_pyspy_json
from slurmdiag.snapshot import Frame, Job, Node, Rank, Sample, Snapshot, ThreadStack

PY_SPY = ROOT / "tests" / "fixtures" / "py_spy"


def _main_stack(name: str) -> tuple[Frame, ...]:
    dumps = parse_pyspy_text((PY_SPY / name).read_text())
    return next(t.frames for d in dumps for t in d.threads if t.name == "MainThread")


def _real_stacks() -> dict[str, tuple[Frame, ...]]:
    threads = parse_pyspy_json((PY_SPY / "local_pyspy0.4_json_blocked.json").read_text())
    heartbeat = next(t.frames for t in threads if t.name == "heartbeat")
    return {
        "all_reduce": _main_stack("bigscience_tr11_node49_4procs_all_reduce_aggregated.txt"),
        "broadcast": _main_stack("bigscience_tr11_node48_4procs_broadcast_aggregated.txt"),
        "dataloader": _main_stack("bigscience_tr11_node48_dataloader_idle.txt"),
        "heartbeat": heartbeat,
        "pin_memory": heartbeat[1:],
    }


def _copy(frames: tuple[Frame, ...]) -> tuple[Frame, ...]:
    # new objects *and* new strings, as json.loads would produce them
    return tuple(
        Frame(
            function="".join(f.function),
            file="".join([f.file[:1], f.file[1:]]),
            line=f.line,
            module=f.module,
            native=f.native,
        )
        for f in frames
    )


def build(
    nodes: int, per_node: int, samples: int, culprit: int, kind: str, copies: bool
) -> Snapshot:
    stacks = _real_stacks()
    odd = stacks["broadcast" if kind == "mismatch" else "dataloader"]
    world = nodes * per_node
    node_list = []
    r = 0
    for n in range(nodes):
        ranks = []
        for local in range(per_node):
            main = odd if r == culprit else stacks["all_reduce"]
            others = (stacks["heartbeat"], stacks["pin_memory"])
            if copies:
                main = _copy(main)
                others = (_copy(others[0]), _copy(others[1]))
            threads = (
                ThreadStack("MainThread", 1, 100 + r, active=r != culprit, frames=main),
                ThreadStack("heartbeat", 2, 200 + r, active=False, frames=others[0]),
                ThreadStack("pin_memory", 3, 300 + r, active=False, frames=others[1]),
            )
            ranks.append(
                Rank(
                    rank=r,
                    pid=10_000 + r,
                    local_rank=local,
                    world_size=world,
                    launcher="srun",
                    state="S",
                    cpu_percent=0.0,
                    samples=tuple(Sample(t=0.5 * k, threads=threads) for k in range(samples)),
                )
            )
            r += 1
        node_list.append(Node(name=f"node{n:04d}", status="ok", ranks=tuple(ranks)))
    return Snapshot(
        job=Job(id="1", state="RUNNING", nodes=tuple(n.name for n in node_list), ntasks=world),
        nodes=tuple(node_list),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", type=int, default=4096)
    parser.add_argument("--ranks-per-node", type=int, default=8)
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--culprit", choices=("mismatch", "straggler"), default="mismatch")
    parser.add_argument("--frames", choices=("shared", "copies"), default="shared")
    args = parser.parse_args(argv)

    world = args.nodes * args.ranks_per_node
    culprit = world * 3 // 7  # somewhere in the middle, not rank 0
    t0 = time.perf_counter()
    snapshot = build(
        args.nodes,
        args.ranks_per_node,
        args.samples,
        culprit,
        args.culprit,
        args.frames == "copies",
    )
    t1 = time.perf_counter()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cpu0 = time.process_time()
    analysis = diagnose(snapshot)
    t2 = time.perf_counter()
    cpu = time.process_time() - cpu0
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    top = analysis.verdicts[0]
    print(
        f"snapshot: {args.nodes} nodes x {args.ranks_per_node} ranks = {world} ranks, "
        f"{args.samples} samples, frames {args.frames}, culprit {culprit} ({args.culprit})"
    )
    print(f"build:    {t1 - t0:.2f} s (peak RSS after build {rss_before / 1024:.0f} MiB)")
    print(f"diagnose: {t2 - t1:.2f} s wall, {cpu:.2f} s CPU")
    print(f"peak RSS: {peak_kb / 1024:.0f} MiB")
    print(f"verdict:  {top.severity} {top.kind} ranks {top.culprit_ranks} sites {top.sites}")
    print(
        f"classes:  {len(analysis.classes)}, distinct stacks merged into a tree of "
        f"{len(analysis.tree.children) if analysis.tree else 0} root(s)"
    )
    expected = "mismatched_collective" if args.culprit == "mismatch" else "straggler"
    if top.kind != expected or top.culprit_ranks != (culprit,):
        print("FAIL: the verdict does not name the culprit", file=sys.stderr)
        return 1
    over = [f"diagnose {t2 - t1:.2f} s above {DIAGNOSE_BUDGET_S} s"] * (t2 - t1 > DIAGNOSE_BUDGET_S)
    over += [f"peak RSS {peak_kb / 1024:.0f} MiB above {RSS_BUDGET_MIB} MiB"] * (
        peak_kb / 1024 > RSS_BUDGET_MIB)
    print("budget:   " + ("; ".join(over) if over else "met"))
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
