"""How often slurmdiag's verdict is right: every scenario, end to end, against its ground truth.

    make accuracy          # = python tests/accuracy.py --out docs/accuracy.md
    python tests/accuracy.py --only fifo_open p2p_deadlock --out /tmp/acc.md

Each scenario job (tests/scenarios/<name>.json) is submitted on the current Slurm cluster
(SLURM_CONF; `make accuracy` starts the local one), waited until every rank is in its hang,
then the real CLI attaches twice: `slurmdiag attach JOB --json --no-report` with the
defaults and again with `--samples 1`. The first hang verdict (severity critical or
warning) is compared with the truth: kind, culprit ranks (as a set), and site (the
culprit's `path:line`, or `path:function` for a rank whose line moves). A scenario without
a hang (`progressing`) is right when no hang verdict comes out; any hang verdict there is a
false alarm. Jobs run in batches of at most --max-ranks ranks (a gloo rank takes ~210 MB).
The snapshots are kept in --keep (artifacts/accuracy by default) for a second look, with the
CLI's stderr (srun's and attach's warnings) as NAME.MODE.stderr.

With `--shape NODESxTASKS` (e.g. 4x2) every scenario runs at that shape instead of its own
(its program reads the world from the environment), and a hang's culprits are the ranks that
reported themselves culprit or dead when ready (the truth's ranks are written for its own
shape); scenarios that cannot run at the shape fail as not judged.

The comparison functions are pure and unit-tested on saved snapshots
(tests/unit/test_accuracy_comparison.py); tests/cluster/test_accuracy.py runs a few scenarios through
the same code.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

from scenarios.launch import (  # tests/ on sys.path first, as conftest does
    REPO_ROOT,
    ScenarioError,
    ScenarioRun,
    load_truth,
    scenario_names,
    submit,
)

HANG_SEVERITIES = ("critical", "warning")
#: The two ways the accuracy table attaches: the defaults, and one sample per rank.
MODES: dict[str, list[str]] = {"default": [], "samples1": ["--samples", "1"]}
MAX_RANKS = 20
READY_TIMEOUT = 240.0
ATTACH_TIMEOUT = 180.0


# ---------------------------------------------------------------- comparison (pure)

@dataclass(frozen=True)
class Produced:
    """What slurmdiag said: its first hang verdict, or its top verdict when none is a hang."""

    kind: str | None
    severity: str | None
    culprit_ranks: tuple[int, ...]
    sites: tuple[str, ...]
    summary: str

    @property
    def is_hang(self) -> bool:
        return self.severity in HANG_SEVERITIES


@dataclass(frozen=True)
class Comparison:
    name: str
    mode: str
    expected_kind: str
    produced: Produced
    kind_right: bool
    culprits_right: bool
    site_right: bool
    false_alarm: bool
    mentions_missing: tuple[str, ...] = ()
    error: str | None = None

    @property
    def right(self) -> bool:
        return (self.error is None and self.kind_right and self.culprits_right
                and self.site_right and not self.false_alarm and not self.mentions_missing)


def produced_verdict(snapshot: Mapping[str, Any]) -> Produced:
    verdicts = list(snapshot.get("verdicts") or [])
    hangs = [v for v in verdicts if v.get("severity") in HANG_SEVERITIES]
    chosen = hangs[0] if hangs else (verdicts[0] if verdicts else None)
    if chosen is None:
        return Produced(None, None, (), (), "")
    return Produced(
        kind=chosen.get("kind"),
        severity=chosen.get("severity"),
        culprit_ranks=tuple(int(r) for r in chosen.get("culprit_ranks") or ()),
        sites=tuple(chosen.get("sites") or ()),
        summary=str(chosen.get("summary") or ""),
    )


def _same_path(produced: str, expected: str) -> bool:
    """A produced frame path (absolute, on the node) names the truth's repo-relative path,
    itself or through a link (`installed_package` links the package into a site-packages)."""
    return any(path == expected or path.endswith("/" + expected)
               for path in (produced, os.path.realpath(produced)))


def site_matches(site: str, truth: Mapping[str, Any]) -> bool:
    """Does one produced site ('path:line' or 'path:function') point at the truth's culprit?"""
    path, _, where = site.rpartition(":")
    if truth.get("culprit_site"):
        expected_path, _, line = truth["culprit_site"].rpartition(":")
        return _same_path(path, expected_path) and where == line
    if truth.get("culprit_function"):
        expected_path, _, function = truth["culprit_function"].rpartition(":")
        # Python 3.11 qualifies names (Prefetcher.next_batch)
        return _same_path(path, expected_path) and (
            where == function or where.endswith("." + function))
    return False


