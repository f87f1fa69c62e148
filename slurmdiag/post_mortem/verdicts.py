"""Verdicts for a finished job: which rank failed first and why, and who only died of it.

Pure: a function of Slurm's record, the ranks' log findings (in written order) and the cores.

Kinds: ``rank_crashed`` (a fatal signal such as SIGSEGV), ``rank_killed`` (SIGKILL from outside:
the OOM killer, an administrator, a health check), ``out_of_memory``, ``rank_exception`` (a Python
exception that is not a lost peer), ``mismatched_collective`` (gloo or torch's collective check
found ranks calling a collective with different sizes or ops; torch's check names the rank that
differs, gloo's only the rank that noticed), ``collective_timeout`` (ranks timed out waiting in a
collective; the culprits are the ranks that never reached it), ``node_failure``, ``time_limit``,
``cancelled`` (by a user: not a failure), ``completed``, ``unexplained`` (Slurm says it failed,
the logs do not say why).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from slurmdiag.analysis.stacks import (
    agreed_script_roots,
    entry_root,
    is_user_file,
    own_roots,
    script_entry,
)
from slurmdiag.hostlist import format_int_ranges
from slurmdiag.post_mortem.cores import CoreStack
from slurmdiag.post_mortem.logs import order_key
from slurmdiag.post_mortem.record import SlurmRecord
from slurmdiag.slurm.sacct import signal_name
from slurmdiag.snapshot import Frame, LogFinding, Verdict
from slurmdiag.vocabulary import VerdictKind

# What an event says about its rank: a cause, or a consequence of another rank's end.
CAUSES = ("fatal_signal", "task_exit", "exception", "collective_timeout", "oom_kill",
          "collective_mismatch")
CONSEQUENCES = ("peer_lost", "task_terminated")

NEXT_STEPS = {
    "rank_crashed": "open the culprit's native stack (core file) at the crashing frame; the other "
                    "ranks only lost their peer",
    "rank_killed": "check the node's kernel log (dmesg: oom-kill) and the job's memory use "
                   "(sacct -o MaxRSS); ask the admins whether a health check killed it",
    "out_of_memory": "lower the memory per rank (batch size, activation checkpointing) or ask "
                     "for more (--mem)",
    "rank_exception": "fix the exception at the culprit's site; the other ranks only lost their peer",
    "rank_exited": "read the culprit's last lines (its own message before the exit) and where its "
                   "code calls sys.exit or os._exit with that code; the other ranks only lost "
                   "their peer",
    "mismatched_collective": "make every rank call the collective at the site with tensors of "
                             "one shape and dtype (a length computed from the rank's own data: "
                             "bincount, unique, a variable-length batch) and in the same order",
    "mismatched_collective_unnamed": "run again with TORCH_DISTRIBUTED_DEBUG=DETAIL: torch then "
                                     "checks each collective's op and shapes across ranks and "
                                     "names the rank that differs (or read the Flight Recorder "
                                     "dumps' input sizes)",
    "collective_timeout": "look at what the culprit ranks were doing instead of the collective "
                          "(their last lines, Flight Recorder); next time run 'slurmdiag attach' "
                          "or 'slurmdiag watch' before the timeout fires",
    "node_failure": "ask the admins about the node (scontrol show node, its slurmd log); "
                    "resubmit excluding it (--exclude)",
    "time_limit": "the job was still running when its time limit ended it: if it hung, run "
                  "'slurmdiag watch' (or attach before the limit) to see where",
    "cancelled": "nothing to fix: a user or an administrator cancelled the job",
    "unexplained": "read the job's full log and the nodes' slurmd logs; pass other logs with --log",
}


def _label(ranks: Iterable[int]) -> str:
    ranks = sorted(set(ranks))
    return ("rank " if len(ranks) == 1 else "ranks ") + format_int_ranges(ranks)


def _traceback_frames(frames_text: str) -> list[tuple[str, str, str]]:
    """(path, line, function) of a traceback's ``path:line:function`` lines, innermost last."""
    out = []
    for entry in frames_text.splitlines():
        path, _, rest = entry.partition(":")
        line, _, function = rest.partition(":")
        out.append((path, line, function))
    return out


