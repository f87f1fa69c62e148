"""Fan the node collector out to a job's nodes and bring back one raw document per node.

Two transports share this module's contract (``Fanout``): ONE srun step into the job (Slurm's own
tree does the fan-out at scale) and ssh (paramiko) as the fallback. Both return a ``FanoutResult``
in which a node that did not answer is a status with a reason, never an exception.
"""

from __future__ import annotations

import binascii
import functools
import hashlib
import json
import marshal
import os
import re
import shutil
import signal
import sys
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from slurmdiag.transport.framing import answered_node, decode_frames
from slurmdiag.transport.run import CommandResult, run_command

STEP_NAME = "slurmdiag-collect"
# Where nodes keep the compiled collector (see COLLECTOR_LOADER): node-local memory.
DEFAULT_NODE_CACHE = "/dev/shm"


@dataclass(frozen=True)
class CollectOptions:
    samples: int = 3
    interval_s: float = 1.0
    strace_s: float = 2.0
    native: bool = False
    timeout_s: float = 30.0
    concurrency: int = 8
    node_python: str | None = None  # None: the controller's interpreter if the node has it
    pyspy_paths: tuple[str, ...] = ()
    strace_paths: tuple[str, ...] = ()
    nvidia_smi_paths: tuple[str, ...] = ()
    flight_recorder: bool = False
    node_cache: str = DEFAULT_NODE_CACHE  # "": compile on every attach


@dataclass
class NodeOutcome:
    """What came back from one node: a document, or a status and the reason there is none."""

    name: str
    status: str  # ok | timeout | error | unreachable
    document: dict[str, Any] | None = None
    message: str | None = None


@dataclass
class FanoutResult:
    nodes: dict[str, NodeOutcome] = field(default_factory=dict)
    duration_s: float = 0.0
    transport: str = "srun"
    warnings: list[str] = field(default_factory=list)
    interrupted: bool = False  # Ctrl-C/SIGTERM: what the nodes sent until then


# A node program as the loader receives it: (package, ((module, source), ...)), the modules in
# the order they import each other and the program, run as the package's __main__, last.
Bundle = tuple[str, tuple[tuple[str, str], ...]]
COLLECTOR_PACKAGE = "slurmdiag.collector"
_SIBLING_IMPORT = re.compile(r"^from \.(\w+) import ", re.MULTILINE)


@functools.lru_cache(maxsize=4)
def package_bundle(package: str = COLLECTOR_PACKAGE) -> Bundle:
    """The modules of ``package`` its ``__main__`` needs, each after the siblings it imports.

    A module imports its siblings as ``from .name import ...`` (tests/unit/test_collector_package.py
    walks every import of the package): they are found here with a regular expression.
    """
    folder = resources.files(package)
    sources: dict[str, str] = {}
    order: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in path:
            raise ValueError(f"{package}: circular import {' -> '.join((*path, name))}")
        if name in sources:
            return
        text = folder.joinpath(f"{name}.py").read_text()
        sources[name] = text
        for sibling in _SIBLING_IMPORT.findall(text):
            visit(sibling, (*path, name))
        order.append(name)

    visit("__main__", ())
    return package, tuple((name, sources[name]) for name in order)


@functools.lru_cache(maxsize=1)
def collector_bundle() -> Bundle:
    """The node collector: the package slurmdiag.collector, stdlib only, shipped with the command."""
    return package_bundle(COLLECTOR_PACKAGE)


