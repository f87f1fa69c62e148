"""Fan the node collector out to a job's nodes and bring back one raw document per node.

Two transports share this module's contract (``Fanout``): ONE srun step into the job (Slurm's own
tree does the fan-out at scale) and ssh (paramiko) as the fallback. Both return a ``FanoutResult``
in which a node that did not answer is a status with a reason, never an exception.
"""

from __future__ import annotations

import binascii
import functools
import json
import marshal
import os
import shutil
import sys
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from slurmdiag.transport.framing import decode_frames
from slurmdiag.transport.run import CommandResult, run_command

STEP_NAME = "slurmdiag-collect"


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


@functools.lru_cache(maxsize=1)
def collector_source() -> str:
    """The stdlib-only node script, shipped inside the package and sent with the command."""
    return resources.files("slurmdiag.collector").joinpath("node.py").read_text()


# The node command's -c program: run the collector from the compiled code object when the node's
# Python is the controller's version (compiling 60 KB of source costs ~15 ms a node, paid once
# per node: 32 times on one host of the emulated cluster), else compile the compressed source.
# argv after it: cache tag, marshalled code, source, collector args.
COLLECTOR_LOADER = (
    "import sys,zlib,binascii as b\n"
    "t,m,z=sys.argv[1:4];del sys.argv[1:4]\n"
    "if sys.implementation.cache_tag==t:\n"
    " import marshal;c=marshal.loads(zlib.decompress(b.a2b_base64(m)))\n"
    "else:\n"
    " c=compile(zlib.decompress(b.a2b_base64(z)),'slurmdiag-collector','exec')\n"
    "exec(c,{'__name__':'__main__'})"
)


@functools.lru_cache(maxsize=1)
def collector_payload() -> tuple[str, str, str]:
    """(cache tag, compressed marshalled code, compressed source), each base64 text."""
    source = collector_source()
    code = compile(source, "slurmdiag-collector", "exec")

    def pack(data: bytes) -> str:
        return binascii.b2a_base64(zlib.compress(data, 9), newline=False).decode()

    return sys.implementation.cache_tag, pack(marshal.dumps(code)), pack(source.encode())


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
    """The controller's own base interpreter, resolved (no venv, no pyenv/conda shim).

    On clusters the controller's Python is often on a shared file system; starting it directly
    avoids a shim (pyenv's python3 is a bash script that runs ~30 programs), a cost paid once
    per node. The node falls back to python3 on its PATH when the path does not exist there.
    """
    base = getattr(sys, "_base_executable", None) or sys.executable
    return os.path.realpath(base)


def node_python_argv(node_python: str | None) -> list[str]:
    """The start of the node command: python -I -S -c, then the loader, payload and args."""
    if node_python:
        return [node_python, "-I", "-S", "-c"]
    # $1 is the preferred interpreter; it is dropped from "$@" before exec.
    script = 'p=$1; shift; [ -x "$p" ] || p=python3; exec "$p" -I -S -c "$@"'
    return ["/bin/sh", "-c", script, "slurmdiag-collector", preferred_node_python()]


def srun_argv(job_id: str, nodes: Sequence[str], options: CollectOptions) -> list[str]:
    """ONE step over every node, one collector task per node, without taking the job's GPUs."""
    return [
        "srun",
        f"--jobid={job_id}",
        "--overlap",
        "--gres=gpu:0",
        f"--nodes={len(nodes)}",
        f"--ntasks={len(nodes)}",
        "--ntasks-per-node=1",
        f"--nodelist={','.join(nodes)}",
        f"--job-name={STEP_NAME}",
        "--kill-on-bad-exit=0",
        "--cpu-bind=none",
        *node_python_argv(options.node_python),
        COLLECTOR_LOADER,
        *collector_payload(),
        json.dumps(collector_args(job_id, options)),
    ]


_REFUSED_MARKERS = (
    "Requested nodes are busy",
    "Job step creation temporarily disabled",
    "Unable to create step",
    "unrecognized option '--overlap'",
    "Invalid generic resource",
    "Access/permission denied",
)


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
            message += f"; srun: {node_errors[-1].strip()[:300]}"
        elif refused:
            message += f"; srun: {refused[-1].strip()[:300]}"
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


# Variables that would steer `srun --jobid` when slurmdiag itself runs inside an allocation
# (an salloc shell, a scrontab job): the step must take its shape from our flags only.
_KEEP_SLURM_VARS = {"SLURM_CONF", "SLURM_CLUSTERS", "SLURM_TIME_FORMAT"}


def srun_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The controller's environment without the job-shaping SLURM_* variables."""
    return {
        key: value
        for key, value in environ.items()
        if not (key.startswith(("SLURM_", "SRUN_", "SALLOC_", "SBATCH_")) and key not in _KEEP_SLURM_VARS)
    }


def cancel_leftover_steps(
    job_id: str, runner: Callable[..., CommandResult] = run_command
) -> list[str]:
    """scancel any collector step of ours still known to Slurm (srun was ended on timeout)."""
    listing = runner(["squeue", "-h", "-s", "-j", job_id, "-o", "%i %j"], 10.0)
    cancelled = []
    for line in listing.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] == STEP_NAME:
            runner(["scancel", "--quiet", parts[0]], 10.0)
            cancelled.append(parts[0])
    return cancelled


def fan_out_srun(
    job_id: str,
    nodes: Sequence[str],
    options: CollectOptions,
    *,
    runner: Callable[..., CommandResult] = run_command,
    progress: Callable[[int, int], None] | None = None,
) -> FanoutResult:
    """Run the collector on every node through one srun step, bounded by ``options.timeout_s``."""
    answered: set[str] = set()

    def on_line(line: str) -> None:
        # The last chunk of a node's document marks it as answered, for the progress display.
        if progress is None or not line.startswith("@SDG1 "):
            return
        parts = line.split(" ", 5)
        last_chunk = (
            len(parts) >= 5
            and parts[2].isdigit()
            and parts[3].isdigit()
            and int(parts[2]) == int(parts[3]) - 1
        )
        if last_chunk and parts[1] not in answered:
            answered.add(parts[1])
            progress(len(answered), len(nodes))

    start = time.monotonic()
    result = runner(
        srun_argv(job_id, nodes, options),
        options.timeout_s,
        env=srun_environment(os.environ),
        on_stdout_line=on_line,
    )
    out = outcomes_from_output(nodes, result, "srun")
    if result.timed_out:
        leftovers = cancel_leftover_steps(job_id, runner)
        if leftovers:
            out.warnings.append(f"cancelled leftover collector step(s): {', '.join(leftovers)}")
    out.duration_s = time.monotonic() - start
    return out