def compare(truth: Mapping[str, Any], snapshot: Mapping[str, Any], mode: str = "default",
            ) -> Comparison:
    produced = produced_verdict(snapshot)
    name = str(truth["name"])
    if truth["expected_kind"] == "progressing":
        quiet = not produced.is_hang
        return Comparison(name, mode, "progressing", produced, kind_right=quiet,
                          culprits_right=quiet, site_right=quiet, false_alarm=not quiet)
    text = " ".join([produced.summary, *(str(e) for v in snapshot.get("verdicts") or []
                                         if v.get("severity") in HANG_SEVERITIES
                                         for e in v.get("evidence") or ())])
    missing = tuple(m for m in truth.get("verdict_mentions", ()) if m not in text)
    # a job that started no rank (no_ranks): its culprits are nodes (indices in the job's node
    # list), named in the summary
    job_nodes = (snapshot.get("job") or {}).get("nodes") or []
    culprit_nodes = [job_nodes[i] if i < len(job_nodes) else f"node index {i}"
                     for i in truth.get("culprit_nodes", ())]
    return Comparison(
        name, mode, str(truth["expected_kind"]), produced,
        kind_right=produced.is_hang and produced.kind == truth["expected_kind"],
        culprits_right=produced.is_hang and set(produced.culprit_ranks) == set(
            truth["culprit_ranks"]) and all(n in produced.summary for n in culprit_nodes),
        site_right=produced.is_hang and any(site_matches(s, truth) for s in produced.sites),
        false_alarm=False,
        mentions_missing=missing,
    )


def failed(truth: Mapping[str, Any], mode: str, error: str) -> Comparison:
    """A scenario that could not be judged (no job, no snapshot): counted as wrong."""
    return Comparison(str(truth["name"]), mode, str(truth["expected_kind"]),
                      Produced(None, None, (), (), ""), kind_right=False, culprits_right=False,
                      site_right=False, false_alarm=False, error=error)


Shape = tuple[int, int]  # (nodes, tasks a node)


def shaped_truth(name: str, shape: Shape | None) -> dict[str, Any]:
    """The truth of ``name``, at ``shape`` when one is given."""
    truth = load_truth(name)
    if shape is None:
        return truth
    nodes, per_node = shape
    return dict(truth, nodes=nodes, ntasks_per_node=per_node, world_size=nodes * per_node)


def parse_shape(text: str) -> Shape:
    """ "4x2" -> (4, 2)."""
    nodes, sep, per_node = text.lower().partition("x")
    if not sep or not nodes.isdigit() or not per_node.isdigit() or 0 in (int(nodes),
                                                                          int(per_node)):
        raise argparse.ArgumentTypeError(f"{text!r} is not NODESxTASKS (e.g. 4x2)")
    return int(nodes), int(per_node)


def culprits_by_role(truth: Mapping[str, Any], ready: Mapping[int, Mapping[str, Any]],
                     ) -> dict[str, Any]:
    """``truth`` with the culprits the ranks reported (role culprit or dead) when a hang's."""
    if truth["expected_kind"] == "progressing":
        return dict(truth)
    return dict(truth, culprit_ranks=sorted(
        r for r, record in ready.items() if record.get("role") in ("culprit", "dead")))


def batches(names: Sequence[str], max_ranks: int, shape: Shape | None = None,
            ) -> list[list[str]]:
    """Pack scenarios into batches of at most max_ranks ranks, in the given order."""
    out: list[list[str]] = []
    current: list[str] = []
    used = 0
    for name in names:
        size = int(shaped_truth(name, shape)["world_size"])
        if current and used + size > max_ranks:
            out.append(current)
            current, used = [], 0
        current.append(name)
        used += size
    if current:
        out.append(current)
    return out


# ---------------------------------------------------------------- the table (pure)

def _repo_relative(site: str) -> str:
    root = str(REPO_ROOT) + "/"
    if site.startswith(root):
        return site[len(root):]
    marker = "/site-packages/"
    return "…/" + site.split(marker, 1)[1] if marker in site else site