def loader_text(source: str) -> str:
    """loader.py's code without its docstring, comments, blank lines and most of its
    indentation: every node decodes its argv at start-up, and the loader travels in it."""
    body = source.split('"""', 2)[2] if source.startswith('"""') else source
    lines = [line for line in body.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    # One space a level instead of four (the file has no multi-line strings to disturb).
    return "".join(
        " " * (depth // 4 + depth % 4) + line.lstrip(" ") + "\n"
        for line in lines
        for depth in [len(line) - len(line.lstrip(" "))]
    )


# The node command's -c program (see slurmdiag/collector/loader.py for its arguments and cache).
# Only the compressed source travels (~30 KB): marshalled code would be twice that. Through srun
# the bundle travels in the environment (PAYLOAD_ENV; the argument is "-"): Python decodes every
# byte of its argv at start-up (~1.5 ms a node for 30 KB) but keeps the environment as bytes,
# read only when the cache misses.
@functools.lru_cache(maxsize=4)
def _collector_file(name: str) -> str:
    return resources.files(COLLECTOR_PACKAGE).joinpath(name).read_text()


COLLECTOR_LOADER = loader_text(_collector_file("loader.py"))


PAYLOAD_ENV = "SLURMDIAG_COLLECTOR_SOURCE"


@functools.lru_cache(maxsize=4)
def program_payload(program: str | Bundle) -> tuple[str, str]:
    """(hash of a node program's sources, the bundle compressed, as base64 text).

    ``program``: a bundle (package_bundle), or the source of a single-file program (run as
    ``__main__``, outside any package).
    """
    package, modules = ("", (("__main__", program),)) if isinstance(program, str) else program
    own = _collector_file("bundle.py")  # compiles, keeps and installs the modules on the node
    digest = hashlib.sha256(
        "\0".join([package, *(part for module in modules for part in module), own]).encode()
    ).hexdigest()[:20]
    data = marshal.dumps((package, modules, own), 4)  # version 4: what Python 3.4+ reads
    # Level 6: 0.6% larger than 9 and three times faster (~3 ms, paid before srun starts).
    return digest, binascii.b2a_base64(zlib.compress(data, 6), newline=False).decode()


def collector_payload() -> tuple[str, str]:
    """(hash of the collector's sources, its compressed bundle as base64 text)."""
    return program_payload(collector_bundle())


def default_tool_paths(name: str) -> tuple[str, ...]:
    """Where the controller sees a tool: its own venv (often on a shared file system), then PATH."""
    candidates = [str(Path(sys.prefix) / "bin" / name)]
    found = shutil.which(name)
    if found:
        candidates.append(found)
    return tuple(dict.fromkeys(candidates))


def collector_args(job_id: str, options: CollectOptions, node: str | None = None) -> dict[str, Any]:
    # The collector must finish before the controller's deadline, leaving time for the
    # transport to start it and to carry its output back.
    margin = min(5.0, max(1.5, options.timeout_s * 0.2))
    args: dict[str, Any] = {
        "job_id": job_id,
        "samples": options.samples,
        "interval": options.interval_s,
        "native": options.native,
        "strace_s": options.strace_s,
        "deadline_s": max(2.0, options.timeout_s - margin),
        "concurrency": options.concurrency,
        "pyspy": list(options.pyspy_paths or default_tool_paths("py-spy")),
        "strace": list(options.strace_paths or default_tool_paths("strace")),
        "nvidia_smi": list(options.nvidia_smi_paths),
        "flight_recorder": options.flight_recorder,
        "fr_wait_s": min(10.0, max(1.0, options.timeout_s * 0.4)),
    }
    if node is not None:
        args["node"] = node
    return args


def preferred_node_python() -> str:
    """The controller's own base interpreter, resolved (no venv, no pyenv/conda shim)."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    return os.path.realpath(base)


SYSTEM_PYTHON = "/usr/bin/python3"


def _node_script(system_python: str) -> str:
    """The portable form's shell: $1 the controller's interpreter, $2 the loader, then the
    loader's arguments after the first. The system Python if the node has one, exec'd (no shell
    left behind), with the other interpreter as the loader's fallback."""
    return (
        'p=$1; l=$2; shift 2; [ -x "$p" ] || p=python3; '
        f'[ -x {system_python} ] && exec {system_python} -I -S -c "$l" "$p" "$@"; '
        'exec "$p" -I -S -c "$l" "" "$@"'
    )


def node_command(
    job_id: str,
    options: CollectOptions,
    node: str | None = None,
    *,
    portable: bool = True,
    source_in_env: bool = False,
    program: tuple[tuple[str, str], dict[str, Any]] | None = None,
) -> list[str]:
    """The argv each node runs: the interpreter choice, the loader, the payload, the args.

    Unless ``options.node_python`` names one, a node runs the collector with its system Python,
    /usr/bin/python3, when that is 3.8 or later: it is on the node's own disk and starts fastest
    (no shared libpython; select, zlib and binascii built in), 1-4 ms of CPU a node less than
    a pyenv build. Else with the controller's own interpreter, resolved (a pyenv or conda shim
    would cost a shell and ~30 programs a node), else with python3 on the node's PATH.

    ``portable``: a shell picks the interpreter on the node. Otherwise the system Python is
    run directly, one program less a node; a node without it fails to start the step's task,
    and fan_out_srun runs the portable form there. ``source_in_env``: the compressed source is
    left to the environment (``PAYLOAD_ENV``, see node_environment). ``program``: another
    node program to run the same way instead of the collector, ((hash, payload), its args).
    """
    (digest, source), args = program or (collector_payload(), collector_args(job_id, options, node))
    rest = [options.node_cache, digest, "-" if source_in_env else source, json.dumps(args)]
    if options.node_python:
        return [options.node_python, "-I", "-S", "-c", COLLECTOR_LOADER, "", *rest]
    if not portable:
        return [SYSTEM_PYTHON, "-I", "-S", "-c", COLLECTOR_LOADER, preferred_node_python(), *rest]
    return ["/bin/sh", "-c", _node_script(SYSTEM_PYTHON), "slurmdiag-collector",
            preferred_node_python(), COLLECTOR_LOADER, *rest]


def node_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The step's environment: srun's (see srun_environment) and the collector's source."""
    return {**srun_environment(environ), PAYLOAD_ENV: collector_payload()[1]}


def srun_argv(
    job_id: str,
    nodes: Sequence[str],
    options: CollectOptions,
    het_group: tuple[str, int] | None = None,
    portable: bool = True,
    *,
    command: Sequence[str] | None = None,
    step_name: str = STEP_NAME,
) -> list[str]:
    """ONE step over every node, one collector task per node, without taking the job's GPUs.

    ``command`` replaces the collector's node command (``slurmdiag doctor`` ships its checks so).

    ``het_group``: (leader job id, offset) of a heterogeneous job's component. srun only takes
    the leader's id (``--jobid=123+1`` is refused, the component's own id is "not heterogeneous
    job leader"), and ``--het-group`` picks the component; the collector still looks for the
    component's own id, which its slurmstepd processes carry.
    """
    target = (
        [f"--jobid={het_group[0]}", f"--het-group={het_group[1]}"]
        if het_group is not None
        else [f"--jobid={job_id}"]
    )
    return [
        "srun",
        *target,
        "--overlap",
        "--gres=gpu:0",
        f"--nodes={len(nodes)}",
        f"--ntasks={len(nodes)}",
        "--ntasks-per-node=1",
        f"--nodelist={','.join(nodes)}",
        f"--job-name={step_name}",
        "--kill-on-bad-exit=0",
        "--cpu-bind=none",
        *(command or node_command(job_id, options, portable=portable, source_in_env=True)),
    ]


_REFUSED_MARKERS = (
    "Requested nodes are busy",
    "Job step creation temporarily disabled",
    "Unable to create step",
    "unrecognized option '--overlap'",
    "Invalid generic resource",
    "Access/permission denied",
)


def _srun_line(line: str) -> str:
    """An srun stderr line without its own ``srun: `` prefix (the message adds one)."""
    return line.strip().removeprefix("srun: ")[:300]


def outcomes_from_output(
    nodes: Sequence[str], result: CommandResult, transport_name: str
) -> FanoutResult:
    """Turn the merged, framed output of the step into one outcome per node (pure)."""
    frames = decode_frames(result.stdout)
    out = FanoutResult(transport=transport_name, duration_s=result.duration_s)
    stderr_lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    refused = [ln for ln in stderr_lines if any(m in ln for m in _REFUSED_MARKERS)]
    for name in nodes:
        if name in frames.documents:
            out.nodes[name] = NodeOutcome(name, "ok", frames.documents[name])
            continue
        if name in frames.damaged:
            message = f"output damaged in transit: {frames.damaged[name]}"
            out.nodes[name] = NodeOutcome(name, "error", None, message)
            continue
        node_errors = [ln for ln in stderr_lines if name in ln]
        if name in frames.hello:
            if result.timed_out:
                status, message = "timeout", (
                    "collector started but did not finish before the deadline"
                )
            else:
                status, message = "error", "collector started but returned no result"
        elif result.timed_out:
            status, message = "timeout", "no answer before the deadline (step never started here)"
        else:
            status, message = "unreachable", "the collector did not run on this node"
        if node_errors:
            message += f"; srun: {_srun_line(node_errors[-1])}"
        elif refused:
            message += f"; srun: {_srun_line(refused[-1])}"
        out.nodes[name] = NodeOutcome(name, status, None, message)
    if refused:
        out.warnings.append(
            f"Slurm delayed or refused the step: {refused[-1].strip()[:300]} "
            "(hint: '--transport ssh' avoids creating a step)"
        )
    if result.start_error is not None:
        out.warnings.append(f"srun could not be started: {result.start_error}")
    if frames.noise:
        out.warnings.extend(f"unframed output: {ln[:200]}" for ln in frames.noise[:5])
    return out


# The step's environment is an ALLOWLIST: srun passes its whole environment to every node's task,
# and the controller's may hold secrets (a webhook URL, tokens). Only what srun, the node's Python
# and its tools need: the search path, the user and locale, the Slurm client's configuration (not
# the SLURM_* variables of an allocation slurmdiag itself runs in: they would shape the step), and
# the nvidia-smi stand-in's fixture directory of the test suite.
SRUN_ENV_NAMES = frozenset([
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "LD_LIBRARY_PATH",
    "SLURM_CONF", "SLURM_CLUSTERS", "SLURM_TIME_FORMAT", "SLURMDIAG_FAKE_NVSMI_DIR",
])
SRUN_ENV_PREFIXES = ("LC_",)


def srun_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The part of the controller's environment srun and the collector need (an allowlist)."""
    return {
        key: value
        for key, value in environ.items()
        if key in SRUN_ENV_NAMES or key.startswith(SRUN_ENV_PREFIXES)
    }


def cancel_leftover_steps(
    job_id: str | None, runner: Callable[..., CommandResult] = run_command, *,
    step_name: str = STEP_NAME,
) -> list[str]:
    """scancel any collector step of ours still known to Slurm (srun was ended on timeout).

    ``job_id`` None: our own allocation (``slurmdiag probe --nodes``), found by its unique name.
    """
    if job_id is None:
        listing = runner(["squeue", "-h", "--name", step_name, "-o", "%i %j"], 10.0)
    else:
        listing = runner(["squeue", "-h", "-s", "-j", job_id, "-o", "%i %j"], 10.0)
    cancelled = []
    for line in listing.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] == step_name:
            runner(["scancel", "--quiet", parts[0]], 10.0)
            cancelled.append(parts[0])
    return cancelled


def controller_has_system_python() -> bool:
    """Nodes usually share the controller's OS image: when it has the system Python, so do they."""
    return os.access(SYSTEM_PYTHON, os.X_OK)


# Below this many seconds left, nodes without a system Python are not tried again.
MIN_RETRY_S = 3.0


def nodes_without_system_python(nodes: Sequence[str], out: FanoutResult, stderr: str) -> list[str]:
    """Nodes whose task could not start because SYSTEM_PYTHON is missing there (pure).

    slurmstepd says ``slurmstepd-NODE: error: execve(): /usr/bin/python3: No such file or
    directory`` (older releases leave the node out: then every node whose task ended with srun's
    ``error: NODE: task N: Exited`` line and sent nothing counts).
    """
    marker = f"execve(): {SYSTEM_PYTHON}:"
    lines = [line for line in stderr.splitlines() if marker in line]
    if not lines:
        return []
    silent = [name for name in nodes if out.nodes[name].status == "unreachable"]
    named = [name for name in silent if any(f"slurmstepd-{name}:" in line for line in lines)]
    if named:
        return named
    return [name for name in silent if f"error: {name}: task " in stderr]


def fan_out_srun(
    job_id: str,
    nodes: Sequence[str],
    options: CollectOptions,
    *,
    runner: Callable[..., CommandResult] = run_command,
    progress: Callable[[int, int], None] | None = None,
    het_group: tuple[str, int] | None = None,
) -> FanoutResult:
    """Run the collector on every node through one srun step, bounded by ``options.timeout_s``."""
    answered: set[str] = set()

    def on_line(line: str) -> None:
        # The last chunk of a node's document marks it as answered, for the progress display.
        node = answered_node(line) if progress is not None else None
        if progress is not None and node is not None and node not in answered:
            answered.add(node)
            progress(len(answered), len(nodes))

    start = time.monotonic()
    # The system Python is run directly when the controller has one (one program less a node);
    # nodes without it get the portable form in a second step.
    direct = options.node_python is None and controller_has_system_python()
    result = runner(
        srun_argv(job_id, nodes, options, het_group, portable=not direct),
        options.timeout_s,
        env=node_environment(os.environ),
        on_stdout_line=on_line,
        interrupt_signal=signal.SIGUSR1,  # srun forwards it: the collectors send what they have
    )
    out = outcomes_from_output(nodes, result, "srun")
    timed_out = result.timed_out
    if result.interrupted:
        out.interrupted = True
        out.warnings.append("interrupted: the snapshot holds what the nodes sent until then")
        timed_out = True  # the step may outlive srun: cancel it
    missing = (nodes_without_system_python(nodes, out, result.stderr)
               if direct and not result.interrupted else [])
    left = options.timeout_s - (time.monotonic() - start)
    if missing and left >= MIN_RETRY_S:
        again = runner(
            srun_argv(job_id, missing, replace(options, timeout_s=left), het_group),
            left,
            env=node_environment(os.environ),
            on_stdout_line=on_line,
            interrupt_signal=signal.SIGUSR1,
        )
        retried = outcomes_from_output(missing, again, "srun")
        out.nodes.update(retried.nodes)
        out.warnings.extend(retried.warnings)
        timed_out = timed_out or again.timed_out or again.interrupted
        out.interrupted = again.interrupted
    if timed_out:
        leftovers = cancel_leftover_steps(het_group[0] if het_group else job_id, runner)
        if leftovers:
            out.warnings.append(f"cancelled leftover collector step(s): {', '.join(leftovers)}")
    out.duration_s = time.monotonic() - start
    return out
