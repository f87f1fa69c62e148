"""Benchmark: attach on a 32-node, 64-rank hung job vs the manual procedure vs this machine's floor.

All figures come from one run, side by side (median of --repeat runs, alternating):
  floor    `srun --overlap true` over the 32 nodes, plus py-spy dumps of all 64 ranks at full
           parallelism from the controller (both, back to back)
  manual   the reference procedure: ONE srun over the nodes, each node dumping its ranks one
           after another with py-spy (`scontrol listpids | xargs py-spy dump`)
  python3 + py-spy, pids given
           not a procedure: each node's /usr/bin/python3 handed its ranks' pids (listed
           beforehand) and only running py-spy on them, the least any Python collector costs
  attach   slurmdiag's collection with 1 sample and no strace (discovery, fan-out, decode,
           assembly), through the Python API, with the nodes' compiled-collector cache warm
           (as from the second attach on) and turned off; and the CLI end to end (interpreter
           start, analysis, report) for reference

It starts its own 32-node cluster in a separate state directory and ports, so it never restarts
the test cluster. The hung job is 64 ranks blocked in a pipe read (2 per node): a stand-in for a
torch job (64 torch ranks would need ~13 GB and minutes to start on 2 cores); py-spy's cost per
rank does not depend on what the rank is blocked in.

    .venv/bin/python bench/bench_attach.py [--repeat 5] [--keep-cluster]

Exits 1 when the budget is missed: attach / floor above 1.5, or attach slower than the manual
procedure (the 95% bootstrap interval of the median of the alternating pairs' ratios above 1).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

NODES = 32
RANKS_PER_NODE = 2
HANG_PROGRAM = """
import os, sys
def wait_for_data(fd):
    return os.read(fd, 1)          # blocks forever: nobody writes
open(os.path.join(sys.argv[1], f"rank{os.environ['SLURM_PROCID']}.pid"), "w").write(str(os.getpid()))
r, w = os.pipe()
wait_for_data(r)
"""


def sh(argv, env, timeout=120, check=True):
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=check)


def busy_cpu_s() -> float:
    """CPU-seconds this machine has spent outside idle/iowait (all processes, all cores)."""
    with open("/proc/stat") as handle:
        fields = [int(x) for x in handle.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def timed(fn, cpu: list[float] | None = None):
    """Wall seconds of fn(); the machine's CPU-seconds meanwhile are appended to ``cpu``."""
    busy = busy_cpu_s()
    start = time.perf_counter()
    fn()
    wall = time.perf_counter() - start
    if cpu is not None:
        cpu.append(busy_cpu_s() - busy)
    return wall