def _as_stack(entries: list[tuple[str, str, str]]) -> list[Frame]:
    return [Frame(function=function, file=path) for path, _, function in reversed(entries)]


def script_roots(findings: Iterable[LogFinding]) -> frozenset[str]:
    """The installed package a thin script of the job's own calls from its module level on
    every traceback of the job's log, as the analysis agrees across ranks
    (agreed_script_roots): the job's code too."""
    return agreed_script_roots(script_entry(_as_stack(_traceback_frames(f.fields["frames"])))
                               for f in findings if f.fields.get("frames"))


def _user_site_of_frames(frames_text: str, scripts: frozenset[str] = frozenset()) -> str | None:
    """The innermost frame of the job's own code in a traceback (``path:line:function`` lines,
    innermost last): outside site-packages, or in the installed package the program starts in
    (``entry_root``: a console script's or ``python -m``'s; ``scripts``: script_roots)."""
    entries = _traceback_frames(frames_text)
    root = entry_root(_as_stack(entries))
    with own_roots(frozenset({root} if root else ()) | scripts):
        return next((f"{path}:{line}" for path, line, _ in reversed(entries)
                     if path and is_user_file(path)), None)


def core_site(core: CoreStack) -> str | None:
    for frame in core.frames:  # innermost first
        if not frame.native and is_user_file(frame.file):
            return f"{frame.file}:{frame.line}"
    return None


def _is_cause(finding: LogFinding) -> bool:
    if finding.kind == "task_exit":
        # "Exited with exit code 1" after a traceback is that traceback's; only a signal counts
        return "signal" in finding.fields
    return finding.kind in CAUSES


def first_cause(findings: Sequence[LogFinding]) -> LogFinding | None:
    """The earliest finding (in written order) that is a cause, before any cancel or time limit."""
    for finding in sorted(findings, key=order_key):
        if finding.kind == "slurm_cancel":
            return None
        if _is_cause(finding) and finding.rank is not None:
            return finding
    return None


def lone_exit(findings: Sequence[LogFinding]) -> LogFinding | None:
    """srun's ``task N: Exited with exit code C`` of the one rank that exited with an error,
    when nothing else is a cause: no traceback, signal or timeout in the logs read
    (``sys.exit(3)`` after a message of its own, ``os._exit``), every other rank ended 0, was
    terminated, said nothing or exited after losing a peer (its own traceback says a peer went
    away: it was not first), and no cancel was written before it. With two ranks exiting
    non-zero for no reason written, srun's order of their lines cannot tell which went first:
    None."""
    ordered = sorted(findings, key=order_key)
    if any(_is_cause(f) or f.kind == "exception" for f in ordered):
        return None
    lost_a_peer = {f.rank for f in ordered if f.kind == "peer_lost"}
    failed = [f for f in ordered if _failed_exit(f) and f.rank not in lost_a_peer]
    if len({f.rank for f in failed}) != 1:
        return None
    cancel = _cancel_finding(findings)
    if cancel is not None and order_key(cancel) < order_key(failed[0]):
        return None
    return failed[0]


def _failed_exit(finding: LogFinding) -> bool:
    """A rank's exit with an error code (srun's task line, or torchrun's summary)."""
    return (finding.kind == "task_exit" and finding.rank is not None
            and finding.fields.get("exit_code") not in (None, "0"))


def _other_failed_exits(findings: Sequence[LogFinding], rank: int) -> bool:
    return any(_failed_exit(f) and f.rank != rank for f in findings)


def _victims(findings: Sequence[LogFinding], culprits: set[int]) -> list[int]:
    return sorted({f.rank for f in findings if f.rank is not None and f.rank not in culprits
                   and f.kind in (*CONSEQUENCES, "task_exit", "exception")})


