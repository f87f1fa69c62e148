"""Network findings: which interfaces the job's ranks really use, and whether they should.

From ``Node.nics`` and each rank's connections and allowlisted environment:

- ``nic_mismatch``: hosts of one job reach each other over differently named interfaces
  (compared per host, so multi-rail setups where every host uses ib0..ib3 are fine);
- ``nic_loopback`` / ``nic_virtual``: inter-node traffic, NCCL/Gloo interface choice or
  MASTER_ADDR on ``lo`` (or docker0, virbr, veth...) in a job that spans several hosts;
- ``nic_down``: a link in use, or named by NCCL/GLOO_SOCKET_IFNAME, is DOWN;
- ``nic_mtu_mismatch``: the interfaces in use (else same-named ones) differ in MTU across hosts;
- ``nic_env_missing_device``: NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME / NCCL_IB_HCA name a
  device the node lacks (NCCL semantics: comma list, prefix match, ``=`` exact, ``^`` exclude);
- ``ib_port_down``: an InfiniBand port that is not ACTIVE;
- ``nic_master_unreachable``: MASTER_ADDR is an address no node of the job has, and no rank
  holds an established connection to MASTER_ADDR:MASTER_PORT (the store is out of reach).

From ``Snapshot.log_findings``: NCCL's "NET/Socket : Using", "Bootstrap : Using" lines feed the
same interface checks, and PyTorch watchdog timeouts become ``watchdog_timeout`` verdicts
citing SeqNum and OpType; ranks disagreeing on the OpType of one SeqNum is mismatch evidence.

Several "nodes" of an emulated cluster can be one machine. Hosts are told apart by their
non-loopback addresses (else their host name), and checks *between* hosts only run when the job
spans at least two.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from slurmdiag.analysis.model import finding as _verdict
from slurmdiag.hostlist import format_int_ranges
from slurmdiag.parsers.infiniband import IB_PORT_ACTIVE_STATES, parse_sysfs_ib_state
from slurmdiag.safeio import decimal_int
from slurmdiag.snapshot import IbPort, Interface, LogFinding, Node, Snapshot, Verdict
from slurmdiag.vocabulary import NodeStatus, VerdictKind, severity_rank

__all__ = [
    "ib_port_active",
    "interface_matches",
    "nic_findings",
    "parse_nccl_device_list",
    "watchdog_disagreement",
    "watchdog_findings",
]

_VIRTUAL_PREFIXES = ("docker", "virbr", "veth", "br-", "cni", "flannel", "vxlan", "cali", "tun")
_DOWN_STATES = frozenset({"DOWN", "LOWERLAYERDOWN", "NOTPRESENT"})
HostKey = tuple[str, ...]


# ---------------------------------------------------------------------------------------------
# NCCL device list semantics


@dataclass(frozen=True)
class DeviceList:
    """A parsed NCCL_SOCKET_IFNAME / NCCL_IB_HCA value."""

    exclude: bool
    exact: bool
    entries: tuple[tuple[str, int | None], ...]  # (name, port or None)


def parse_nccl_device_list(value: str) -> DeviceList:
    """``^=mlx5_0:1,mlx5_1`` -> exclude, exact, [(mlx5_0, 1), (mlx5_1, None)] (NCCL's rules)."""
    v = value.strip()
    exclude = exact = False
    # NCCL accepts the two prefixes in this order; take either order to be lenient.
    for _ in range(2):
        if v.startswith("^"):
            exclude, v = True, v[1:]
        elif v.startswith("="):
            exact, v = True, v[1:]
    entries = []
    for item in v.split(","):
        item = item.strip()
        if not item:
            continue
        name, _, port = item.partition(":")
        entries.append((name, decimal_int(port)))
    return DeviceList(exclude, exact, tuple(entries))


def interface_matches(name: str, wanted: str, exact: bool) -> bool:
    return name == wanted if exact else name.startswith(wanted)


# ---------------------------------------------------------------------------------------------
# hosts


def _ip(address: str) -> str:
    return address.split("/", 1)[0].split("%", 1)[0]


def _endpoint_ip(endpoint: str) -> str:
    if endpoint.startswith("["):
        return endpoint[1 : endpoint.find("]")]
    host, sep, _ = endpoint.rpartition(":")
    return host if sep else endpoint


def _is_loopback_ip(ip: str) -> bool:
    return ip.startswith("127.") or ip in ("::1", "localhost")


def _routable(ip: str) -> bool:
    return bool(ip) and not _is_loopback_ip(ip) and not ip.lower().startswith("fe80")


def _host_key(node: Node) -> HostKey:
    addresses = sorted(
        {
            _ip(a)
            for i in (node.nics.interfaces if node.nics else ())
            for a in i.addresses
            if _routable(_ip(a))
        }
    )
    if addresses:
        return tuple(addresses)
    return ("host", node.hostname or node.name)


def _is_virtual(name: str) -> bool:
    return name.startswith(_VIRTUAL_PREFIXES)


def _is_down(iface: Interface | None) -> bool:
    return iface is not None and (iface.state or "").upper() in _DOWN_STATES


def _ranks_of(nodes: Iterable[Node]) -> tuple[int, ...]:
    return tuple(sorted({p.rank for n in nodes for p in n.ranks if p.rank is not None}))


def _label(names: Iterable[str]) -> str:
    unique = list(dict.fromkeys(names))
    return ", ".join(unique[:6]) + (f" and {len(unique) - 6} more" if len(unique) > 6 else "")


class _Hosts:
    def __init__(self, snapshot: Snapshot) -> None:
        self.nodes = [n for n in snapshot.nodes if n.status == NodeStatus.OK]
        self.key = {n.name: _host_key(n) for n in self.nodes}
        self.distinct = len(set(self.key.values()))
        self.addr_host: dict[str, HostKey] = {}
        for n in self.nodes:
            for iface in n.nics.interfaces if n.nics else ():
                for a in iface.addresses:
                    if _routable(_ip(a)):
                        self.addr_host[_ip(a)] = self.key[n.name]
        self.by_hostname: dict[str, Node] = {}
        for n in self.nodes:
            for name in (n.hostname, n.name):
                if name:
                    self.by_hostname.setdefault(name, n)
                    self.by_hostname.setdefault(name.split(".", 1)[0], n)

    def multi(self) -> bool:
        return self.distinct >= 2

    def one_per_host(self) -> list[Node]:
        seen: dict[HostKey, Node] = {}
        for n in self.nodes:
            seen.setdefault(self.key[n.name], n)
        return list(seen.values())


# ---------------------------------------------------------------------------------------------
# findings




_STEP_IFNAME = (
    "pin the interface the nodes share: NCCL_SOCKET_IFNAME (and GLOO_SOCKET_IFNAME) to the "
    "fabric interface present on every node, e.g. NCCL_SOCKET_IFNAME=ib0 or =eth0 for an exact "
    "match, or exclude the wrong ones with NCCL_SOCKET_IFNAME=^lo,docker"
)
_STEP_MTU = (
    "make the MTU equal on every node for the interface in use (ip link set dev IF mtu N), or "
    "pin NCCL to an interface whose MTU matches everywhere; mismatched jumbo frames stall "
    "large messages while small ones pass"
)
_STEP_DOWN = (
    "bring the link up or move the job off the node (scontrol update nodename=N state=drain "
    "reason=link-down), and pin NCCL/Gloo to a working interface"
)
_STEP_IB = (
    "check the cable/switch port (ibstat, iblinkinfo); exclude the port with NCCL_IB_HCA=^dev or "
    "drain the node; a port stuck in Polling/Down makes NCCL fall back or hang at connect"
)
_STEP_ENV = (
    "fix the variable to name a device every node has (ip -br link, ibstat -l): NCCL matches "
    "prefixes (eth matches eth0), '=' forces an exact name, '^' excludes"
)


def _connection_findings(snapshot: Snapshot, hosts: _Hosts) -> tuple[list[Verdict], dict]:
    """Checks on the interfaces of inter-host connections; also returns interfaces per host."""
    found: list[Verdict] = []
    used_by_host: dict[HostKey, set[str]] = {}
    ranks_by_host: dict[HostKey, set[int]] = {}
    loop_ranks: dict[str, set[int]] = {}
    down: dict[tuple[str, str], set[int]] = {}
    for node in hosts.nodes:
        own = hosts.key[node.name]
        ifaces = {i.name: i for i in node.nics.interfaces} if node.nics else {}
        for proc in node.ranks:
            for conn in proc.connections:
                remote_host = hosts.addr_host.get(_endpoint_ip(conn.remote))
                if remote_host is None or remote_host == own or not conn.interface:
                    continue
                used_by_host.setdefault(own, set()).add(conn.interface)
                if proc.rank is not None:
                    ranks_by_host.setdefault(own, set()).add(proc.rank)
                if conn.interface == "lo" or _is_virtual(conn.interface):
                    loop_ranks.setdefault(conn.interface, set()).update(
                        [proc.rank] if proc.rank is not None else []
                    )
                if _is_down(ifaces.get(conn.interface)):
                    down.setdefault((node.name, conn.interface), set()).update(
                        [proc.rank] if proc.rank is not None else []
                    )
    for iface, ranks in sorted(loop_ranks.items()):
        kind = "nic_loopback" if iface == "lo" else "nic_virtual"
        found.append(
            _verdict(
                kind,
                "critical",
                f"{_ranks_label(ranks)} reach other nodes over {iface}, which cannot carry "
                "inter-node traffic",
                ranks,
                (),
                _STEP_IFNAME,
            )
        )
    for (node_name, iface), ranks in sorted(down.items()):
        found.append(
            _verdict(
                VerdictKind.NIC_DOWN,
                "critical",
                f"{_ranks_label(ranks)} on {node_name} send inter-node traffic over {iface}, "
                "which is DOWN",
                ranks,
                (),
                _STEP_DOWN,
            )
        )
    if len(used_by_host) >= 2:
        sets = Counter(frozenset(v) for v in used_by_host.values())
        if len(sets) > 1:
            common, count = sets.most_common(1)[0]
            tied = list(sets.values()).count(count) > 1
            odd_hosts = [h for h, v in used_by_host.items() if frozenset(v) != common]
            culprits = (
                () if tied else sorted(r for h in odd_hosts for r in ranks_by_host.get(h, ()))
            )
            names = {h: _host_names(hosts, h) for h in used_by_host}
            evidence = [
                f"{names[h]}: {', '.join(sorted(v))}"
                for h, v in sorted(used_by_host.items(), key=lambda hv: names[hv[0]])
            ]
            found.append(
                _verdict(
                    VerdictKind.NIC_MISMATCH,
                    "warning",
                    "the job's hosts reach each other over different interfaces: "
                    + "; ".join(evidence[:4]),
                    culprits,
                    evidence,
                    _STEP_IFNAME,
                )
            )
    return found, used_by_host


def _host_names(hosts: _Hosts, key: HostKey) -> str:
    return _label(n.name for n in hosts.nodes if hosts.key[n.name] == key)


def _ranks_label(ranks: Iterable[int]) -> str:
    values = sorted(set(ranks))
    if not values:
        return "ranks"
    return f"{'rank' if len(values) == 1 else 'ranks'} {format_int_ranges(values)}"


def _env_values(node: Node, var: str) -> list[str]:
    return list(dict.fromkeys(p.env[var] for p in node.ranks if p.env.get(var)))


def _env_findings(hosts: _Hosts) -> tuple[list[Verdict], dict[str, set[str]]]:
    """Device names in NCCL/Gloo variables checked against each node's devices."""
    # (kind, var, value, missing-or-down names) -> nodes; grouped so 512 nodes make one verdict
    problems: dict[tuple[str, str, str, str], list[Node]] = {}
    named_by_node: dict[str, set[str]] = {}
    for node in hosts.nodes:
        if node.nics is None:
            continue
        ifaces = {i.name: i for i in node.nics.interfaces}
        for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
            for value in _env_values(node, var):
                if not ifaces:
                    continue
                if var == "GLOO_SOCKET_IFNAME":
                    spec = DeviceList(
                        False, True, tuple((n.strip(), None) for n in value.split(",") if n.strip())
                    )
                else:
                    spec = parse_nccl_device_list(value)
                if spec.exclude:
                    continue
                matched = [
                    name
                    for name in ifaces
                    if any(interface_matches(name, w, spec.exact) for w, _ in spec.entries)
                ]
                named_by_node.setdefault(node.name, set()).update(matched)
                # Gloo uses every listed name; NCCL is content with one match of its prefixes.
                absent = [
                    w
                    for w, _ in spec.entries
                    if not any(interface_matches(n, w, spec.exact) for n in ifaces)
                ]
                if (var == "GLOO_SOCKET_IFNAME" and absent) or not matched:
                    key = ("nic_env_missing_device", var, value, ",".join(absent))
                    problems.setdefault(key, []).append(node)
                elif matched and all(_is_down(ifaces[m]) for m in matched):
                    key = ("nic_down", var, value, ",".join(matched))
                    problems.setdefault(key, []).append(node)
        devices = {(p.device, p.port) for p in node.nics.ib_ports}
        device_names = {d for d, _ in devices}
        for value in _env_values(node, "NCCL_IB_HCA"):
            spec = parse_nccl_device_list(value)
            if spec.exclude:
                continue
            absent = []
            for name, port in spec.entries:
                hits = [d for d in device_names if interface_matches(d, name, spec.exact)]
                if not hits or (port is not None and not any((d, port) in devices for d in hits)):
                    absent.append(f"{name}:{port}" if port is not None else name)
            if absent:
                key = ("nic_env_missing_device", "NCCL_IB_HCA", value, ",".join(absent))
                problems.setdefault(key, []).append(node)
    found = []
    for (kind, var, value, names), nodes in sorted(problems.items(), key=lambda kv: kv[0]):
        where = _label(n.name for n in nodes)
        if kind == "nic_down":
            summary = f"{var}={value} selects {names} on {where}, which is DOWN"
            step = _STEP_DOWN
        else:
            summary = f"{var}={value} names {names or value}, which {where} does not have"
            step = _STEP_ENV
        evidence = [
            f"{n.name} has: " + ", ".join(i.name for i in (n.nics.interfaces if n.nics else ()))
            if var != "NCCL_IB_HCA"
            else f"{n.name} has HCAs: "
            + (
                ", ".join(
                    sorted({f"{p.device}:{p.port}" for p in (n.nics.ib_ports if n.nics else ())})
                )
                or "none"
            )
            for n in nodes[:4]
        ]
        found.append(_verdict(kind, "warning", summary, _ranks_of(nodes), evidence, step))
    return found, named_by_node


def _loopback_env_findings(hosts: _Hosts) -> list[Verdict]:
    if not hosts.multi():
        return []
    found = []
    master = [n for n in hosts.nodes for v in _env_values(n, "MASTER_ADDR") if _is_loopback_ip(v)]
    if master:
        found.append(
            _verdict(
                VerdictKind.NIC_LOOPBACK,
                "critical",
                f"MASTER_ADDR points at the loopback address on {_label(n.name for n in master)} "
                "in a job that spans several hosts: the other hosts cannot reach the store",
                _ranks_of(master),
                (),
                "set MASTER_ADDR to the first node's routable name or address, e.g. "
                "$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n1), and make sure it "
                "does not resolve to 127.0.1.1 in /etc/hosts",
            )
        )
    for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        bad = [
            n
            for n in hosts.nodes
            for v in _env_values(n, var)
            if not v.startswith("^")
            and any(
                e[0] == "lo" or e[0].startswith("docker") for e in parse_nccl_device_list(v).entries
            )
        ]
        if bad:
            found.append(
                _verdict(
                    VerdictKind.NIC_LOOPBACK,
                    "critical",
                    f"{var} selects a loopback/container interface on "
                    f"{_label(n.name for n in bad)} in a job that spans several hosts",
                    _ranks_of(bad),
                    (),
                    _STEP_IFNAME,
                )
            )
    return found


def _is_ip_literal(text: str) -> bool:
    return bool(re.fullmatch(r"\d{1,3}(?:\.\d{1,3}){3}|[0-9A-Fa-f:]*:[0-9A-Fa-f:.]*", text))


def _master_findings(hosts: _Hosts) -> list[Verdict]:
    """MASTER_ADDR that is an address of no node, with nobody connected to the store."""
    every_address = {
        _ip(a) for n in hosts.nodes for i in (n.nics.interfaces if n.nics else ()) for a in i.addresses
    }
    if not every_address:
        return []  # no interface data: nothing to compare with
    wanted: dict[tuple[str, str | None], list[tuple[Node, int | None]]] = {}
    for node in hosts.nodes:
        for rank in node.ranks:
            addr = rank.env.get("MASTER_ADDR")
            if addr:
                wanted.setdefault((addr, rank.env.get("MASTER_PORT")), []).append((node, rank.rank))
    found = []
    for (addr, port), users in sorted(wanted.items(), key=lambda kv: kv[0][0]):
        if not _is_ip_literal(addr) or _is_loopback_ip(addr) or addr in every_address:
            continue
        target = f"{addr}:{port}" if port else addr
        conns = [
            (node, rank, c)
            for node, rank in users
            for r in node.ranks
            if r.rank == rank
            for c in r.connections
            if _endpoint_ip(c.remote) == addr
            and (port is None or c.remote.rsplit(":", 1)[-1] == port)
        ]
        if any(c.state == "ESTABLISHED" for _, _, c in conns):
            continue  # something at that address answers: a store outside the job
        ranks = sorted({r for _, r in users if r is not None})
        evidence = [
            f"rank {r} on {n.name}: {c.local} -> {c.remote} {c.state}" for n, r, c in conns[:6]
        ] or [f"no rank has a connection to {target}"]
        if port:
            listeners = sorted(
                {n.name for n in hosts.nodes for r in n.ranks for c in r.connections
                 if c.state == "LISTEN" and c.local.rsplit(":", 1)[-1] == port}
            )
            if listeners:
                evidence.append(f"port {port} is served (LISTEN) on {_label(listeners)}")
        found.append(
            _verdict(
                VerdictKind.NIC_MASTER_UNREACHABLE,
                "critical",
                f"MASTER_ADDR {addr} is not an address of any node of the job and no rank is "
                f"connected to {target}: the ranks cannot reach the rendezvous store",
                ranks,
                evidence,
                "set MASTER_ADDR to the first node of the job, e.g. "
                "$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n1), or an address it "
                "has; check with `ip -br addr` on that node",
            )
        )
    return found


def _mtu_findings(
    hosts: _Hosts,
    used_by_host: dict[HostKey, set[str]],
    named_by_node: dict[str, set[str]],
    log_ifaces: dict[str, set[str]],
) -> list[Verdict]:
    if not hosts.multi():
        return []
    per_host = hosts.one_per_host()
    in_use: dict[str, set[str]] = {}
    for node in per_host:
        names = set(used_by_host.get(hosts.key[node.name], set()))
        names |= named_by_node.get(node.name, set())
        names |= log_ifaces.get(node.name, set())
        in_use[node.name] = {n for n in names if n != "lo"}
    mtus: dict[str, dict[str, int]] = {}  # node -> iface -> mtu
    for node in per_host:
        for iface in node.nics.interfaces if node.nics else ():
            if iface.mtu is not None:
                mtus.setdefault(node.name, {})[iface.name] = iface.mtu
    observed: dict[str, int] = {}
    basis = "in use"
    if all(in_use.get(n.name) for n in per_host):
        for node in per_host:
            values = [mtus.get(node.name, {}).get(i) for i in sorted(in_use[node.name])]
            values_known = [v for v in values if v is not None]
            if values_known:
                observed[node.name] = min(values_known)
        name_label = "the interfaces in use"
    else:
        # Nothing says which interface carries the traffic: compare same-named fabric links.
        basis = "same-named"
        by_name: dict[str, dict[str, int]] = {}
        for node in per_host:
            for iface in node.nics.interfaces if node.nics else ():
                if (
                    iface.name == "lo"
                    or _is_virtual(iface.name)
                    or iface.mtu is None
                    or _is_down(iface)
                    or not iface.addresses
                ):
                    continue
                by_name.setdefault(iface.name, {})[node.name] = iface.mtu
        found = []
        for name, per_node in sorted(by_name.items()):
            if len(per_node) >= 2 and len(set(per_node.values())) > 1:
                found.append(_mtu_verdict(hosts, per_node, name, basis))
        return found
    if len(observed) >= 2 and len(set(observed.values())) > 1:
        return [_mtu_verdict(hosts, observed, name_label, basis)]
    return []


def _mtu_verdict(hosts: _Hosts, values: dict[str, int], what: str, basis: str) -> Verdict:
    counts = Counter(values.values())
    top, n = counts.most_common(1)[0]
    if list(counts.values()).count(n) > 1:
        # a tie: the smaller MTU is usually the node where jumbo frames were not configured
        odd_mtu = min(counts)
        odd = [node for node, v in values.items() if v == odd_mtu]
    else:
        odd = [node for node, v in values.items() if v != top]
    odd_nodes = [
        n for n in hosts.nodes if n.name in odd or hosts.key[n.name] in {hosts.key[o] for o in odd}
    ]
    evidence = [f"{node}: MTU {mtu}" for node, mtu in sorted(values.items())]
    return _verdict(
        VerdictKind.NIC_MTU_MISMATCH,
        "warning",
        f"MTU differs across hosts on {what}: "
        + ", ".join(
            f"{mtu} on {_label(nd for nd, v in sorted(values.items()) if v == mtu)}"
            for mtu in sorted(counts)
        ),
        _ranks_of(odd_nodes),
        evidence + [f"compared: {basis} interfaces"],
        _STEP_MTU,
    )


def ib_port_active(port: IbPort) -> bool:
    """ACTIVE (or ACTIVE_DEFER) by the port's state number; a snapshot written before the
    numbers were kept has the sysfs text or the name, read with the same parser."""
    code = port.state_code if port.state_code is not None else parse_sysfs_ib_state(port.state).code
    return code in IB_PORT_ACTIVE_STATES


def _ib_findings(hosts: _Hosts) -> list[Verdict]:
    active_somewhere: set[tuple[str, int]] = set()
    for node in hosts.nodes:
        for port in node.nics.ib_ports if node.nics else ():
            if ib_port_active(port):
                active_somewhere.add((port.device, port.port))
    found = []
    for node in hosts.one_per_host():
        hca_specs = [parse_nccl_device_list(v) for v in _env_values(node, "NCCL_IB_HCA")]
        down = [
            p
            for p in (node.nics.ib_ports if node.nics else ())
            if not ib_port_active(p)
        ]
        if not down:
            continue
        serious, minor = [], []
        for port in down:
            named = any(
                not spec.exclude
                and any(
                    interface_matches(port.device, name, spec.exact)
                    and (p is None or p == port.port)
                    for name, p in spec.entries
                )
                for spec in hca_specs
            )
            excluded = any(
                spec.exclude
                and any(
                    interface_matches(port.device, name, spec.exact)
                    and (p is None or p == port.port)
                    for name, p in spec.entries
                )
                for spec in hca_specs
            )
            if excluded:
                continue
            if named or (port.device, port.port) in active_somewhere:
                serious.append(port)
            else:
                minor.append(port)
        for ports, severity in ((serious, "warning"), (minor, "info")):
            if not ports:
                continue
            desc = ", ".join(
                f"{p.device} port {p.port} {p.state or '?'}"
                + (f" ({p.phys_state})" if p.phys_state else "")
                for p in ports
            )
            why = (
                "named by NCCL_IB_HCA or active on other nodes"
                if severity == "warning"
                else "down on every node that reported, possibly unused"
            )
            same_host = [n for n in hosts.nodes if hosts.key[n.name] == hosts.key[node.name]]
            found.append(
                _verdict(
                    VerdictKind.IB_PORT_DOWN,
                    severity,
                    f"InfiniBand port not ACTIVE on {node.name}: {desc} ({why})",
                    _ranks_of(same_host) if severity == "warning" else (),
                    (),
                    _STEP_IB,
                )
            )
    return found


# ---------------------------------------------------------------------------------------------
# log findings


def _log_host(finding: LogFinding) -> str | None:
    if finding.host:
        return finding.host
    match = re.search(r"([A-Za-z0-9][\w.-]*):\d+:\d+ \[\d+\] NCCL", finding.text)
    return match.group(1) if match else None


def _log_interfaces(finding: LogFinding) -> list[str]:
    fields = finding.fields
    names: list[str] = []
    for key in ("interfaces", "devices", "interface", "oob_interface"):
        value = fields.get(key)
        if value:
            names.extend(v for v in value.split(",") if v)
    if finding.kind == "nccl_net" and fields.get("network") not in (None, "Socket"):
        # IB device names (mlx5_0:1) are not socket interfaces; only the OOB one is
        names = [fields["oob_interface"]] if fields.get("oob_interface") else []
    if not names:
        match = re.search(r"(?:NET/Socket|Bootstrap) ?: Using (.*)$", finding.text)
        if match:
            for token in match.group(1).split():
                token = re.sub(r"^\[\d+\]", "", token)
                name, sep, _ = token.partition(":")
                if sep and name:
                    names.append(name)
    return list(dict.fromkeys(names))


def _log_findings(
    snapshot: Snapshot, hosts: _Hosts, have_mismatch: bool
) -> tuple[list[Verdict], dict[str, set[str]]]:
    by_host: dict[str, set[str]] = {}
    ranks_by_host: dict[str, set[int]] = {}
    no_device: dict[str, list[LogFinding]] = {}
    for f in snapshot.log_findings:
        if f.kind not in ("nccl_net", "nccl_bootstrap"):
            continue
        host = _log_host(f) or "?"
        if f.fields.get("status") == "no_device":
            no_device.setdefault(host, []).append(f)
            continue
        names = _log_interfaces(f)
        if names:
            by_host.setdefault(host, set()).update(names)
            if f.rank is not None:
                ranks_by_host.setdefault(host, set()).add(f.rank)
    found: list[Verdict] = []
    multi = len(by_host) >= 2 or hosts.multi()
    # node name -> interfaces NCCL said it uses, for the MTU check
    node_ifaces: dict[str, set[str]] = {}
    for host, host_names in by_host.items():
        node = hosts.by_hostname.get(host) or hosts.by_hostname.get(host.split(".", 1)[0])
        if node is not None:
            node_ifaces.setdefault(node.name, set()).update(host_names)
    if multi:
        for bad, kind in (("lo", "nic_loopback"), ("virtual", "nic_virtual")):
            culprit_hosts = sorted(
                h
                for h, names in by_host.items()
                if any((n == "lo") if bad == "lo" else _is_virtual(n) for n in names)
            )
            if culprit_hosts:
                found.append(
                    _verdict(
                        kind,
                        "critical",
                        f"NCCL on {_label(culprit_hosts)} uses "
                        f"{'the loopback interface' if bad == 'lo' else 'a container bridge'} "
                        "for a job that spans several hosts",
                        [r for h in culprit_hosts for r in ranks_by_host.get(h, ())],
                        [f"{h}: {', '.join(sorted(by_host[h]))}" for h in culprit_hosts[:4]],
                        _STEP_IFNAME,
                    )
                )
    if len(by_host) >= 2 and not have_mismatch:
        sets = Counter(frozenset(v) for v in by_host.values())
        if len(sets) > 1:
            common, count = sets.most_common(1)[0]
            tied = list(sets.values()).count(count) > 1
            odd = [h for h, v in by_host.items() if frozenset(v) != common]
            evidence = [f"{h}: {', '.join(sorted(v))}" for h, v in sorted(by_host.items())]
            found.append(
                _verdict(
                    VerdictKind.NIC_MISMATCH,
                    "warning",
                    "NCCL logs show hosts of one job on different interfaces: "
                    + "; ".join(evidence[:4]),
                    () if tied else [r for h in odd for r in ranks_by_host.get(h, ())],
                    evidence,
                    _STEP_IFNAME,
                )
            )
    if no_device:
        found.append(
            _verdict(
                VerdictKind.NIC_ENV_MISSING_DEVICE,
                "warning",
                f"NCCL found no usable interface on {_label(sorted(no_device))}",
                [f.rank for fs in no_device.values() for f in fs if f.rank is not None],
                [fs[0].text[:200] for fs in list(no_device.values())[:3]],
                _STEP_ENV,
            )
        )
    return found, node_ifaces


# ---------------------------------------------------------------------------------------------
# watchdog


@dataclass(frozen=True)
class _Timeout:
    rank: int | None
    seq: int | None
    op: str | None
    pg: str | None
    timeout_ms: str | None
    ran_for_ms: str | None
    finding: LogFinding


def _timeouts(snapshot: Snapshot) -> list[_Timeout]:
    out = []
    for f in snapshot.log_findings:
        if f.kind != "watchdog_timeout":
            continue
        fields = f.fields
        seq = fields.get("seq") or _search(r"SeqNum=(\d+)", f.text)
        op = fields.get("op") or _search(r"OpType=(\w+)", f.text)
        rank = f.rank
        if rank is None:
            found = _search(r"\[[Rr]ank ?(\d+)\]", f.text)
            rank = int(found) if found else None
        if seq is None and op is None:
            continue
        out.append(
            _Timeout(
                rank=rank,
                seq=decimal_int(seq),
                op=op,
                pg=fields.get("pg"),
                timeout_ms=fields.get("timeout_ms") or _search(r"Timeout\(ms\)=(\d+)", f.text),
                ran_for_ms=fields.get("ran_for_ms") or _search(r"ran for (\d+) milli", f.text),
                finding=f,
            )
        )
    return out


def _search(pattern: str, text: str) -> str | None:
    match = re.search(pattern, text)
    return match.group(1) if match else None


def _ops_by_seq(timeouts: list[_Timeout]) -> dict[tuple[str | None, int | None], dict[int, str]]:
    table: dict[tuple[str | None, int | None], dict[int, str]] = {}
    named = {t.pg for t in timeouts if t.pg is not None}
    for t in timeouts:
        if t.rank is not None and t.op:
            pg = t.pg if len(named) > 1 else None
            table.setdefault((pg, t.seq), {})[t.rank] = t.op
    return table


def watchdog_disagreement(snapshot: Snapshot) -> str | None:
    """Evidence line when ranks report different OpTypes for one SeqNum, else None."""
    for (_pg, seq), ops in sorted(
        _ops_by_seq(_timeouts(snapshot)).items(), key=lambda kv: (kv[0][0] or "", kv[0][1] or -1)
    ):
        if len(set(ops.values())) > 1:
            parts = "; ".join(
                f"{op} on {_ranks_label(r for r, o in ops.items() if o == op)}"
                for op in sorted(set(ops.values()))
            )
            return f"NCCL watchdog: SeqNum {seq} is {parts} — the ranks disagree on the collective"
    return None


def watchdog_findings(snapshot: Snapshot) -> list[Verdict]:
    """One ``watchdog_timeout`` verdict per process group whose collectives timed out."""
    timeouts = _timeouts(snapshot)
    if not timeouts:
        return []
    found = []
    # The exception line names the PG, the timeout line before it does not: one group unless
    # several process groups are named.
    named = {t.pg for t in timeouts if t.pg is not None}
    by_pg: dict[str | None, list[_Timeout]] = {}
    for t in timeouts:
        pg = t.pg if len(named) > 1 else (next(iter(named)) if named else None)
        by_pg.setdefault(pg, []).append(t)
    for pg, items in sorted(by_pg.items(), key=lambda kv: kv[0] or ""):
        seqs = sorted({t.seq for t in items if t.seq is not None})
        ranks = sorted({t.rank for t in items if t.rank is not None})
        ops = _ops_by_seq(items)
        disagreeing: list[int] = []
        detail = []
        for (_pg, seq), rank_ops in sorted(ops.items(), key=lambda kv: kv[0][1] or -1):
            counts = Counter(rank_ops.values())
            if len(counts) > 1:
                top, n = counts.most_common(1)[0]
                if list(counts.values()).count(n) == 1:
                    disagreeing.extend(r for r, o in rank_ops.items() if o != top)
                detail.append(
                    f"SeqNum {seq}: "
                    + "; ".join(
                        f"{op} on {_ranks_label(r for r, o in rank_ops.items() if o == op)}"
                        for op in sorted(counts)
                    )
                )
        first = items[0]
        op_names = sorted({t.op for t in items if t.op})
        seq_text = f"SeqNum {format_int_ranges(seqs)}" if seqs else "an unknown SeqNum"
        summary = (
            f"the NCCL watchdog timed out {', '.join(op_names) or 'a collective'} at {seq_text}"
            f"{' on ' + _ranks_label(ranks) if ranks else ''}"
            f"{' after ' + first.ran_for_ms + ' ms' if first.ran_for_ms else ''}"
        )
        if detail:
            summary += ": the ranks disagree on the collective (a mismatched collective)"
        progress = [
            f"rank {t.rank}: last enqueued work {t.finding.fields['last_enqueued']}, "
            f"last completed {t.finding.fields.get('last_completed', '?')}"
            for t in items
            if t.rank is not None and "last_enqueued" in t.finding.fields
        ]
        evidence = (
            detail
            + progress[:8]
            + [
                f"{t.finding.source}:{t.finding.line_no}: {t.finding.text.strip()[:200]}"
                for t in items[:4]
            ]
        )
        if pg is not None:
            evidence.append(f"process group {pg}")
        found.append(
            _verdict(
                VerdictKind.WATCHDOG_TIMEOUT,
                "critical",
                summary,
                disagreeing,
                evidence,
                "the ranks that disagree on the op (or never reached this SeqNum) are the "
                "culprits: dump the Flight Recorder (TORCH_NCCL_TRACE_BUFFER_SIZE=2000) to see "
                "each rank's last collectives; TORCH_NCCL_ASYNC_ERROR_HANDLING=1 aborts promptly",
            )
        )
    return found


# ---------------------------------------------------------------------------------------------


def nic_findings(snapshot: Snapshot) -> list[Verdict]:
    """Every network finding of the snapshot, most severe first within each check."""
    hosts = _Hosts(snapshot)
    found: list[Verdict] = []
    conn, used_by_host = _connection_findings(snapshot, hosts)
    found.extend(conn)
    env, named_by_node = _env_findings(hosts)
    found.extend(env)
    found.extend(_loopback_env_findings(hosts))
    found.extend(_master_findings(hosts))
    logs, log_ifaces = _log_findings(snapshot, hosts, any(v.kind == "nic_mismatch" for v in conn))
    found.extend(logs)
    found.extend(_mtu_findings(hosts, used_by_host, named_by_node, log_ifaces))
    found.extend(_ib_findings(hosts))
    return sorted(found, key=lambda v: severity_rank(v.severity))
