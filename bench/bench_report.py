"""Benchmark the HTML report at scale: 4096 nodes x 8 ranks (32768 ranks), 8 GPUs per node.

Builds a synthetic hung job (one rank skipped an all_reduce, one node timed out, one hot GPU, a
few nodes loading data), runs the real analysis once, then times ``render_html`` alone and prints
the page size. Budget from issue 5: under 10 MB and under 5 s. A second run makes every node
distinct (each its own stack class) to show the caps hold when nothing collapses.

    .venv/bin/python bench/bench_report.py [--nodes 4096] [--ranks-per-node 8] [--out FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # support.synthetic

from support.synthetic import JobShape, rank_gated_job

from slurmdiag.analysis import analyze
from slurmdiag.analysis.model import Analysis
from slurmdiag.report.render import render_html
from slurmdiag.snapshot import Frame, Snapshot

SIZE_BUDGET = 10 * 1024 * 1024
TIME_BUDGET_S = 5.0


def build(nodes: int, ranks_per_node: int) -> Snapshot:
    return rank_gated_job(JobShape(
        nodes=nodes, ranks_per_node=ranks_per_node, gpus_per_node=8,
        culprit=(nodes // 3) * ranks_per_node + 5, infiniband=True,
        failed_nodes=(17,), hot_gpu_nodes=(nodes // 2,), moving_nodes=(100, 101, 102),
    ))


def every_node_distinct(snapshot: Snapshot) -> Snapshot:
    """Give each node's ranks their own user frame line, so no two nodes share a stack class."""
    nodes = []
    for n, node in enumerate(snapshot.nodes):
        ranks = []
        for rank in node.ranks:
            samples = tuple(
                dataclasses.replace(sample, threads=tuple(
                    dataclasses.replace(thread, frames=thread.frames[:-1] + (
                        Frame("<module>", thread.frames[-1].file, 1000 + n),))
                    if thread.frames else thread
                    for thread in sample.threads
                ))
                for sample in rank.samples
            )
            ranks.append(dataclasses.replace(rank, samples=samples))
        nodes.append(dataclasses.replace(node, ranks=tuple(ranks)))
    return dataclasses.replace(snapshot, nodes=tuple(nodes))


def measure(label: str, snapshot: Snapshot, analysis: Analysis, out: Path | None) -> bool:
    render_html(snapshot, analysis)  # warm the template cache, as a CLI run pays it once too
    started, cpu_started = time.perf_counter(), time.process_time()
    html = render_html(snapshot, analysis)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    size = len(html.encode("utf-8"))
    ok = size < SIZE_BUDGET and elapsed < TIME_BUDGET_S
    ranks = sum(len(node.ranks) for node in snapshot.nodes)
    print(f"{label}: {len(snapshot.nodes)} nodes, {ranks} ranks, {len(analysis.classes)} classes: "
          f"{size / 1e6:.2f} MB in {elapsed:.2f} s wall, {cpu:.2f} s CPU "
          f"({'ok' if ok else 'OVER BUDGET'})")
    if out is not None:
        out.write_text(html, encoding="utf-8")
        print(f"  written to {out}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4096)
    parser.add_argument("--ranks-per-node", type=int, default=8)
    parser.add_argument("--out", type=Path, help="also write the typical report here")
    args = parser.parse_args()

    started = time.perf_counter()
    snapshot = build(args.nodes, args.ranks_per_node)
    print(f"built snapshot in {time.perf_counter() - started:.1f} s")
    started = time.perf_counter()
    analysis = analyze(snapshot)
    print(f"analysis (not part of the budget) took {time.perf_counter() - started:.1f} s")
    ok = measure("typical hang", snapshot, analysis, args.out)

    distinct = every_node_distinct(snapshot)
    ok = measure("every node distinct", distinct, analyze(distinct), None) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