def _cancel_finding(findings: Sequence[LogFinding]) -> LogFinding | None:
    cancels = [f for f in findings if f.kind == "slurm_cancel"]
    return min(cancels, key=order_key) if cancels else None


def _cite(finding: LogFinding) -> str:
    return f"{finding.source}:{finding.line_no}: {finding.text[:300]}"


def postmortem_verdicts(
    record: SlurmRecord,
    findings: Sequence[LogFinding],
    cores: Sequence[CoreStack],
    last_lines: Mapping[int, Sequence[str]],
    world_size: int | None,
    flight: Mapping[str, object] | None = None,
) -> list[Verdict]:
    job = record.job
    verdicts: list[Verdict] = []
    states = {job.state, *(s.state for s in record.steps)}
    cancel = _cancel_finding(findings)
    cause = first_cause(findings)
    cores_by_rank: dict[int, CoreStack] = {c.rank: c for c in cores if c.rank is not None}
    if cause is None and not cores_by_rank:
        cause = lone_exit(findings)
    mismatches = [f for f in findings if f.kind == "collective_mismatch"
                  and (cancel is None or order_key(f) < order_key(cancel))]
    if mismatches:
        # a mismatch explains the aborts and lost peers around it, in whatever order srun
        # merged them: it is the cause (gloo's abort, srun's "task N: Aborted", a core)
        verdicts.append(_mismatch_verdict(mismatches, findings, last_lines))
        cause = None
        cores_by_rank = {}

    node_lost = [f for f in findings if f.kind == "node_failure"]
    if "NODE_FAIL" in states or node_lost:
        # a node that died takes its ranks without a word; what the others then say (lost
        # peers, timeouts) follows from it. Only a cause written before the node was lost
        # comes first.
        first_loss = min(node_lost, key=order_key) if node_lost else None
        if cause is not None and first_loss is not None and order_key(cause) > order_key(first_loss):
            cause = None
        if cause is None:
            verdicts.append(_node_failure_verdict(record, findings, last_lines, world_size))
    if cause is not None:
        verdicts.append(_cause_verdict(cause, findings, cores_by_rank, last_lines, world_size,
                                       flight, states))
    elif cores_by_rank:
        # a core but no log line: the crash is the core's
        rank, core = min(cores_by_rank.items())
        verdicts.append(_crash_verdict(rank, core, None, findings, last_lines))
    if ("NODE_FAIL" in states or node_lost) and not any(v.kind == VerdictKind.NODE_FAILURE for v in verdicts):
        verdicts.append(_node_failure_verdict(record, findings, last_lines, world_size))
    if "OUT_OF_MEMORY" in states and not any(v.kind == "out_of_memory" for v in verdicts):
        steps = [s.step_id for s in record.steps if s.state == "OUT_OF_MEMORY"]
        verdicts.append(Verdict(
            kind=VerdictKind.OUT_OF_MEMORY, severity="critical",
            summary=f"Slurm recorded OUT_OF_MEMORY for {', '.join(steps) or 'the job'}",
            evidence=tuple(_cite(f) for f in findings if f.kind == "oom_kill")[:4],
            next_step=NEXT_STEPS["out_of_memory"]))
    due = (cancel.fields.get("due_to") if cancel else None) or ""
    if job.state == "TIMEOUT" or "TIME LIMIT" in due:
        verdicts.append(Verdict(
            kind=VerdictKind.TIME_LIMIT, severity="critical",
            summary=f"the job ran into its time limit ({job.time_limit or '?'}) and Slurm ended it"
                    + (f" after {job.elapsed_s} s" if job.elapsed_s else ""),
            evidence=tuple(_last_line_evidence(last_lines)) + ((_cite(cancel),) if cancel else ()),
            next_step=NEXT_STEPS["time_limit"]))
    elif job.state == "CANCELLED":
        # (a step cancelled by srun -K/--kill-on-bad-exit is not a user's cancel: the job FAILED)
        who = job.cancelled_by or (cancel.fields.get("by") if cancel else None)
        verdicts.append(Verdict(
            kind=VerdictKind.CANCELLED, severity="info",
            summary=f"the job was cancelled by {_who(who)}: not a failure"
                    + (" (a rank had failed before: see above)" if cause else ""),
            evidence=((_cite(cancel),) if cancel else ()) + tuple(_last_line_evidence(last_lines))[:4],
            next_step=NEXT_STEPS["cancelled"]))
    if job.state == "COMPLETED" and not verdicts:
        verdicts.append(Verdict(kind=VerdictKind.COMPLETED, severity="info",
                                summary=f"the job completed (exit code {job.exit_code or 0})"))
    if not verdicts:
        verdicts.append(Verdict(
            kind=VerdictKind.UNEXPLAINED, severity="warning",
            summary=f"Slurm says {job.state}"
                    + (f" (exit code {job.exit_code}" + (f", {signal_name(job.signal)}" if job.signal else "") + ")"
                       if job.exit_code is not None else "")
                    + "; the logs read do not say which rank failed first",
            evidence=tuple(_last_line_evidence(last_lines)),
            next_step=NEXT_STEPS["unexplained"]))
    return verdicts


