"""The in-memory transport: no Slurm, no network; for tests and for replaying recorded nodes.

Each node's answer is given up front: a recorded node document (what a collector sent), a
``NodeOutcome`` (a node that failed), or a function called at collect time, such as
``run_collector_here``, which runs the real collector program on this host as if it were the
node. ``calls`` keeps what each ``collect`` was asked, so a test can check what attach asked for.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slurmdiag.options import AttachOptions
from slurmdiag.transport.base import FanoutResult, NodeOutcome, Progress
from slurmdiag.transport.collect import node_command
from slurmdiag.transport.framing import DocumentSink, decode_frames
from slurmdiag.transport.run import run_command

#: A node's answer: its document, its failure, or a function (job_id, node, options) -> either.
Answer = dict[str, Any] | NodeOutcome | Callable[[str, str, AttachOptions], Any]


@dataclass(frozen=True)
class Call:
    """One ``collect`` as the transport was asked it."""

    job_id: str
    nodes: tuple[str, ...]
    options: AttachOptions
    het_group: tuple[str, int] | None


class InMemoryTransport:
    """Answers from ``answers`` (node name -> Answer); a node without one is unreachable.

    ``interrupted``: behave as after Ctrl-C (the result says so; the answers are kept).
    ``warnings``: what the transport says, as srun's refusals would.
    """

    name = "memory"

    def __init__(
        self,
        answers: Mapping[str, Answer],
        *,
        interrupted: bool = False,
        warnings: Sequence[str] = (),
    ) -> None:
        self.answers = dict(answers)
        self.interrupted = interrupted
        self.warnings = list(warnings)
        self.calls: list[Call] = []

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
        """Each node's answer, in the order asked (see base.Transport for the contract)."""
        self.calls.append(Call(job_id, tuple(nodes), options, het_group))
        start = time.monotonic()
        if on_started is not None:
            on_started()
        out = FanoutResult(transport=self.name, warnings=list(self.warnings),
                           interrupted=self.interrupted)
        answered = 0
        for node in nodes:
            outcome = self._outcome(job_id, node, options)
            out.nodes[node] = outcome
            if outcome.status == "ok":
                answered += 1
                if progress is not None:
                    progress(answered, len(nodes))
                if on_document is not None and outcome.document is not None:
                    on_document(node, outcome.document)
        out.duration_s = time.monotonic() - start
        return out

    def _outcome(self, job_id: str, node: str, options: AttachOptions) -> NodeOutcome:
        answer = self.answers.get(node)
        if callable(answer):
            answer = answer(job_id, node, options)
        if answer is None:
            return NodeOutcome(node, "unreachable", None, "no answer recorded for this node")
        if isinstance(answer, NodeOutcome):
            return answer
        return NodeOutcome(node, "ok", answer)


def run_collector_here(job_id: str, node: str, options: AttachOptions) -> NodeOutcome:
    """The real collector program, run on this host under ``node``'s name (an Answer)."""
    result = run_command(node_command(job_id, options, node), options.timeout_s)
    frames = decode_frames(result.stdout)
    if node in frames.documents:
        return NodeOutcome(node, "ok", frames.documents[node])
    last = result.stderr.strip().splitlines()[-1:] or ["no output"]
    reason = result.start_error or last[0][:300]
    status = "timeout" if result.timed_out else "error"
    return NodeOutcome(node, status, None, f"the collector sent no document: {reason}")
