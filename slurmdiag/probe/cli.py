"""``slurmdiag probe``: argparse wiring, the run, the outputs (snapshot, report, summary)."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurmdiag._version import __version__
from slurmdiag.errors import TransportFailed, UsageError
from slurmdiag.vocabulary import NodeStatus

if TYPE_CHECKING:  # the snapshot module loads on use: `slurmdiag attach` starts srun sooner
    from slurmdiag.snapshot import Snapshot


FAULT_FOUND = 1  # exit code: a bad node, link or MTU was named


def add_probe_arguments(sub: Any) -> None:
    probe = sub.add_parser(
        "probe", help="test the network between a job's nodes (or named nodes): name the bad node or link",
        epilog="examples:\n"
        "  slurmdiag probe 123456                 test the links between a running job's nodes\n"
        "  slurmdiag probe --nodes node[001-016]  the same in a fresh allocation of those nodes\n\n"
        "Exit codes: 0 nothing wrong found, 1 a bad node, link or MTU was named, 2 usage, "
        "3 job not found, 4 job not running, 5 Slurm unavailable, 6 no node answered.")
    probe.add_argument("job_id", nargs="?", help="a running job: probe inside its allocation (--overlap)")
    probe.add_argument("--nodes", metavar="HOSTLIST",
                       help="probe these nodes in a fresh allocation instead (node[001-016])")
    probe.add_argument("--partition", help="partition of the fresh allocation (--nodes)")
    probe.add_argument("--timeout", type=float, default=60.0, help="global deadline in seconds (default 60)")
    probe.add_argument("--ifname", help="interface(s) to test, NCCL_SOCKET_IFNAME syntax "
                       "(default: the job's NCCL/GLOO variables, else the default route)")
    probe.add_argument("--bytes", type=int, default=4 << 20, help="bytes per transfer and direction")
    probe.add_argument("--no-collective", action="store_true",
                       help="skip the gloo all_reduce check (torch on the nodes)")
    probe.add_argument("--out", metavar="DIR", help="write snapshot.json and report.html here")
    probe.add_argument("--json", action="store_true", help="print the snapshot JSON on stdout")
    probe.add_argument("--no-report", action="store_true", help="do not write the HTML report")
    probe.set_defaults(handler=run_probe_command)


def probe(job_id: str | int | None = None, *, nodes: str | None = None, timeout_s: float = 60.0,
          ifname: str | None = None, collective: bool = True, transfer_bytes: int = 4 << 20,
          partition: str | None = None) -> Snapshot:
    """Probe the network of job ``job_id``'s nodes, or of ``nodes`` (a hostlist) in a fresh
    allocation; returns a Snapshot whose ``probe`` section and ``verdicts`` hold the results."""
    from slurmdiag.hostlist import expand_hostlist
    from slurmdiag.probe.analysis import probe_verdicts
    from slurmdiag.probe.run import ProbeOptions, run_probe
    from slurmdiag.snapshot import Job, Snapshot

    if (job_id is None) == (nodes is None):
        raise UsageError("give either a job id or --nodes", hint="slurmdiag probe 123456, or "
                         "slurmdiag probe --nodes node[001-016]")
    if timeout_s < 10:
        raise UsageError("--timeout must be at least 10 seconds")
    started = _dt.datetime.now(_dt.timezone.utc)
    options = ProbeOptions(timeout_s=timeout_s, ifname=ifname, collective=collective,
                           transfer_bytes=max(1, transfer_bytes), partition=partition)
    if job_id is not None:
        from slurmdiag.probe.run import Component
        from slurmdiag.slurm.discover import (
            discover_components,
            job_ref_from_user,
            to_job,
            whole_het_job,
        )
        from slurmdiag.transport.run import run_command

        # A heterogeneous job by its plain id: every component's nodes, as attach looks at it;
        # a component (its own or the leader's id with --het-group): srun takes the leader's.
        found = discover_components(job_ref_from_user(str(job_id)), run_command)
        slurm_job = found[0] if len(found) == 1 else whole_het_job(found)
        job, names = to_job(slurm_job), list(slurm_job.nodes)
        parts = [Component(c.job_id, c.het_group, c.nodes) for c in found if c.het_group]
        result = run_probe(slurm_job.job_id, names, options, components=parts)
    else:
        names = expand_hostlist(str(nodes))
        if len(names) < 2:
            raise UsageError("--nodes needs at least two nodes", hint="--nodes node[001-002]")
        job = Job(id="probe", state="PROBE", name="slurmdiag probe", nodes=tuple(names))
        result = run_probe(None, names, options)
    snapshot = Snapshot(
        job=job, slurmdiag_version=__version__, created=started.isoformat(timespec="seconds"),
        duration_s=result.duration_s, transport="srun", probe=result,
        options={"timeout_s": timeout_s, "ifname": ifname, "collective": collective,
                 "bytes": transfer_bytes})
    return dataclasses.replace(snapshot, verdicts=tuple(probe_verdicts(result)))


def summary_lines(snapshot: Snapshot) -> list[str]:
    """The terminal summary: verdicts with their next step, then the matrix in words."""
    from slurmdiag.report.terminal import clean

    p = snapshot.probe
    assert p is not None
    lines = [f"slurmdiag probe: {len(p.nodes)} nodes, {p.rounds} rounds, {p.duration_s or 0:.1f} s"]
    for v in snapshot.verdicts:
        lines.append(f"  [{v.severity}] {v.kind}: {clean(v.summary)}")
        if v.next_step:
            lines.append(f"      next: {clean(v.next_step)}")
    for n in p.nodes:
        lines.append(f"  {n.name:<12} {n.status:<11} {n.interface or '-'} {n.address or '-'} "
                     f"mtu {n.mtu or '-'} ({clean(n.chosen_by or n.message or '')})")
    from slurmdiag.probe.view import matrix_lines

    lines += matrix_lines(p)
    if p.collective is not None:
        lines.append(f"  collective check: {p.collective.status}"
                     + (f" ({clean(p.collective.message)})" if p.collective.message else ""))
    for w in p.warnings:
        lines.append(f"  warning: {clean(w)}")
    return lines


def run_probe_command(args: argparse.Namespace) -> int:
    from slurmdiag.analysis import analyze
    from slurmdiag.api import default_out_dir, write_outputs

    snapshot = probe(args.job_id, nodes=args.nodes, timeout_s=args.timeout, ifname=args.ifname,
                     collective=not args.no_collective, transfer_bytes=args.bytes,
                     partition=args.partition)
    out_dir = Path(args.out) if args.out else default_out_dir(f"probe-{snapshot.job.id}")
    snapshot = write_outputs(snapshot, out_dir, analyze(snapshot), report=not args.no_report)
    if args.json:
        sys.stdout.write(snapshot.to_json(indent=1) + "\n")
    else:
        sys.stdout.write("\n".join(summary_lines(snapshot)) + "\n")
    print(f"snapshot: {out_dir / 'snapshot.json'}", file=sys.stderr)
    if snapshot.report:
        print(f"report:   {snapshot.report}", file=sys.stderr)
    assert snapshot.probe is not None
    if all(n.status != NodeStatus.OK for n in snapshot.probe.nodes):
        first = snapshot.probe.nodes[0]
        print(f"error: no node answered ({first.name}: {first.message})", file=sys.stderr)
        print(f"hint: {TransportFailed('').hint}", file=sys.stderr)
        return TransportFailed.exit_code
    # like `watch`: 1 when something was found, for scripts that probe before a relaunch
    return FAULT_FOUND if any(v.severity != "info" for v in snapshot.verdicts) else 0