#: What a rank that ended on a live node leaves behind (a rank on a dead node leaves none).
_END_KINDS = (*CONSEQUENCES, "task_exit", "exception", "collective_timeout", "fatal_signal", "oom_kill")


def _node_failure_verdict(
    record: SlurmRecord,
    findings: Sequence[LogFinding],
    last_lines: Mapping[int, Sequence[str]],
    world_size: int | None,
) -> Verdict:
    """A node stopped answering (Slurm: NODE_FAIL). Its ranks are those that left no end: no
    exit, exception or srun task line (their node took them and their step daemon with it),
    less those srun placed on another node."""
    job = record.job
    lost = sorted((f for f in findings if f.kind == "node_failure"), key=order_key)
    nodes = list(dict.fromkeys(f.host for f in lost if f.host))
    if not nodes and job.failed_node:
        nodes = [job.failed_node]
    ended = {f.rank for f in findings if f.rank is not None and f.kind in _END_KINDS}
    elsewhere = {f.rank for f in findings if f.rank is not None and f.host and nodes
                 and f.host not in nodes}
    everyone = set(range(world_size)) if world_size else set(last_lines) | ended
    on_node = sorted(everyone - ended - elsewhere)
    victims = sorted(ended - set(on_node))
    where = f"node {', '.join(nodes)}" if nodes else f"a node of the job ({job.nodes or '?'})"
    summary = f"{where} failed under the job (Slurm: {job.state}, it stopped answering)"
    if on_node:
        summary += f": {_label(on_node)} were on it and ended without a word"
    if victims:
        summary += f"; {_label(victims)} only died because of it"
    evidence = [_cite(f) for f in lost[:2]]
    if on_node:
        evidence.append(f"{_label(on_node)} left no exit, exception or srun task line: their node "
                        "took them with their step daemon")
    else:
        evidence.append("which ranks ran on it cannot be told from the logs read (no srun "
                        "--label, or every rank reported an end)")
    for rank in on_node[:4]:
        evidence.extend(_rank_tail(rank, last_lines, 2))
    first_loss_of_peer = next((f for f in sorted(findings, key=order_key) if f.kind == "peer_lost"), None)
    if first_loss_of_peer is not None:
        evidence.append(_cite(first_loss_of_peer))
    evidence.extend(f"step {s.step_id}: {s.state}" for s in record.steps[:4])
    return Verdict(
        kind=VerdictKind.NODE_FAILURE, severity="critical", summary=summary,
        culprit_ranks=tuple(on_node), evidence=tuple(evidence),
        next_step=NEXT_STEPS["node_failure"])