def _ranks(ranks: Iterable[int]) -> str:
    ranks = list(ranks)
    return ",".join(str(r) for r in ranks) if ranks else "-"


def _mark(ok: bool) -> str:
    return "yes" if ok else "**no**"


@dataclass
class Totals:
    hang_runs: int = 0
    culprits_right: int = 0
    site_right: int = 0
    kind_right: int = 0
    all_right: int = 0
    quiet_runs: int = 0
    false_alarms: int = 0
    errors: int = 0
    scenarios_right: set[str] = field(default_factory=set)


def totals(results: Sequence[Comparison], mode: str) -> Totals:
    t = Totals()
    for r in results:
        if r.mode != mode:
            continue
        t.errors += r.error is not None
        if r.expected_kind == "progressing":
            t.quiet_runs += 1
            t.false_alarms += r.false_alarm
        else:
            t.hang_runs += 1
            t.culprits_right += r.culprits_right
            t.site_right += r.site_right
            t.kind_right += r.kind_right
        t.all_right += r.right
    return t


def render_markdown(results: Sequence[Comparison], *, when: str, version: str,
                    commit: str, minutes: float | None = None,
                    shape: Shape | None = None, threads: str | None = None) -> str:
    by_name: dict[str, dict[str, Comparison]] = {}
    for r in results:
        by_name.setdefault(r.name, {})[r.mode] = r
    lines = [
        "# Accuracy of slurmdiag's verdicts on the scenario corpus",
        "",
        f"Measured {when} with slurmdiag {version} (commit {commit}) by "
        + (f"`tests/accuracy.py{f' --shape {shape[0]}x{shape[1]}' if shape else ''}"
           f"{f' --threads {threads}' if threads else ''}`" if shape or threads else "`make accuracy`")
        + (f" in {minutes:.0f} min" if minutes is not None else "")
        + (f", every scenario at {shape[0]} nodes x {shape[1]} tasks (a hang's culprits are "
           "the ranks that reported themselves culprit or dead)" if shape else ""),
        "(tests/accuracy.py) on the local 4-node Slurm cluster: each scenario of",
        "tests/scenarios/ (real gloo jobs, ground truth in `<name>.json`) is submitted, waited",
        "until every rank is in its hang, and attached with the real CLI",
        "(`slurmdiag attach JOB --json --no-report`), once with the defaults and once with",
        "`--samples 1`. The first hang verdict (critical or warning) is compared with the",
        "truth: kind, culprit ranks (as a set), site (the culprit's `file:line`, or",
        "`file:function` for a rank whose line moves). A scenario without a hang is right when",
        "no hang verdict comes out; a hang verdict there is a false alarm.",
        "",
        "## Totals",
        "",
        "| | default | `--samples 1` |",
        "|---|---|---|",
    ]
    t = {mode: totals(results, mode) for mode in MODES}
    rows = [
        ("culprit ranks right (hang scenarios)", lambda x: f"{x.culprits_right}/{x.hang_runs}"),
        ("site right (hang scenarios)", lambda x: f"{x.site_right}/{x.hang_runs}"),
        ("kind right (hang scenarios)", lambda x: f"{x.kind_right}/{x.hang_runs}"),
        ("false alarms (no-hang scenarios)", lambda x: f"{x.false_alarms}/{x.quiet_runs}"),
        ("all right (every scenario)", lambda x: f"{x.all_right}/{x.hang_runs + x.quiet_runs}"),
        ("not judged (job or attach failed)", lambda x: str(x.errors)),
    ]
    for label, fmt in rows:
        lines.append(f"| {label} | {fmt(t['default'])} | {fmt(t['samples1'])} |")
    lines += [
        "",
        "## Per scenario",
        "",
        "Expected: kind, culprit ranks, site. Produced: the first hang verdict's kind,",
        "culprit ranks and first site (`-`: no hang verdict), then whether culprits and site",
        "are right.",
        "",
        "| scenario | expected | mode | produced kind | culprits | site | culprits right | site right |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in sorted(by_name):
        for mode in MODES:
            r = by_name[name].get(mode)
            if r is None:
                continue
            truth = load_truth(name)
            expected = (f"{truth['expected_kind']}, {_ranks(truth['culprit_ranks'])}, "
                        f"`{truth.get('culprit_site') or truth.get('culprit_function') or '-'}`")
            p = r.produced
            if r.error:
                produced = f"error: {r.error[:80]}", "-", "-"
            else:
                shown = p.kind if p.is_hang else f"{p.kind or 'none'} ({p.severity or '-'})"
                site = f"`{_repo_relative(p.sites[0])}`" if p.is_hang and p.sites else "-"
                produced = (str(shown), _ranks(p.culprit_ranks) if p.is_hang else "-", site)
            if r.expected_kind == "progressing":
                judged = ("-", _mark(not r.false_alarm) + " (no alarm)")
            else:
                judged = (_mark(r.culprits_right), _mark(r.site_right))
            extra = f" (missing: {', '.join(r.mentions_missing)})" if r.mentions_missing else ""
            lines.append(f"| `{name}` | {expected if mode == 'default' else ''} | {mode} | "
                         f"{produced[0]}{extra} | {produced[1]} | {produced[2]} | "
                         f"{judged[0]} | {judged[1]} |")
    wrong = [r for r in results if not r.right]
    if wrong:
        lines += ["", "## What slurmdiag said when it was wrong", ""]
        for r in sorted(wrong, key=lambda r: (r.name, r.mode)):
            said = (r.error or r.produced.summary or "(no verdict)").replace(
                str(REPO_ROOT) + "/", "")
            lines.append(f"- `{r.name}` ({r.mode}): {said[:400]}")
    lines += ["", "What really happens in each scenario (measured) is in the `notes` of its",
              "tests/scenarios/<name>.json; tests/scenarios/README.md has the table."]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- running (real cluster)

def attach_cli(job_id: str, extra: Sequence[str], out_dir: Path, *, python: str | None = None,
               timeout: float = ATTACH_TIMEOUT) -> dict[str, Any]:
    """Run the real `slurmdiag attach JOB --json --no-report --out DIR [extra]`; its snapshot.

    (Without --out, attach writes a slurmdiag-JOB-TIME/ directory in the working directory.)
    """
    argv = [python or sys.executable, "-m", "slurmdiag.cli", "attach", job_id, "--json",
            "--no-report", "--out", str(out_dir), *extra]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT,
                          env={**os.environ, "NO_COLOR": "1"}, check=False)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "attach.stderr").write_text(done.stderr)  # srun's and attach's warnings
    if done.returncode != 0:
        raise ScenarioError(f"{' '.join(argv[2:])}: exit {done.returncode}: "
                            f"{done.stderr.strip()[-300:]}")
    return dict(json.loads(done.stdout))


