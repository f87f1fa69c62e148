"""``slurmdiag doctor [JOBID | --nodes LIST]``: everything that can be checked before the night.

On the controller: the Slurm client and its version, ``squeue --json``, the watchdog's config and
its state and report directories. On the nodes, through ONE step (into the job with ``--overlap
--gres=gpu:0``, or a one-minute allocation of ``--nodes``), the checks of
slurmdiag/collector/doctor_node.py, shipped with the collector's own loader (no install on the
nodes); a heterogeneous job named by its plain id, a step a component, at once. One line per
check: ok / warning / failed, with the fix. Exit code: the worst of them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from slurmdiag.errors import ConfigError, SlurmdiagError, UsageError
from slurmdiag.transport.run import CommandResult, run_command

# Exit codes of doctor (README's table): the worst check decides.
EXIT_OK, EXIT_WARNING, EXIT_FAILED = 0, 1, 12
STATUSES = ("ok", "warning", "failed")
STEP_NAME = "slurmdiag-doctor"
MIN_OVERLAP_VERSION = (20, 11)  # srun --overlap
MIN_JSON_VERSION = (21, 8)  # squeue --json


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | warning | failed
    detail: str
    fix: str = ""
    where: str = "controller"  # or a node list (node[001-004])

    def line(self) -> str:
        fix = f"; fix: {self.fix}" if self.fix and self.status != "ok" else ""
        return f"{self.status:<8}{self.where}: {self.name}: {self.detail}{fix}"


def worst_exit(checks: Sequence[Check]) -> int:
    statuses = {c.status for c in checks}
    if "failed" in statuses:
        return EXIT_FAILED
    return EXIT_WARNING if "warning" in statuses else EXIT_OK


# --------------------------------------------------------------------------------------------
# Controller
# --------------------------------------------------------------------------------------------

Runner = Callable[..., CommandResult]


def slurm_client_checks(runner: Runner = run_command) -> list[Check]:
    from slurmdiag.slurm.discover import (
        NO_CONFIG_HINT,
        check_slurm_conf,
        parse_slurm_version,
        slurm_fatal,
    )

    version_run = runner(["scontrol", "--version"], 20.0)
    if version_run.start_error is not None:
        return [Check("slurm client", "failed", f"cannot run scontrol: {version_run.start_error}",
                      "install the Slurm client tools (slurm-client) or put them on PATH")]
    text = version_run.stdout.strip()
    version = parse_slurm_version(text)
    checks = []
    if version is None:
        checks.append(Check("slurm client", "warning", f"unreadable version {text!r}"))
    elif version < MIN_OVERLAP_VERSION:
        checks.append(Check("slurm client", "failed", f"{text}: srun has no --overlap before 20.11",
                            "use --transport ssh, or upgrade Slurm"))
    else:
        checks.append(Check("slurm client", "ok", text))
    try:
        check_slurm_conf()
    except SlurmdiagError as exc:
        return checks + [Check("slurm config", "failed", exc.message, exc.hint)]
    squeue = runner(["squeue", "--json", "--me"], 30.0)
    if squeue.ok:
        try:
            count = len(json.loads(squeue.stdout).get("jobs", []))
        except (ValueError, AttributeError):
            checks.append(Check("squeue --json", "warning", "output is not JSON",
                                "the watchdog falls back to squeue's text format"))
        else:
            checks.append(Check("squeue --json", "ok", f"answers ({count} job(s) of yours)"))
        return checks
    fatal = slurm_fatal(squeue.stderr)
    if fatal is not None:
        checks.append(Check("slurm config", "failed", fatal.message, fatal.hint or NO_CONFIG_HINT))
    elif version is not None and version < MIN_JSON_VERSION:
        checks.append(Check("squeue --json", "warning", f"not in Slurm {text}",
                            "nothing to do: the watchdog uses squeue's text format"))
    else:
        last = (squeue.stderr.strip().splitlines() or ["(no output)"])[-1]
        checks.append(Check("squeue --json", "warning", last[:200],
                            "the watchdog falls back to squeue's text format"))
    return checks


def _can_create_in(directory: Path) -> str | None:
    """None when this user can create a file in ``directory`` (tried for real), else why not."""
    import tempfile

    try:
        with tempfile.TemporaryFile(dir=directory, prefix=".slurmdiag-doctor."):
            return None
    except OSError as exc:
        return exc.strerror or type(exc).__name__


def directory_check(name: str, path: Path) -> Check:
    """A directory the watchdog writes: writable, or creatable below its nearest existing parent.

    Writability is tried (a temporary file, removed at once): root passes every access() test,
    and read-only mounts, ACLs and quotas are only seen by trying."""
    fix = "give it to the watchdog's user (chown/chmod), or set another path in the config"
    if path.is_dir():
        why = _can_create_in(path)
        if why is None:
            return Check(name, "ok", f"{path} writable")
        return Check(name, "failed", f"{path} is not writable for this user ({why})", fix)
    parent = path
    while not parent.is_dir() and parent != parent.parent:
        parent = parent.parent
    why = _can_create_in(parent)
    if why is None:
        return Check(name, "ok", f"{path} does not exist yet; {parent} lets the watchdog create it")
    return Check(name, "failed",
                 f"{path} does not exist and cannot be created in {parent} ({why})",
                 f"mkdir -p {path} and {fix}")


def watch_checks(config: str | None, overrides: dict[str, Any] | None = None) -> list[Check]:
    from slurmdiag.config import find_config_path, load_settings

    source = find_config_path(config)
    try:
        settings = load_settings(config, overrides=overrides or {})
    except ConfigError as exc:
        first = exc.message.replace("\n", " ")
        return [Check("watch config", "failed", " ".join(first.split())[:300],
                      f"slurmdiag config check {source or ''}".strip())]
    checks = []
    where = str(source) if source else "built-in defaults (no config file)"
    if settings.warnings:
        checks.append(Check("watch config", "warning", f"{where}: {settings.warnings[0]}",
                            f"slurmdiag config check {source or ''}".strip()))
    else:
        checks.append(Check("watch config", "ok", where))
    watch = settings.watch
    checks.append(directory_check("report dir", watch.report_dir))
    state_dirs = dict.fromkeys([watch.state_db.parent, watch.heartbeat_file.parent])
    for directory in state_dirs:
        checks.append(directory_check("state dir", directory))
    if settings.notify.kind is None:
        checks.append(Check("notify", "ok", "no webhook configured (alerts are not posted)"))
    else:
        checks.append(Check("notify", "ok", f"{settings.notify.kind} webhook configured "
                            "(post a test with: slurmdiag watch --test-notify)"))
    return checks


# --------------------------------------------------------------------------------------------
# Nodes: one step
# --------------------------------------------------------------------------------------------


def node_program() -> tuple[str, str]:
    """(hash, compressed bundle) of the node checks, as collector_payload() for the collector."""
    from slurmdiag.transport.collect import program_payload

    return program_payload(
        resources.files("slurmdiag.collector").joinpath("doctor_node.py").read_text())


def node_check_command(args: dict[str, Any], node_python: str | None) -> list[str]:
    """The collector's loader and interpreter choice, carrying the check program (no cache)."""
    from slurmdiag.transport.collect import (
        COLLECTOR_LOADER,
        SYSTEM_PYTHON,
        _node_script,
        preferred_node_python,
    )

    digest, source = node_program()
    rest = ["", digest, source, json.dumps(args)]
    if node_python:
        return [node_python, "-I", "-S", "-c", COLLECTOR_LOADER, "", *rest]
    return ["/bin/sh", "-c", _node_script(SYSTEM_PYTHON), STEP_NAME, preferred_node_python(),
            COLLECTOR_LOADER, *rest]