def _who(who: str | None) -> str:
    if who is None:
        return "a user"
    if who == "0":
        return "root (uid 0)"
    return f"uid {who}" if who.isdigit() else who


def _last_line_evidence(last_lines: Mapping[int, Sequence[str]], per_rank: int = 1) -> list[str]:
    return [f"rank {rank} last wrote: {lines[-1][:200]}" for rank, lines in sorted(last_lines.items())
            if lines][:16]


def _cause_verdict(
    cause: LogFinding,
    findings: Sequence[LogFinding],
    cores_by_rank: Mapping[int, CoreStack],
    last_lines: Mapping[int, Sequence[str]],
    world_size: int | None,
    flight: Mapping[str, object] | None,
    states: set[str],
) -> Verdict:
    rank = cause.rank
    assert rank is not None
    if cause.kind == "collective_timeout":
        return _timeout_verdict(findings, last_lines, world_size, flight)
    signal = int(cause.fields.get("signal", "0") or 0)
    if cause.kind in ("fatal_signal", "task_exit") and signal == 9:
        oom = any(f.kind == "oom_kill" for f in findings) or "OUT_OF_MEMORY" in states
        victims = _victims(findings, {rank})
        return Verdict(
            kind=VerdictKind.OUT_OF_MEMORY if oom else VerdictKind.RANK_KILLED, severity="critical",
            summary=(f"rank {rank} was killed by SIGKILL"
                     + (" (out of memory)" if oom else " from outside (OOM killer, admin, health check)")
                     + (f" on {cause.host}" if cause.host else "") + " first"
                     + (f"; {_label(victims)} only died because of it" if victims else "")),
            culprit_ranks=(rank,),
            evidence=(_cite(cause), *_rank_tail(rank, last_lines)),
            next_step=NEXT_STEPS["out_of_memory" if oom else "rank_killed"])
    if cause.kind == "task_exit" and not signal:  # lone_exit: an error code, no traceback
        victims = _victims(findings, {rank})
        return Verdict(
            kind=VerdictKind.RANK_EXITED, severity="critical",
            summary=f"rank {rank} exited with exit code {cause.fields.get('exit_code', '?')}"
                    + (f" on {cause.host}" if cause.host else "")
                    + f", the only rank {cause.fields.get('launcher', 'srun')} saw fail"
                    + (" that had not lost a peer first" if _other_failed_exits(findings, rank) else "")
                    + ", with no traceback in the logs read"
                    + (f"; {_label(victims)} only died because of it" if victims else ""),
            culprit_ranks=(rank,),
            evidence=(_cite(cause), *_rank_tail(rank, last_lines), *_same_last_line(rank, last_lines)),
            next_step=NEXT_STEPS["rank_exited"])
    if cause.kind in ("fatal_signal", "task_exit"):
        return _crash_verdict(rank, cores_by_rank.get(rank), cause, findings, last_lines)
    if cause.kind == "oom_kill":
        return Verdict(kind=VerdictKind.OUT_OF_MEMORY, severity="critical",
                       summary=f"the kernel's OOM killer ended a process of rank {rank}",
                       culprit_ranks=(rank,), evidence=(_cite(cause),),
                       next_step=NEXT_STEPS["out_of_memory"])
    victims = _victims(findings, {rank})
    site = (_user_site_of_frames(cause.fields.get("frames", ""), script_roots(findings))
            or cause.fields.get("site"))
    return Verdict(
        kind=VerdictKind.RANK_EXCEPTION, severity="critical",
        summary=f"rank {rank} failed first: {cause.text[:200]}"
                + (f"; {_label(victims)} only died because of it" if victims else ""),
        culprit_ranks=(rank,), sites=(site,) if site else (),
        evidence=(_cite(cause), *_rank_tail(rank, last_lines)),
        next_step=NEXT_STEPS["rank_exception"])


