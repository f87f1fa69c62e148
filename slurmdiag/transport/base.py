"""The transport interface: how the node collector reaches a job's nodes and what comes back.

Three implementations, one contract:

    SrunTransport      transport/srun.py    ONE ``srun --overlap`` step into the job (the default:
                                            Slurm's own tree does the fan-out at scale)
    SshTransport       transport/ssh.py     paramiko, nodes in parallel (Slurm will not add a step)
    InMemoryTransport  transport/memory.py  no Slurm, no network: recorded node documents, or the
                                            real collector run on this host (tests, notebooks)

``transport_for(options)`` picks the one ``options.transport`` names. Whatever happens on a
node is data in the ``FanoutResult``, never an exception.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from slurmdiag.options import AttachOptions
from slurmdiag.transport.framing import DocumentSink
from slurmdiag.transport.run import CommandResult, run_command

#: progress(answered, expected): called as each node's document arrives (the live line).
Progress = Callable[[int, int], None]

#: NodeOutcome.status values.
NODE_STATUSES = ("ok", "timeout", "error", "unreachable")


@dataclass
class NodeOutcome:
    """What came back from one node: a document, or a status and the reason there is none."""

    name: str
    status: str  # one of NODE_STATUSES
    document: dict[str, Any] | None = None
    message: str | None = None


@dataclass
class FanoutResult:
    """One outcome per node asked, in the order asked, and what the transport had to say."""

    nodes: dict[str, NodeOutcome] = field(default_factory=dict)
    duration_s: float = 0.0
    transport: str = "srun"
    warnings: list[str] = field(default_factory=list)
    interrupted: bool = False  # Ctrl-C/SIGTERM: what the nodes sent until then


class Transport(Protocol):
    """Runs the node collector on a job's nodes and brings back one outcome per node."""

    #: Recorded as the snapshot's ``transport`` ("srun", "ssh", "memory").
    name: str

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
        """Run the collector once on each node, within ``options.timeout_s``.

        Arguments:
            job_id: the Slurm job (or heterogeneous component) whose ranks the collector looks
                for on each node: its own id, e.g. ``"194"`` for component ``193+1``.
            nodes: the node names to collect from, in the job's order. The result holds exactly
                these, in this order.
            options: what to collect and how (samples, interval, strace window, tool paths,
                node interpreter and cache, deadline); ``collect.collector_args`` turns them
                into the collector's arguments.
            het_group: ``(leader job id, component offset)`` when ``job_id`` is a component of
                a heterogeneous job: srun addresses the step to the leader with
                ``--het-group``. Transports that reach nodes directly ignore it.
            progress: called with ``(answered, len(nodes))`` as each node's document arrives,
                from any thread; it must be quick and must not raise.
            on_started: called once, from the calling thread, as soon as the fan-out is under
                way (srun spawned, ssh connections begun): the caller starts its own work then,
                not before, so that it does not compete with the fan-out's start for the GIL.
                Not called when the fan-out could not start at all.
            on_document: called with ``(node, document)`` as soon as a node's document is
                whole and decoded, while the other nodes still work (the caller turns it into
                the snapshot's node then, off the serial tail); the same dict object is the
                node's ``NodeOutcome.document`` if it is the one kept. From any thread (srun:
                the calling one; ssh: each node's); it must be quick and must not raise.

        Returns:
            A ``FanoutResult`` whose ``nodes`` maps every name of ``nodes`` to a
            ``NodeOutcome``: ``ok`` with the node's document, else ``timeout``, ``error`` or
            ``unreachable`` with a one-line reason. ``warnings`` are for people (shown on
            stderr). After Ctrl-C (or SIGTERM turned into KeyboardInterrupt by the CLI) the
            transport stops the collectors, keeps what they sent and sets ``interrupted``
            instead of raising.

        Raises:
            MissingExtra when the transport's optional dependency is not installed. A node's
            failure, a refused step or a deadline is never raised: it is data in the result.
        """
        ...


def transport_for(
    options: AttachOptions, *, runner: Callable[..., CommandResult] = run_command
) -> Transport:
    """The transport ``options.transport`` names, set up from ``options`` (ssh: ``options.ssh``).

    ``runner`` runs the Slurm commands (srun, scontrol, squeue, scancel): tests inject one.
    """
    if options.transport == "ssh":
        from slurmdiag.transport.ssh import SshTransport

        return SshTransport(options.ssh, runner=runner)
    from slurmdiag.transport.srun import SrunTransport

    return SrunTransport(runner=runner)