def median_interval(values: list[float], rounds: int = 4000) -> tuple[float, float]:
    """A 95% bootstrap interval of the median of ``values`` (seeded: the same run, the same
    interval)."""
    draw = random.Random(3)
    medians = sorted(statistics.median(draw.choices(values, k=len(values))) for _ in range(rounds))
    return medians[int(rounds * 0.025)], medians[int(rounds * 0.975) - 1]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep-cluster", action="store_true")
    args = parser.parse_args()

    cluster_dir = Path(os.environ.get("SLURMDIAG_BENCH_CLUSTER_DIR", "/tmp/slurmdiag-bench-cluster"))
    # Its own name and job ids too: the test cluster may run on this host at the same time.
    env = dict(os.environ, SLURMDIAG_CLUSTER_DIR=str(cluster_dir), SLURMDIAG_CTLD_PORT="6917",
               SLURMDIAG_SLURMD_PORT="18001", SLURMDIAG_CLUSTER_NAME="slurmdiag-bench",
               SLURMDIAG_FIRST_JOB_ID="500000", SLURM_CONF=str(cluster_dir / "slurm.conf"))
    for key in [k for k in env if k.startswith("SLURM_") and k != "SLURM_CONF"]:
        del env[key]
    cluster = str(REPO / "deploy/local-cluster/cluster")
    sh([cluster, "up", "--nodes", str(NODES)], env, timeout=300)
    os.environ.update(SLURM_CONF=env["SLURM_CONF"])
    work = Path(tempfile.mkdtemp(prefix="slurmdiag-bench-"))
    (work / "hang.py").write_text(HANG_PROGRAM)
    py_spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or "py-spy"
    job = sh(["sbatch", "--parsable", f"-N{NODES}", f"--ntasks-per-node={RANKS_PER_NODE}",
              "--time=20", f"-o{work}/job.out",
              f"--wrap=srun {sys.executable} -I -S {work}/hang.py {work}"], env).stdout.strip()
    try:
        deadline = time.monotonic() + 120
        while len(list(work.glob("rank*.pid"))) < NODES * RANKS_PER_NODE:
            if time.monotonic() > deadline:
                raise SystemExit(f"ranks not ready: {(work / 'job.out').read_text()[-2000:]}")
            time.sleep(0.5)
        time.sleep(1)
        pids = [int(p.read_text()) for p in work.glob("rank*.pid")]
        nodes = sh(["scontrol", "show", "hostnames",
                    sh(["squeue", "-h", "-j", job, "-o", "%N"], env).stdout.strip()], env).stdout.split()

        srun_base = ["srun", f"--jobid={job}", "--overlap", "--gres=gpu:0", f"--nodes={NODES}",
                     "--ntasks-per-node=1"]

        def floor_srun():
            sh([*srun_base, "true"], env)

        def floor_pyspy():
            with ThreadPoolExecutor(max_workers=len(pids)) as pool:
                list(pool.map(lambda p: sh([py_spy, "dump", "--pid", str(p)], env), pids))

        manual_script = (
            "scontrol listpids $SLURM_JOB_ID $SLURMD_NODENAME | awk '$3==\"0\"{print $1}' "
            f"| xargs -I {{}} {py_spy} dump --pid {{}}"
        )

        def manual():
            out = sh([*srun_base, "sh", "-c", manual_script], env).stdout
            assert out.count("wait_for_data") == len(pids), "manual procedure missed ranks"

        # The least any Python collector can cost: the node's python3 handed its ranks' pids
        # (found beforehand, outside the timing), doing nothing but running py-spy on them.
        # Not a procedure anyone can use; it shows what the interpreter's start-up alone costs.
        listed = sh([*srun_base, "sh", "-c", ("echo $SLURMD_NODENAME $(scontrol listpids "
                     "$SLURM_JOB_ID $SLURMD_NODENAME | awk '$3==\"0\"{print $1}')")], env).stdout
        # "node001:pid,pid node002:pid,pid ...": no json import on the nodes
        node_pids = " ".join(f"{line.split()[0]}:{','.join(line.split()[1:])}"
                             for line in listed.splitlines() if line.split())
        python_floor_program = (
            "import os,sys\n"
            "t=dict(x.split(':') for x in sys.argv[2].split())[os.environ['SLURMD_NODENAME']]\n"
            "k=[os.posix_spawn(sys.argv[1],[sys.argv[1],'dump','--pid',p],{}) for p in t.split(',')]\n"
            "[os.waitpid(c,0) for c in k]"
        )

        def python_floor():
            out = sh([*srun_base, "/usr/bin/python3", "-I", "-S", "-c", python_floor_program, py_spy,
                      node_pids], env).stdout
            assert out.count("wait_for_data") == len(pids), "python floor missed ranks"

        from slurmdiag.api import collect_snapshot

        collector_cpu: list[float] = []

        def attach_api(node_cache=None):
            snapshot, _ = collect_snapshot(job, samples=1, strace_s=0, node_cache=node_cache)
            if node_cache is None:
                collector_cpu.extend(n.collector_cpu_s for n in snapshot.nodes if n.collector_cpu_s)
            found = [r for _, r in snapshot.all_ranks() if r.samples and r.samples[0].threads]
            assert len(found) == len(pids), f"attach found {len(found)} of {len(pids)} ranks"

        # As installed: modules load from their byte-code (a sandbox may set
        # PYTHONDONTWRITEBYTECODE, which recompiles every module in every process).
        cli_env = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}

        def attach_cli():
            sh([sys.executable, "-m", "slurmdiag.cli", "attach", job, "--samples", "1",
                "--strace", "0", "--out", str(work / "out")], cli_env)

        names = ("floor: srun true", "floor: py-spy x64 parallel", "floor (sum)", "manual procedure",
                 "python3 + py-spy, pids given", "attach (API, 1 sample)", "attach (API, no node cache)", "attach (CLI end to end)")
        figures: dict[str, list[float]] = {k: [] for k in names}
        cpu: dict[str, list[float]] = {k: [] for k in names}
        attach_api()  # warm caches once (imports, first step, the nodes' compiled collector)
        attach_cli()  # and the CLI's (byte-code, the report's compiled template)
        for _ in range(args.repeat):
            a = timed(floor_srun, cpu["floor: srun true"])
            b = timed(floor_pyspy, cpu["floor: py-spy x64 parallel"])
            figures["floor: srun true"].append(a)
            figures["floor: py-spy x64 parallel"].append(b)
            figures["floor (sum)"].append(a + b)
            cpu["floor (sum)"].append(cpu["floor: srun true"][-1] + cpu["floor: py-spy x64 parallel"][-1])
            figures["manual procedure"].append(timed(manual, cpu["manual procedure"]))
            figures["python3 + py-spy, pids given"].append(
                timed(python_floor, cpu["python3 + py-spy, pids given"]))
            figures["attach (API, 1 sample)"].append(timed(attach_api, cpu["attach (API, 1 sample)"]))
            figures["attach (API, no node cache)"].append(
                timed(lambda: attach_api(node_cache=""), cpu["attach (API, no node cache)"]))
            figures["attach (CLI end to end)"].append(timed(attach_cli, cpu["attach (CLI end to end)"]))
        med = {k: statistics.median(v) for k, v in figures.items()}
        print(f"{NODES} nodes, {len(pids)} ranks, {len(nodes)} nodes in the job, "
              f"median of {args.repeat} (s; CPU-s = the whole machine's busy CPU meanwhile):")
        for key, values in figures.items():
            print(f"  {key:28s} {med[key]:6.2f}   (min {min(values):.2f}, max {max(values):.2f})"
                  f"   CPU-s {statistics.median(cpu[key]):5.2f}")
        print(f"  attach: each node's collector CPU (interpreter start-up included, py-spy not): "
              f"median {statistics.median(collector_cpu) * 1000:.1f} ms over {len(collector_cpu)} nodes")
        # Alternating runs share the machine's load of the moment: the ratio within each pair
        # says more than the ratio of two medians when other tenants come and go.
        pairs = [a / m for a, m in zip(figures["attach (API, 1 sample)"], figures["manual procedure"])]
        low, high = median_interval(pairs)
        print(f"  attach / manual, run by run: median {statistics.median(pairs):.2f} "
              f"(95% interval {low:.2f}-{high:.2f}), attach faster in "
              f"{sum(r < 1 for r in pairs)} of {len(pairs)} runs "
              f"(ratios {', '.join(f'{r:.2f}' for r in sorted(pairs))})")
        ratio = med["attach (API, 1 sample)"] / med["floor (sum)"]
        print(f"  attach / floor = {ratio:.2f}   attach / manual = "
              f"{med['attach (API, 1 sample)'] / med['manual procedure']:.2f}   "
              "python3 + py-spy (pids given) / manual = "
              f"{med['python3 + py-spy, pids given'] / med['manual procedure']:.2f}   "
              f"CLI / manual = {med['attach (CLI end to end)'] / med['manual procedure']:.2f}")
        # The budget of issue 3: within 1.5x of the floor, no slower than the manual procedure.
        # "Slower" needs evidence: the whole 95% interval of the run-by-run median above 1.0 (a
        # run of 15 pairs cannot tell apart differences of a few percent on a shared machine).
        over = [what for what, bad in (("attach / floor above 1.5", ratio > 1.5),
                                       ("attach slower than the manual procedure, run by run",
                                        low > 1.0)) if bad]
        print("  budget: " + ("; ".join(over) if over else "met"))
        return 1 if over else 0
    finally:
        sh(["scancel", job], env, check=False)
        if not args.keep_cluster:
            sh([cluster, "down"], env, check=False)


if __name__ == "__main__":
    sys.exit(main())