def judge(run: ScenarioRun, keep: Path | None) -> list[Comparison]:
    """Attach to one ready scenario job in every mode and compare."""
    results = []
    for mode, extra in MODES.items():
        out_dir = run.state_dir / f"attach-{mode}"
        try:
            snapshot = attach_cli(run.job_id, extra, out_dir)
        except (ScenarioError, subprocess.TimeoutExpired, ValueError) as error:
            results.append(failed(run.truth, mode, str(error)))
            continue
        finally:
            if keep is not None and (out_dir / "attach.stderr").exists():
                (keep / f"{run.name}.{mode}.stderr").write_text(
                    (out_dir / "attach.stderr").read_text())
        if keep is not None:
            (keep / f"{run.name}.{mode}.json").write_text(json.dumps(snapshot, indent=1))
        results.append(compare(run.truth, snapshot, mode))
    return results


def _wait_gone(runs: Iterable[ScenarioRun], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    pending = list(runs)
    while pending and time.monotonic() < deadline:
        pending = [r for r in pending if r.job_state() in {"RUNNING", "COMPLETING", "PENDING"}]
        if pending:
            time.sleep(1)


def _log(message: str) -> None:
    print(message, flush=True)


def run_batch(names: Sequence[str], state_root: Path, keep: Path | None,
              log: Any = _log, shape: Shape | None = None) -> list[Comparison]:
    runs: list[ScenarioRun] = []
    results: list[Comparison] = []
    try:
        for name in names:
            # a state folder of an earlier run (job ids start again with a new cluster) holds
            # that run's products: a cache_lock_barrier found its cache already built and ended
            shutil.rmtree(state_root / name, ignore_errors=True)
            try:
                runs.append(submit(name, state_root / name, truth=shaped_truth(name, shape)))
            except ScenarioError as error:
                results += [failed(load_truth(name), m, str(error)) for m in MODES]
        for run in runs:
            try:
                run.wait_ready(READY_TIMEOUT)
            except ScenarioError as error:
                log(f"  {run.name}: not ready: {str(error).splitlines()[0]}")
                results += [failed(run.truth, m, str(error).splitlines()[0]) for m in MODES]
                continue
            if shape is not None:
                run.truth = culprits_by_role(run.truth, run.ready)
            if run.truth["expected_kind"] == "progressing":
                time.sleep(5)  # a few steps in, so a slow step is really in the samples
            judged = judge(run, keep)
            for r in judged:
                # not judged: say why here too (a stale or pending job looked like wrong verdicts)
                what = (f"not judged: {r.error.splitlines()[0][-200:]}" if r.error else
                        f"{r.produced.kind} {list(r.produced.culprit_ranks)} "
                        f"{[_repo_relative(s) for s in r.produced.sites[:2]]}")
                log(f"  {r.name} [{r.mode}]: {'right' if r.right else 'WRONG'}: {what}")
            results += judged
    finally:
        for run in runs:
            run.cancel()
        _wait_gone(runs)
    return results


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], capture_output=True, text=True, cwd=REPO_ROOT,
                          check=False)
    return done.stdout.strip()