def _mismatch_verdict(
    mismatches: Sequence[LogFinding],
    findings: Sequence[LogFinding],
    last_lines: Mapping[int, Sequence[str]],
) -> Verdict:
    """Ranks called one collective differently. torch's check (TORCH_DISTRIBUTED_DEBUG=DETAIL)
    prints each rank's fingerprint and the one it differs from: the ranks whose fingerprint is
    not the largest group's differ (a tie names nobody). gloo's check fires on the rank that
    receives the odd data, a peer of the rank that differs: it names nobody."""
    prints: dict[int, tuple[str, str, str]] = {}
    implied: dict[int, tuple[str, str, str]] = {}
    for finding in sorted(mismatches, key=order_key):
        sides: dict[str, int] = {}
        for side in ("a", "b"):
            value = finding.fields.get(f"rank_{side}")
            if value is not None and value.isdigit():
                sides[side] = int(value)
                prints.setdefault(int(value), tuple(  # type: ignore[arg-type]
                    finding.fields.get(f"{name}_{side}", "?") for name in ("op", "shape", "dtypes")))
        if len(sides) == 2:
            # torch's check names the first rank, in rank order, whose fingerprint differs from
            # its own: every rank before it ran what this one ran (what a rank that srun ended
            # before it printed still tells)
            for before in range(sides["b"]):
                if before != sides["a"]:
                    implied.setdefault(before, prints[sides["a"]])
    for before, fingerprint in implied.items():
        prints.setdefault(before, fingerprint)
    noticed = sorted({f.rank for f in mismatches if f.rank is not None})
    site = _common_site([*mismatches, *(f for f in findings if f.kind == "peer_lost")], findings)
    op = next((f.fields["op"] for f in mismatches if f.fields.get("op")), None) or next(
        (f.fields["op"] for f in findings if f.kind == "peer_lost" and f.fields.get("op")), "a collective")
    at = f" at {site}" if site else ""
    evidence = [_cite(f) for f in sorted(mismatches, key=order_key)[:3]]
    groups: dict[tuple[str, str, str], list[int]] = {}
    for member, fingerprint in sorted(prints.items()):
        groups.setdefault(fingerprint, []).append(member)
    ranked = sorted(groups.items(), key=lambda item: (-len(item[1]), item[1]))
    culprits: list[int] = []
    if len(ranked) > 1:
        if len(ranked[0][1]) > len(ranked[1][1]):
            reference = ranked[0]
            culprits = sorted(r for fingerprint, ranks in ranked[1:] for r in ranks)
            summary = (f"{_label(culprits)} called {op}{at} unlike {_label(reference[1])}: "
                       + "; ".join(f"{_label(ranks)} {_fingerprint(fingerprint)}"
                                   for fingerprint, ranks in ranked)
                       + " (torch's collective check, TORCH_DISTRIBUTED_DEBUG=DETAIL)")
        else:
            summary = (f"the ranks called {op}{at} differently: "
                       + "; ".join(f"{_label(ranks)} {_fingerprint(fingerprint)}" for fingerprint, ranks in ranked)
                       + " (torch's collective check): as many on each side, which one diverged "
                       "cannot be told")
        lost = _victims(findings, set(prints))
        if lost:
            summary += f"; {_label(lost)} then lost their peers"
        printed = sorted({f.rank for f in mismatches if f.rank is not None})
        evidence.append(f"{_label(printed)} printed the check's fingerprints (its own and the first "
                        "rank's, in rank order, that differs from it)"
                        + (f"; {_label(sorted(set(prints) - set(printed)))} read from them"
                           if set(prints) - set(printed) else ""))
        next_step = NEXT_STEPS["mismatched_collective"]
    else:
        sizes = next((f for f in mismatches if f.fields.get("received_bytes")), None)
        got = (f" ({sizes.fields['received_bytes']} bytes received where "
               f"{sizes.fields['expected_bytes']} were expected)") if sizes else ""
        where = f" on {_label(noticed)}" if noticed else ""
        summary = (f"gloo found a collective mismatch{where}: the data from a peer did not have "
                   f"the size it expected{got}: the ranks passed tensors of different sizes to "
                   f"{op}{at}, or called different collectives; which rank differs the logs "
                   "read do not say (gloo notices on a peer of that rank)")
        lost = _victims(findings, set(noticed))
        if lost:
            summary += f"; {_label(lost)} then lost their peers"
        next_step = NEXT_STEPS["mismatched_collective_unnamed"]
        for who in noticed[:2]:
            evidence.extend(_rank_tail(who, last_lines, 2))
    return Verdict(kind=VerdictKind.MISMATCHED_COLLECTIVE, severity="critical", summary=summary,
                   culprit_ranks=tuple(culprits), sites=(site,) if site else (),
                   evidence=tuple(evidence), next_step=next_step)


