"""The srun transport: ONE ``srun --overlap --gres=gpu:0`` step into the job, a collector per node.

Slurm's own tree does the fan-out (one process on the controller however many nodes), the step
shares the job's allocation without taking its GPUs, and the nodes' framed documents come back
merged on srun's stdout. Everything that can be pure is: the argv (``srun_argv``), the reading
of the step's output (``outcomes_from_output``); only ``SrunTransport.collect`` runs anything,
through an injectable runner.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from slurmdiag.options import AttachOptions
from slurmdiag.transport import collect
from slurmdiag.transport.base import FanoutResult, NodeOutcome, Progress
from slurmdiag.transport.collect import node_command, node_environment
from slurmdiag.transport.framing import (
    READY_TAG,
    DocumentSink,
    FrameReader,
    FrameResult,
    answered_node,
    decode_frames,
)
from slurmdiag.transport.run import CommandResult, run_command

STEP_NAME = "slurmdiag-collect"
# The go goes out this long after the first collector was ready if some have not said so by
# then (a collector slow to find its processes): one ready later samples at once. A node whose
# step never starts holds the go back: srun reads its stdin only once every node's step has
# connected its I/O (src/api/step_io.c, _file_readable), so the others begin at their align_s.
GO_AFTER_FIRST_S = 1.0


class StartGate:
    """The collectors' go (``feed`` of run_command): once every node's collector said it is
    ready (its processes found), or GO_AFTER_FIRST_S after the first did. Each collector waits
    for it before its first sample (collector ``align_s``), so every node's look covers the same
    seconds."""

    def __init__(self, nodes: Sequence[str], clock: Callable[[], float] = time.monotonic) -> None:
        self.expected = set(nodes)
        self.ready: set[str] = set()
        self.first: float | None = None
        self.sent: tuple[float, int] | None = None  # (when, how many were ready)
        self.clock = clock

    def saw(self, line: str) -> None:
        """A stdout line of the step: ``@SDG1-READY <node>`` counts its node as ready."""
        at = line.rfind(READY_TAG)
        parts = line[at:].split() if at >= 0 else []
        if len(parts) == 2 and parts[1] in self.expected:
            self.ready.add(parts[1])
            if self.first is None:
                self.first = self.clock()

    def __call__(self) -> bytes | None:
        if self.sent is None and self.first is not None and (
            self.ready >= self.expected or self.clock() - self.first >= GO_AFTER_FIRST_S
        ):
            self.sent = (self.clock(), len(self.ready))
            return b"go\n"
        return None


def srun_argv(
    job_id: str,
    nodes: Sequence[str],
    options: AttachOptions,
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
        # not an MPI program: a site's MpiDefault (pmix, common on GPU clusters) would set up a
        # PMIx server in each node's stepd for it
        "--mpi=none",
        "--cpu-bind=none",
        # the collectors' go (StartGate) reaches every task through srun's stdin
        *(["--input=all"] if command is None and options.align_s > 0 else []),
        *(command or node_command(job_id, options, portable=portable, source_in_env=True,
                                  aligned=options.align_s > 0)),
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
    nodes: Sequence[str], result: CommandResult, transport_name: str,
    frames: FrameResult | None = None,
) -> FanoutResult:
    """Turn the merged, framed output of the step into one outcome per node (pure).

    ``frames``: the output already decoded (a FrameReader's, fed as it arrived)."""
    if frames is None:
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



# Below this many seconds left, nodes without a system Python are not tried again.
MIN_RETRY_S = 3.0


def nodes_without_system_python(nodes: Sequence[str], out: FanoutResult, stderr: str) -> list[str]:
    """Nodes whose task could not start because SYSTEM_PYTHON is missing there (pure).

    slurmstepd says ``slurmstepd-NODE: error: execve(): /usr/bin/python3: No such file or
    directory`` (older releases leave the node out: then every node whose task ended with srun's
    ``error: NODE: task N: Exited`` line and sent nothing counts).
    """
    marker = f"execve(): {collect.SYSTEM_PYTHON}:"
    lines = [line for line in stderr.splitlines() if marker in line]
    if not lines:
        return []
    silent = [name for name in nodes if out.nodes[name].status == "unreachable"]
    named = [name for name in silent if any(f"slurmstepd-{name}:" in line for line in lines)]
    if named:
        return named
    return [name for name in silent if f"error: {name}: task " in stderr]


def read_all(reader: FrameReader, result: CommandResult) -> FrameResult:
    """What ``reader`` decoded as the output arrived, with the rest of ``result.stdout`` (a
    last line without its newline; what was read after srun was ended). run_command's
    output always starts with the lines it passed on."""
    reader.feed_rest(result.stdout)
    return reader.result()


class SrunTransport:
    """ONE srun step into the job; the default transport (see base.Transport for the contract).

    ``runner`` runs srun, squeue and scancel (transport.run.run_command; tests inject one).
    Ctrl-C sends SIGUSR1, which srun forwards to every task: the collectors send what they have
    and the step is cancelled. Nodes without the system Python get a second, portable step.
    """

    name = "srun"

    def __init__(self, runner: Callable[..., CommandResult] = run_command) -> None:
        self.runner = runner

    def collect(
        self,
        job_id: str,
        nodes: Sequence[str],
        options: AttachOptions,
        *,
        het_group: tuple[str, int] | None = None,
        progress: Progress | None = None,
        on_started: Callable[[], None] | None = None,
        on_document: DocumentSink | None = None,
    ) -> FanoutResult:
        """Run the collector on every node through one srun step, within ``options.timeout_s``."""
        runner = self.runner
        answered: set[str] = set()

        gate: StartGate | None = None
        reader = FrameReader(on_document)

        def on_line(line: str) -> None:
            if gate is not None and gate.sent is None:
                gate.saw(line)
            # Each document is decoded as soon as it is whole, while other nodes still work.
            reader.feed(line)
            # The last chunk of a node's document marks it as answered, for the progress display.
            node = answered_node(line) if progress is not None else None
            if progress is not None and node is not None and node not in answered:
                answered.add(node)
                progress(len(answered), len(nodes))

        def step(on: Sequence[str], step_options: AttachOptions, portable: bool,
                 started: Callable[[], None] | None = None) -> CommandResult:
            nonlocal gate, reader
            gate = StartGate(on) if step_options.align_s > 0 else None
            reader = FrameReader(on_document)
            return runner(
                srun_argv(job_id, on, step_options, het_group, portable=portable),
                step_options.timeout_s,
                env=node_environment(os.environ),
                on_stdout_line=on_line,
                # srun forwards SIGUSR1 to its tasks: the collectors send what they have.
                interrupt_signal=signal.SIGUSR1,
                on_started=started,
                **({"feed": gate} if gate is not None else {}),
            )

        start = time.monotonic()
        # The system Python is run directly when the controller has one (one program less a
        # node); nodes without it get the portable form in a second step.
        direct = options.node_python is None and collect.controller_has_system_python()
        result = step(nodes, options, portable=not direct, started=on_started)
        out = outcomes_from_output(nodes, result, self.name, frames=read_all(reader, result))
        timed_out = result.timed_out
        if result.interrupted:
            out.interrupted = True
            out.warnings.append("interrupted: the snapshot holds what the nodes sent until then")
            timed_out = True  # the step may outlive srun: cancel it
        missing = (nodes_without_system_python(nodes, out, result.stderr)
                   if direct and not result.interrupted else [])
        left = options.timeout_s - (time.monotonic() - start)
        if missing and left >= MIN_RETRY_S:
            again = step(missing, replace(options, timeout_s=left), portable=True)
            retried = outcomes_from_output(missing, again, self.name, frames=read_all(reader, again))
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