def doctor_srun_argv(
    command: list[str],
    nodes: Sequence[str],
    *,
    job_id: str | None,
    het_group: tuple[str, int] | None = None,
    wait_s: int = 10,
) -> list[str]:
    """Into the job (the collector's own step options), or a one-minute allocation of the nodes."""
    from slurmdiag.options import DEFAULTS
    from slurmdiag.transport.srun import srun_argv

    argv = srun_argv(job_id or "0", nodes, DEFAULTS, het_group, command=command,
                     step_name=STEP_NAME)
    if job_id is None:
        argv.remove("--jobid=0")
        argv[1:1] = ["--time=1", f"--immediate={wait_s}"]
    return argv


def node_checks_from_output(
    nodes: Sequence[str], result: CommandResult, argv: Sequence[str]
) -> list[Check]:
    """One Check per (check, status, detail), its nodes compressed; a silent node is a failure."""
    return node_checks_from_steps([(nodes, result, argv)])


def node_checks_from_steps(
    steps: Sequence[tuple[Sequence[str], CommandResult, Sequence[str]]],
) -> list[Check]:
    """``node_checks_from_output`` over several steps (a heterogeneous job's components, a step
    each): the nodes' lines grouped over all of them, a silent step's nodes failed with its own
    reason."""
    from slurmdiag.hostlist import compress_hostlist
    from slurmdiag.transport.framing import decode_frames

    documents: dict[str, Any] = {}
    for nodes, result, _ in steps:
        got = decode_frames(result.stdout).documents
        documents.update((n, got[n]) for n in nodes if n in got)
    everyone = [n for nodes, _, _ in steps for n in nodes]
    groups: dict[tuple[str, str, str, str], list[str]] = {}
    for node in everyone:
        for item in documents.get(node, {}).get("checks", []):
            key = (str(item.get("name")), str(item.get("status")), str(item.get("detail")),
                   str(item.get("fix") or ""))
            groups.setdefault(key, []).append(node)
    checks = [Check(k[0], k[1], k[2], k[3], compress_hostlist(where)) for k, where in groups.items()]
    step = "step with --overlap --gres=gpu:0" if any("--overlap" in a for _, _, a in steps) else "step"
    answered = [n for n in everyone if n in documents]
    failures = [_silent_step(step, silent, result) for silent, result in
                (([n for n in nodes if n not in documents], result) for nodes, result, _ in steps)
                if silent]
    if answered:
        failures.insert(0, Check("srun", "ok", f"{step} ran on {len(answered)}/{len(everyone)} "
                                 "node(s)", where=compress_hostlist(answered)))
    return failures + checks


