"""slurmdiag probe: test the network between a job's nodes and name the bad node or link.

``slurmdiag.probe.probe(job_id)`` or ``probe(nodes="node[001-016]")`` returns a Snapshot whose
``probe`` section and ``verdicts`` hold the results (see slurmdiag/probe/cli.py).
"""

from __future__ import annotations

from slurmdiag.probe.cli import probe

__all__ = ["probe"]