def _fingerprint(fingerprint: tuple[str, str, str]) -> str:
    """``with ALLREDUCE, shape [10], Float``: what a rank ran, as torch's check printed it."""
    op, shape, dtypes = fingerprint
    return f"with {op}, shape {shape}, {dtypes}"


def _common_site(tracebacks: Iterable[LogFinding], findings: Sequence[LogFinding]) -> str | None:
    """The job's own line most of these tracebacks pass through last (their shared call)."""
    roots = script_roots(findings)
    sites = [_user_site_of_frames(f.fields["frames"], roots) for f in tracebacks
             if f.fields.get("frames")]
    counted = Counter(site for site in sites if site)
    return counted.most_common(1)[0][0] if counted else None


def _same_last_line(rank: int, last_lines: Mapping[int, Sequence[str]]) -> tuple[str, ...]:
    """What would make a lone exit lie: every rank hit the same error (a bad argument, a missing
    file), one exited first and srun ended the others before they could. Their last lines say so."""
    def written(lines: Sequence[str]) -> list[str]:  # the rank's own last line, not Slurm's
        return [ln for ln in lines if not ln.startswith(("slurmstepd", "srun:"))][-1:]

    own = written(last_lines.get(rank, ()))
    same = sorted(r for r, lines in last_lines.items() if r != rank and own and written(lines) == own)
    if not same:
        return ()
    return ((f"{_label(same)} last wrote the same line: they may have failed the same way, "
             "ended by srun before they exited"),)


def _rank_tail(rank: int, last_lines: Mapping[int, Sequence[str]], count: int = 5) -> tuple[str, ...]:
    return tuple(f"rank {rank}: {line[:200]}" for line in list(last_lines.get(rank, ()))[-count:])


def _crash_verdict(
    rank: int,
    core: CoreStack | None,
    cause: LogFinding | None,
    findings: Sequence[LogFinding],
    last_lines: Mapping[int, Sequence[str]],
) -> Verdict:
    signal = int(cause.fields.get("signal", "0") or 0) if cause else 0
    name = signal_name(signal) or (core.reason if core and core.reason else "a fatal signal")
    victims = _victims(findings, {rank})
    site = core_site(core) if core else None
    evidence: list[str] = [_cite(cause)] if cause else []
    if core is not None:
        if core.frames:
            evidence.append(f"core {core.path} ({core.tool}): "
                            + (core.reason or "crashing thread") + "; innermost frames:")
            # the Python frames first (they name the code), then the innermost native ones
            python = [f for f in core.frames if not f.native][:5]
            native = [f for f in core.frames if f.native][:4]
            evidence.extend(f"  {f.function} at {f.file}:{f.line or '?'}" for f in python + native)
        else:
            evidence.append(f"core {core.path}: no stack ({core.message})")
    evidence.extend(_rank_tail(rank, last_lines))
    return Verdict(
        kind=VerdictKind.RANK_CRASHED, severity="critical",
        summary=f"rank {rank} crashed first with {name}"
                + (f" on {cause.host}" if cause and cause.host else "")
                + (" (core dumped)" if cause and "core dumped" in cause.text else "")
                + (f"; {_label(victims)} only died because of it" if victims else ""),
        culprit_ranks=(rank,), sites=(site,) if site else (),
        evidence=tuple(evidence),
        next_step=NEXT_STEPS["rank_crashed"])


