"""Name the bad nodes and links from a probe's matrix (pure: Probe -> verdicts).

Rules, in order, each removing what it explains before the next one looks:

1. A node that took no part (no address, no result) or whose chosen interface is down.
2. A node every one of whose pairs failed (connect or transfer, either direction) while at least
   two other nodes answered: the node, not its links. Applied greedily, worst node first.
3. When every pair of the remaining nodes failed: no path at all (the wrong interface, or the
   fabric is down), one verdict rather than a link each. Else each pair that failed: the link.
4. MTU: the nodes whose interface MTU differs from the most common one (a tie names the smaller
   MTU, which cannot take the others' packets); else links whose don't-fragment probe at the
   sender's MTU was lost while a 64-byte datagram came back (a smaller path MTU on the way).
5. Slow: a direction whose every measurement is under a tenth of the median of all
   measurements; a node when every direction into or out of it is slow, else the link.
6. The collective check: the smallest groups whose all_reduce failed or stalled.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable
from collections.abc import Set as AbstractSet

from slurmdiag.snapshot import Probe, ProbeLink, Verdict
from slurmdiag.vocabulary import NodeStatus, VerdictKind

SLOW_FACTOR = 10.0


def drain_line(nodes: Iterable[str], reason: str) -> str:
    reason = reason.replace('"', "'")
    return f'scontrol update NodeName={",".join(nodes)} State=DRAIN Reason="{reason}"'


def _node_next_step(nodes: list[str], reason: str) -> str:
    return (f"{drain_line(nodes, 'slurmdiag probe: ' + reason)} ; relaunch without it: "
            f"sbatch --exclude={','.join(nodes)} …")


def _link_next_step(a: str, b: str) -> str:
    return (f"have the link between {a} and {b} checked (cable, switch port, routes); "
            f"until then relaunch with --exclude={b} (either end will do)")


def _pair(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a <= b else (b, a)


def _failed(link: ProbeLink) -> bool:
    return not link.connect or link.error is not None


def probe_verdicts(probe: Probe | None) -> list[Verdict]:
    if probe is None:
        return []
    verdicts: list[Verdict] = []
    by_name = {n.name: n for n in probe.nodes}
    present = [n.name for n in probe.nodes if n.status == NodeStatus.OK or n.address]
    bad_nodes: dict[str, str] = {}
    for node in probe.nodes:
        if node.status != NodeStatus.OK and not node.address:
            bad_nodes[node.name] = f"its probe did not start or answer ({node.message})"
        elif node.operstate not in (None, "up", "unknown"):
            bad_nodes[node.name] = f"interface {node.interface} is {node.operstate}"
        elif node.status != NodeStatus.OK:
            bad_nodes[node.name] = f"its probe never answered ({node.message})"
    links_of: dict[tuple[str, str], list[ProbeLink]] = {}
    for link in probe.links:
        links_of.setdefault(_pair(link.source, link.target), []).append(link)
    failed = {p for p, ls in links_of.items() if any(_failed(x) for x in ls)}
    # a node that sent no result cannot show its own tests: its pairs fail when the peers' did
    for name in bad_nodes:
        failed |= {p for p in links_of if name in p}
    alive = [n for n in present if n not in bad_nodes]
    while len(alive) >= 3:
        worst = []
        for n in alive:
            pairs = [_pair(n, m) for m in alive if m != n]
            if pairs and all(p in failed for p in pairs):
                worst.append(n)
        # when every pair fails nothing singles a node out; stop there (see probe_no_path)
        if not worst or len(worst) == len(alive):
            break
        name = worst[0]
        errors = sorted({x.error or "" for p in failed if name in p for x in links_of.get(p, ())
                         if x.error})
        bad_nodes[name] = "no other node can reach it" + (f" ({errors[0]})" if errors else "")
        alive.remove(name)
    for name, reason in bad_nodes.items():
        seen = by_name.get(name)
        evidence = [f"{name}: {seen.interface or '?'} {seen.address or '?'} mtu {seen.mtu}"] if seen else []
        evidence += [f"{x.source} -> {x.target}: {x.error}" for p in sorted(failed) if name in p
                     for x in links_of.get(p, ()) if x.error][:6]
        verdicts.append(Verdict(kind=VerdictKind.PROBE_BAD_NODE, severity="critical",
                                summary=f"node {name}: {reason}", evidence=tuple(evidence),
                                next_step=_node_next_step([name], reason)))
    among = [_pair(a, b) for i, a in enumerate(alive) for b in alive[i + 1:]]
    if len(alive) >= 3 and all(p in failed for p in among):
        names = ", ".join(alive)
        ifaces = sorted({f"{n.interface}" for n in probe.nodes if n.name in alive})
        verdicts.append(Verdict(
            kind=VerdictKind.PROBE_NO_PATH, severity="critical",
            summary=f"no two of {names} could exchange data over {', '.join(ifaces)}: the "
            "interface is the wrong one, or its network is down for all of them",
            evidence=tuple(f"{x.source} -> {x.target}: {x.error}" for p in among
                           for x in links_of.get(p, ()) if x.error)[:6],
            next_step="check the interface the job uses (NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME, "
            "slurmdiag probe --ifname) and the fabric's switch"))
        failed -= set(among)
    for a, b in sorted(failed):
        if a in bad_nodes or b in bad_nodes:
            continue
        tests = links_of.get((a, b), [])
        verdicts.append(Verdict(kind=VerdictKind.PROBE_BAD_LINK, severity="critical",
                                summary=f"link {a} <-> {b} fails while both nodes reach the others",
                                evidence=tuple(f"{x.source} -> {x.target}: {x.error or 'ok'}"
                                               for x in tests), next_step=_link_next_step(a, b)))
    verdicts += _mtu_verdicts(probe, set(bad_nodes))
    verdicts += _slow_verdicts(probe, set(bad_nodes))
    verdicts += _collective_verdicts(probe)
    if not verdicts and probe.links:
        verdicts.append(Verdict(
            kind=VerdictKind.PROBE_CLEAN, severity="info",
            summary=f"every pair of the {len(probe.nodes)} nodes connected, moved data both ways at the "
            f"interface MTU, without a slow link ({probe.rounds} rounds)"))
    return verdicts


def _mtu_verdicts(probe: Probe, bad: set[str]) -> list[Verdict]:
    mtus = {n.name: n.mtu for n in probe.nodes if n.mtu and n.name not in bad}
    counts = Counter(mtus.values())
    if len(counts) > 1:
        top = max(counts.values())
        usual = max(m for m, c in counts.items() if c == top)
        odd = sorted(n for n, m in mtus.items() if m != usual)
        dropped = [f"{x.source} -> {x.target}: {x.mtu_size}-byte packet {x.mtu_error}"
                   for x in probe.links if x.mtu_ok is False][:6]
        return [Verdict(
            kind=VerdictKind.PROBE_MTU_MISMATCH, severity="critical",
            summary=f"MTU mismatch: {', '.join(f'{n} ({mtus[n]})' for n in odd)} against "
            f"{usual} on the other nodes",
            evidence=tuple(dropped) or ("no don't-fragment probe was lost",),
            next_step=_node_next_step(odd, f"MTU {mtus[odd[0]]} instead of {usual}")
            + " — or set the same MTU on every node's interface")]
    # A lost echo does not say which way the big packet failed: the probe's own send failing
    # (EMSGSIZE: its route's MTU is smaller) does. One verdict per pair of nodes.
    lost: dict[tuple[str, str], list[ProbeLink]] = {}
    for link in probe.links:
        if link.mtu_ok is False and link.small_ok and link.source not in bad and link.target not in bad:
            lost.setdefault(_pair(link.source, link.target), []).append(link)
    out = []
    for (a, b), links in sorted(lost.items()):
        local = [x for x in links if (x.mtu_error or "").startswith("send failed")]
        where = (f"path {local[0].source} -> {local[0].target}" if len(local) == 1
                 else f"path between {a} and {b}")
        out.append(Verdict(
            kind=VerdictKind.PROBE_PATH_MTU, severity="warning",
            summary=f"{where} drops {links[0].mtu_size}-byte packets (the interface MTU) but "
            "carries small ones",
            evidence=tuple(f"{x.source} -> {x.target}: {x.mtu_error}" for x in links),
            next_step=_link_next_step(a, b)))
    return out


def slow_directions(probe: Probe, bad: AbstractSet[str] = frozenset()) -> set[tuple[str, str]]:
    """(sender, receiver) directions whose every measurement is over SLOW_FACTOR x below the
    median of all (failed tests and ``bad`` nodes left out): what the verdicts call slow, and
    the report's matrix too."""
    return _slow_rates(probe, bad)[0]