def _git_commit() -> str:
    """The checkout, and the commit that last changed the package (what is measured)."""
    package = _git("log", "-1", "--format=%h", "--", "slurmdiag") or "?"
    if _git("status", "--porcelain", "--", "slurmdiag"):
        package += " plus uncommitted changes"
    return f"{_git('describe', '--always', '--dirty') or '?'}; slurmdiag/ as of {package}"


def on_this_cluster() -> list[str]:
    """The scenarios the local cluster can run: not those whose truth asks for another
    ("cluster": "netns", a fault injected on one node's network, checked by their own tests),
    nor those whose launcher is not installed ("requires": Open MPI's mpirun, not among the
    packages `make setup` installs)."""
    return [name for name in scenario_names() if not load_truth(name).get("cluster")
            and all(shutil.which(tool) for tool in load_truth(name).get("requires", ()))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "accuracy.md")
    parser.add_argument("--only", nargs="+", choices=on_this_cluster(), metavar="NAME")
    parser.add_argument("--max-ranks", type=int, default=MAX_RANKS)
    parser.add_argument("--state", type=Path, default=Path("/tmp/slurmdiag-accuracy"))
    parser.add_argument("--keep", type=Path, default=REPO_ROOT / "artifacts" / "accuracy")
    parser.add_argument("--shape", type=parse_shape, metavar="NODESxTASKS",
                        help="run every scenario at this shape (e.g. 4x2), not its own")
    parser.add_argument("--threads", metavar="N|default",
                        help="each rank's OMP_NUM_THREADS (1 unless given; default: torch's own "
                             "count, as plain srun leaves it)")
    args = parser.parse_args(argv)
    if args.threads:
        os.environ["SLURMDIAG_SCENARIO_THREADS"] = args.threads
    if not os.environ.get("SLURM_CONF"):
        print("error: SLURM_CONF is not set\nhint: `make accuracy` starts the local cluster and "
              "sets it; by hand: eval \"$(deploy/local-cluster/cluster env)\"", file=sys.stderr)
        return 2
    names = args.only or on_this_cluster()
    args.keep.mkdir(parents=True, exist_ok=True)
    results: list[Comparison] = []
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    began = time.monotonic()
    for number, batch in enumerate(batches(names, args.max_ranks, args.shape), start=1):
        print(f"batch {number}: {', '.join(batch)}", flush=True)
        results += run_batch(batch, args.state / f"batch{number}", args.keep, shape=args.shape)
    from slurmdiag import __version__

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render_markdown(results, when=started, version=__version__,
                                        shape=args.shape, threads=args.threads,
                                        commit=_git_commit(),
                                        minutes=(time.monotonic() - began) / 60))
    t = totals(results, "default")
    print(f"{args.out}: default: culprits {t.culprits_right}/{t.hang_runs}, site "
          f"{t.site_right}/{t.hang_runs}, false alarms {t.false_alarms}/{t.quiet_runs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