def _silent_step(step: str, silent: Sequence[str], result: CommandResult) -> Check:
    from slurmdiag.hostlist import compress_hostlist

    stderr = [ln.strip() for ln in result.stderr.splitlines() if ln.strip()]
    if result.start_error:
        why = f"srun could not start: {result.start_error}"
    elif result.timed_out:
        why = "no answer before the deadline"
    else:
        why = stderr[-1][:300] if stderr else f"srun exit {result.returncode}, no output"
    hint = "see the line above; '--transport ssh' avoids creating a step"
    if any("python" in ln.lower() for ln in stderr):
        hint = "install python3 (3.8+) on the nodes, or name one with --node-python"
    return Check("srun", "failed", f"{step} gave nothing: {why}", hint,
                 where=compress_hostlist(silent))


def node_checks(
    *,
    job: str | None,
    nodes_list: str | None,
    pyspy_path: str | None,
    nvidia_smi_path: str | None,
    node_python: str | None,
    node_cache: str | None,
    timeout_s: float,
    runner: Runner = run_command,
) -> list[Check]:
    from slurmdiag.hostlist import expand_hostlist
    from slurmdiag.options import DEFAULTS
    from slurmdiag.slurm.discover import (
        check_caller_may_attach,
        discover_components,
        job_ref_from_user,
    )
    from slurmdiag.transport.collect import default_tool_paths, srun_environment

    # A step a component for a heterogeneous job named by its plain id, as attach does (srun
    # adds a step to one component at a time, through the leader's id and --het-group).
    targets: list[tuple[list[str], str | None, tuple[str, int] | None]] = []
    if job is not None:
        ref = job_ref_from_user(job)
        try:
            components = discover_components(ref, runner)
            check_caller_may_attach(components[0], ref, runner)
        except UsageError:
            raise
        except SlurmdiagError as exc:
            return [Check(f"job {job}", "failed", exc.message, exc.hint)]
        targets += [(list(found.nodes), found.job_id, found.het_group) for found in components]
    else:
        assert nodes_list is not None
        try:
            nodes = expand_hostlist(nodes_list)
        except ValueError as exc:
            raise UsageError(f"--nodes {nodes_list!r}: {exc}", hint="e.g. --nodes node[001-004]")
        targets.append((nodes, None, None))
    args = {
        "pyspy": [pyspy_path] if pyspy_path else list(default_tool_paths("py-spy")),
        "pyspy_explicit": bool(pyspy_path),
        "strace": list(default_tool_paths("strace")),
        "nvidia_smi": [nvidia_smi_path] if nvidia_smi_path else [],
        "cache": DEFAULTS.node_cache if node_cache is None else node_cache,
    }
    command = node_check_command(args, node_python)
    env = srun_environment(os.environ)

    def step(target: tuple[list[str], str | None, tuple[str, int] | None]) -> tuple[
            list[str], CommandResult, list[str]]:
        nodes, job_id, het_group = target
        argv = doctor_srun_argv(command, nodes, job_id=job_id, het_group=het_group,
                                wait_s=max(1, int(timeout_s / 2)))
        return nodes, runner(argv, timeout_s, env=env), argv

    with ThreadPoolExecutor(max_workers=len(targets)) as pool:  # a het job's components at once
        return node_checks_from_steps(list(pool.map(step, targets)))


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------