def _slow_rates(probe: Probe, bad: AbstractSet[str]
                ) -> tuple[set[tuple[str, str]], dict[tuple[str, str], list[float]], float]:
    # one directed measurement per (sender, receiver): source's upload, the target's download
    rates: dict[tuple[str, str], list[float]] = {}
    for x in probe.links:
        if _failed(x) or x.source in bad or x.target in bad:
            continue
        if x.up_mbps is not None:
            rates.setdefault((x.source, x.target), []).append(x.up_mbps)
        if x.down_mbps is not None:
            rates.setdefault((x.target, x.source), []).append(x.down_mbps)
    every = [r for rs in rates.values() for r in rs]
    if len(every) < 4:
        return set(), rates, 0.0
    median = statistics.median(every)
    return {d for d, rs in rates.items() if all(r < median / SLOW_FACTOR for r in rs)}, rates, median


def _slow_verdicts(probe: Probe, bad: set[str]) -> list[Verdict]:
    slow, rates, median = _slow_rates(probe, bad)
    if not slow:
        return []
    verdicts = []
    names = sorted({n for d in rates for n in d})
    slow_nodes = []
    for n in names:
        out_dirs = [d for d in rates if d[0] == n]
        in_dirs = [d for d in rates if d[1] == n]
        if (len(names) >= 3 and ((out_dirs and all(d in slow for d in out_dirs))
                                 or (in_dirs and all(d in slow for d in in_dirs)))):
            slow_nodes.append(n)
    for n in slow_nodes:
        verdicts.append(Verdict(
            kind=VerdictKind.PROBE_SLOW_NODE, severity="warning",
            summary=f"node {n}: every transfer to or from it is over {SLOW_FACTOR:g}x slower than "
            f"the median {median:.1f} MB/s",
            evidence=tuple(f"{a} -> {b}: {min(rates[(a, b)]):.2f} MB/s" for a, b in sorted(slow)
                           if n in (a, b))[:6],
            next_step=_node_next_step([n], "slow network")))
    for a, b in sorted({_pair(*d) for d in slow}):
        if a in slow_nodes or b in slow_nodes:
            continue
        dirs = [d for d in ((a, b), (b, a)) if d in slow]
        verdicts.append(Verdict(
            kind=VerdictKind.PROBE_SLOW_LINK, severity="warning",
            summary=f"link {a} <-> {b} is slow: "
            + ", ".join(f"{s} -> {t} {min(rates[(s, t)]):.2f} MB/s" for s, t in dirs)
            + f" against a median of {median:.1f} MB/s",
            evidence=tuple(f"{s} -> {t}: {', '.join(f'{r:.2f}' for r in rates[(s, t)])} MB/s"
                           for s, t in dirs),
            next_step=_link_next_step(a, b)))
    return verdicts


def _collective_verdicts(probe: Probe) -> list[Verdict]:
    c = probe.collective
    if c is None or c.status != "failed":
        return []
    sets = [", ".join(g) for g in c.smallest_failing]
    evidence = [e for g in c.groups if not g.ok for e in g.errors][:6]
    return [Verdict(
        kind=VerdictKind.PROBE_COLLECTIVE_FAILED, severity="critical",
        summary="gloo all_reduce failed or stalled; smallest failing set(s) of nodes: "
        + ("; ".join(f"[{s}]" for s in sets) or "none found"),
        evidence=tuple(evidence),
        next_step="the node the link tests name is in this set; else relaunch with "
        f"--exclude={c.smallest_failing[0][-1] if c.smallest_failing else '…'} and probe again")]