def _timeout_verdict(
    findings: Sequence[LogFinding],
    last_lines: Mapping[int, Sequence[str]],
    world_size: int | None,
    flight: Mapping[str, object] | None,
) -> Verdict:
    timeouts = [f for f in findings if f.kind == "collective_timeout" and f.rank is not None]
    timed_out = sorted({f.rank for f in timeouts if f.rank is not None})
    first = min(timeouts, key=order_key)
    op = first.fields.get("op") or "a collective"
    ms = first.fields.get("timeout_ms")
    seq = first.fields.get("seq")
    flight_info = dict(flight or {})
    if seq is None and flight_info.get("last_seq") is not None:
        seq = str(flight_info["last_seq"])
    known = set(last_lines) | {f.rank for f in findings if f.rank is not None}
    everyone = set(range(world_size)) if world_size else known
    # A rank whose Flight Recorder dump shows it entered the collective, and that said nothing
    # else, was a waiter cut short before it printed its timeout. A rank that reached it late
    # (its error came after the others' timeouts, e.g. their connections were gone) stays.
    # With the dumps' creation times a rank that entered in time is a waiter even if it then
    # lost a peer before it could time out; without them, only a silent one is.
    reached = {int(r) for r in flight_info.get("reached_ranks") or ()}  # type: ignore[attr-defined]
    spoke = {f.rank for f in findings if f.kind in ("peer_lost", "exception")}
    exonerated = reached if flight_info.get("timed") else reached - spoke
    culprits = sorted(everyone - set(timed_out) - exonerated)
    # monitored_barrier's rank 0 names the ranks that never came: those, not every rank that
    # printed no timeout of its own (the others came and lost rank 0)
    named = {int(r) for f in timeouts for r in f.fields.get("missing_ranks", "").split(",") if r.isdigit()}
    if named:
        culprits = sorted(named)
    cut_short = sorted({f.rank for f in findings if f.kind == "task_terminated" and f.rank in culprits
                        and f.rank is not None})
    where = f"{op}" + (f" (collective #{seq})" if seq else "")
    after = f" after {int(ms) // 1000} s" if ms else ""
    # every waiter is named: one that entered in time (its dump says so) may have ended before
    # its own timeout (a peer lost, srun's termination) and printed none
    waiters = sorted(set(timed_out) | (exonerated & everyone))
    ended = [r for r in waiters if r not in timed_out]
    if ended:
        summary = (f"{_label(waiters)} waited in {where}: {format_int_ranges(timed_out)} timed "
                   f"out{after}, {format_int_ranges(ended)} ended before "
                   f"{'its' if len(ended) == 1 else 'their'} own timeout (Flight Recorder dumps)")
    else:
        summary = f"{_label(timed_out)} timed out waiting in {where}{after}"
    if culprits:
        summary += f"; {_label(culprits)} never reached it"
    evidence = [_cite(first)]
    if cut_short:
        evidence.append(f"{_label(cut_short)} were terminated by srun before they could report: "
                        "a culprit among them cannot be told from a waiter without their "
                        "Flight Recorder dumps")
    for rank in culprits[:4]:
        evidence.extend(_rank_tail(rank, last_lines, 3))
    if flight_info.get("summary"):
        evidence.append(str(flight_info["summary"]))
    site = _user_site_of_frames(first.fields.get("frames", ""), script_roots(findings))
    return Verdict(
        kind=VerdictKind.COLLECTIVE_TIMEOUT, severity="critical", summary=summary,
        culprit_ranks=tuple(culprits), sites=(site,) if site else (),
        evidence=tuple(evidence), next_step=NEXT_STEPS["collective_timeout"])