DOCTOR_EPILOG = """\
examples:
  slurmdiag doctor 123456                  controller checks, then one step into job 123456
  slurmdiag doctor --nodes node[001-004]   a one-minute allocation of those nodes for the checks

exit codes: 0 every check ok, 1 warnings only, 12 at least one check failed,
2 usage error. Each line: ok|warning|failed, where (controller or nodes), the check, the fix."""


def add_doctor_arguments(subparsers: Any) -> argparse.ArgumentParser:
    doctor = subparsers.add_parser(
        "doctor",
        help="check that attach and watch will work here: Slurm, nodes, tools, directories",
        description="Check the controller, and through ONE step the nodes, for what attach and "
        "the watchdog need; one line per check with its fix.",
        epilog=DOCTOR_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    doctor.add_argument("job_id", nargs="?", help="a running job of yours to step into (--overlap)")
    doctor.add_argument("--nodes", metavar="LIST",
                        help="check these nodes through a one-minute allocation instead of a job")
    doctor.add_argument("--py-spy", dest="pyspy_path", help="py-spy path on the nodes "
                        "(default: the controller's venv, then PATH)")
    doctor.add_argument("--nvidia-smi", dest="nvidia_smi_path", help="nvidia-smi on the nodes")
    doctor.add_argument("--node-python", help="python on the nodes (default as for attach)")
    doctor.add_argument("--node-cache", metavar="DIR", help="node cache directory "
                        "(default /dev/shm)")
    doctor.add_argument("--config", metavar="FILE", help="watchdog config to check "
                        "(default: $SLURMDIAG_CONFIG, else /etc/slurmdiag/config.toml)")
    doctor.add_argument("--report-dir", metavar="DIR", help="overrides watch.report_dir")
    from slurmdiag.cli import _seconds

    doctor.add_argument("--timeout", type=_seconds, default=60.0, metavar="SECONDS",
                        help="deadline of the node step, in seconds (or 2m)")
    doctor.add_argument("--json", action="store_true", help="print the checks as JSON on stdout")
    doctor.set_defaults(handler=run_doctor_command)
    return doctor


def run_doctor_command(args: argparse.Namespace) -> int:
    if args.job_id and args.nodes:
        raise UsageError("give a JOBID or --nodes, not both")
    checks = slurm_client_checks()
    checks += watch_checks(args.config, {"watch.report_dir": args.report_dir})
    slurm_ok = not any(c.status == "failed" and c.name.startswith("slurm") for c in checks)
    if args.job_id or args.nodes:
        if slurm_ok:
            checks += node_checks(
                job=args.job_id, nodes_list=args.nodes, pyspy_path=args.pyspy_path,
                nvidia_smi_path=args.nvidia_smi_path, node_python=args.node_python,
                node_cache=args.node_cache, timeout_s=args.timeout,
            )
        else:
            checks.append(Check("nodes", "failed", "not checked: Slurm does not answer here",
                                "fix the Slurm lines above first"))
    else:
        checks.append(Check("nodes", "warning", "not checked: no JOBID or --nodes given",
                            "slurmdiag doctor JOBID (a running job of yours) or --nodes LIST"))
    if args.json:
        data = [c.__dict__ for c in checks]
        sys.stdout.write(json.dumps({"checks": data, "exit": worst_exit(checks)}, indent=1) + "\n")
    else:
        sys.stdout.write("".join(c.line() + "\n" for c in checks))
    return worst_exit(checks)
