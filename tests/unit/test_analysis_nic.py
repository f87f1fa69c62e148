"""NIC findings from interfaces, connections, NCCL/Gloo variables, IB ports and NCCL logs."""

from __future__ import annotations

from pathlib import Path

import pytest
from snapfactory import collective, node, rank, snap

from slurmdiag.analysis import diagnose
from slurmdiag.analysis.nic import (
    interface_matches,
    nic_findings,
    parse_nccl_device_list,
    watchdog_disagreement,
    watchdog_findings,
)
from slurmdiag.assemble import node_from_document
from slurmdiag.parsers.nccl_log import parse_nccl_log
from slurmdiag.snapshot import Connection, IbPort, Interface, LogFinding, NicState

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


SYSFS_IB = FIXTURES / "net_ib" / "sys_class_infiniband_h100"


def sysfs_ports(**overrides: tuple[str, str]) -> tuple[IbPort, ...]:
    """The real H100 node's /sys/class/infiniband ports, as the collector ships them (``4: ACTIVE``)
    and the controller assembles them; ``overrides`` sets a device's (state, phys_state) text."""
    ports = []
    for state in sorted(SYSFS_IB.glob("*/ports/1/state")):
        files = {name: (state.parent / name).read_text() for name in ("state", "phys_state", "rate", "link_layer")}
        device = state.parents[2].name
        if device in overrides:
            files["state"], files["phys_state"] = overrides[device]
        ports.append({"device": device, "port": 1, **files})
    return node_from_document("n", {"format": 1, "nics": {"ib_ports": ports}}).nics.ib_ports


def nics(*ifaces: Interface, ib: tuple[IbPort, ...] = ()) -> NicState:
    return NicState(
        interfaces=(Interface("lo", "UNKNOWN", 65536, None, ("127.0.0.1/8",)), *ifaces), ib_ports=ib
    )


def eth(name: str, addr: str, mtu: int = 1500, state: str = "UP") -> Interface:
    return Interface(name=name, state=state, mtu=mtu, addresses=(f"{addr}/24",), kind="ether")


def two_hosts(env0=None, env1=None, mtu1: int = 1500, conns0=(), ib1=()):  # type: ignore[no-untyped-def]
    return snap(
        node(
            "node001",
            rank(0, collective("all_reduce"), world=2, env=env0, connections=conns0),
            nics=nics(eth("eth0", "10.0.0.1"), eth("ib0", "10.1.0.1", 2044)),
        ),
        node(
            "node002",
            rank(1, collective("all_reduce"), world=2, env=env1),
            nics=nics(eth("eth0", "10.0.0.2", mtu1), eth("ib0", "10.1.0.2", 2044)),
        ),
    )


def by_kind(verdicts, kind):  # type: ignore[no-untyped-def]
    return [v for v in verdicts if v.kind == kind]


@pytest.mark.parametrize(
    ("value", "exclude", "exact", "entries"),
    [
        ("eth", False, False, (("eth", None),)),
        ("=eth0", False, True, (("eth0", None),)),
        ("^docker,lo", True, False, (("docker", None), ("lo", None))),
        ("^=docker0", True, True, (("docker0", None),)),
        ("mlx5_0:1,mlx5_3", False, False, (("mlx5_0", 1), ("mlx5_3", None))),
    ],
)
def test_nccl_device_list_semantics(value, exclude, exact, entries) -> None:  # type: ignore[no-untyped-def]
    spec = parse_nccl_device_list(value)
    assert (spec.exclude, spec.exact, spec.entries) == (exclude, exact, entries)


def test_prefix_and_exact_matching() -> None:
    assert interface_matches("eth0", "eth", exact=False)
    assert not interface_matches("eth0", "eth", exact=True)
    assert interface_matches("mlx5_10", "mlx5_1", exact=False)  # NCCL's prefix rule


def test_socket_ifname_naming_a_missing_interface() -> None:
    s = two_hosts(env1={"NCCL_SOCKET_IFNAME": "=ens5"})
    (v,) = by_kind(nic_findings(s), "nic_env_missing_device")
    assert v.culprit_ranks == (1,)
    assert "NCCL_SOCKET_IFNAME==ens5" in v.summary and "node002" in v.summary


def test_socket_ifname_prefix_that_matches_is_fine_and_exclusions_never_miss() -> None:
    s = two_hosts(env0={"NCCL_SOCKET_IFNAME": "eth,ens"}, env1={"NCCL_SOCKET_IFNAME": "^docker"})
    assert by_kind(nic_findings(s), "nic_env_missing_device") == []


def test_gloo_ifname_needs_every_listed_name() -> None:
    s = two_hosts(env0={"GLOO_SOCKET_IFNAME": "eth0,eth1"})
    (v,) = by_kind(nic_findings(s), "nic_env_missing_device")
    assert v.culprit_ranks == (0,) and "eth1" in v.summary


def test_ifname_selecting_a_down_link() -> None:
    s = snap(
        node(
            "n1",
            rank(0, collective("barrier"), world=1, env={"NCCL_SOCKET_IFNAME": "eth1"}),
            nics=nics(eth("eth0", "10.0.0.1"), eth("eth1", "10.2.0.1", state="DOWN")),
        )
    )
    (v,) = by_kind(nic_findings(s), "nic_down")
    assert v.culprit_ranks == (0,)


def test_ib_hca_naming_a_device_the_node_lacks() -> None:
    ports = sysfs_ports()
    s = snap(
        node(
            "n1",
            rank(0, collective("barrier"), world=1, env={"NCCL_IB_HCA": "=mlx5_0:1,mlx5_99"}),
            nics=nics(eth("eth0", "10.0.0.1"), ib=tuple(ports)),
        )
    )
    (v,) = by_kind(nic_findings(s), "nic_env_missing_device")
    assert "mlx5_99" in v.summary and "mlx5_0" not in v.summary.split("names")[1]


def test_ib_port_down_from_sysfs_text() -> None:
    # GIVEN a real H100 node's sysfs ports, three of them as the kernel prints a downed port
    down_text = ("1: DOWN", "3: Disabled")
    down = sysfs_ports(mlx5_4=down_text, mlx5_7=down_text, mlx5_8=("2: INIT", "5: LinkUp"))
    healthy = sysfs_ports()
    assert [p.state for p in healthy] == ["ACTIVE"] * len(healthy)
    s = snap(
        node(
            "node001",
            rank(0, collective("all_reduce"), world=2),
            nics=nics(eth("eth0", "10.0.0.1"), ib=tuple(down)),
        ),
        node(
            "node002",
            rank(1, collective("all_reduce"), world=2),
            nics=nics(eth("eth0", "10.0.0.2"), ib=tuple(healthy)),
        ),
    )
    (v,) = by_kind(nic_findings(s), "ib_port_down")
    # THEN active on the other node -> a warning naming the three ports, culprit node001's rank
    assert v.severity == "warning" and v.culprit_ranks == (0,)
    for dev in ("mlx5_4", "mlx5_7", "mlx5_8"):
        assert dev in v.summary
    assert "mlx5_0" not in v.summary and "mlx5_4 port 1 DOWN (Disabled)" in v.summary


def test_ib_port_down_everywhere_is_only_info() -> None:
    ports = sysfs_ports(mlx5_1=("1: DOWN", "3: Disabled"))
    s = snap(
        node(
            "n1",
            rank(0, collective("all_reduce"), world=1),
            nics=nics(eth("eth0", "10.0.0.1"), ib=ports),
        )
    )
    (v,) = by_kind(nic_findings(s), "ib_port_down")
    assert v.severity == "info"


def test_mtu_mismatch_on_same_named_interfaces() -> None:
    s = two_hosts(mtu1=9000)
    (v,) = by_kind(nic_findings(s), "nic_mtu_mismatch")
    assert "1500" in v.summary and "9000" in v.summary
    # a 1:1 tie: the smaller MTU (where jumbo frames were not configured) is the odd one
    assert v.culprit_ranks == (0,)


def test_mtu_mismatch_on_the_interfaces_in_use() -> None:
    conns = (Connection("10.1.0.1:5000", "10.1.0.2:41000", "ESTABLISHED", "ib0"),)
    s = snap(
        node(
            "node001",
            rank(0, collective("all_reduce"), world=3, connections=conns),
            nics=nics(eth("eth0", "10.0.0.1"), eth("ib0", "10.1.0.1", 2044)),
        ),
        node(
            "node002",
            rank(
                1,
                collective("all_reduce"),
                world=3,
                connections=(Connection("10.1.0.2:41000", "10.1.0.1:5000", "ESTABLISHED", "ib0"),),
            ),
            nics=nics(eth("eth0", "10.0.0.2", 9000), eth("ib0", "10.1.0.2", 4092)),
        ),
        node(
            "node003",
            rank(
                2,
                collective("all_reduce"),
                world=3,
                connections=(Connection("10.1.0.3:41000", "10.1.0.1:5000", "ESTABLISHED", "ib0"),),
            ),
            nics=nics(eth("eth0", "10.0.0.3"), eth("ib0", "10.1.0.3", 2044)),
        ),
    )
    found = nic_findings(s)
    (v,) = by_kind(found, "nic_mtu_mismatch")
    assert v.culprit_ranks == (1,)
    assert "4092" in v.summary
    assert any("in use" in e for e in v.evidence)


def test_hosts_reaching_each_other_over_different_interfaces() -> None:
    def conn(local: str, remote: str, iface: str) -> tuple[Connection, ...]:
        return (Connection(f"{local}:5000", f"{remote}:6000", "ESTABLISHED", iface),)

    s = snap(
        node(
            "node001",
            rank(
                0, collective("barrier"), world=3, connections=conn("10.1.0.1", "10.1.0.2", "ib0")
            ),
            nics=nics(eth("eth0", "10.0.0.1"), eth("ib0", "10.1.0.1")),
        ),
        node(
            "node002",
            rank(
                1, collective("barrier"), world=3, connections=conn("10.1.0.2", "10.1.0.1", "ib0")
            ),
            nics=nics(eth("eth0", "10.0.0.2"), eth("ib0", "10.1.0.2")),
        ),
        node(
            "node003",
            rank(
                2, collective("barrier"), world=3, connections=conn("10.0.0.3", "10.0.0.1", "eth0")
            ),
            nics=nics(eth("eth0", "10.0.0.3"), eth("ib0", "10.1.0.3")),
        ),
    )
    (v,) = by_kind(nic_findings(s), "nic_mismatch")
    assert v.culprit_ranks == (2,)


def test_traffic_to_another_host_over_a_down_link() -> None:
    conns = (Connection("10.0.0.1:5000", "10.0.0.2:6000", "ESTABLISHED", "eth0"),)
    s = snap(
        node(
            "node001",
            rank(0, collective("barrier"), world=2, connections=conns),
            nics=nics(eth("eth0", "10.0.0.1", state="DOWN")),
        ),
        node(
            "node002", rank(1, collective("barrier"), world=2), nics=nics(eth("eth0", "10.0.0.2"))
        ),
    )
    (v,) = by_kind(nic_findings(s), "nic_down")
    assert (v.severity, v.culprit_ranks) == ("critical", (0,))


def test_master_addr_on_loopback_across_hosts() -> None:
    s = two_hosts(env0={"MASTER_ADDR": "127.0.1.1"}, env1={"MASTER_ADDR": "127.0.1.1"})
    (v,) = by_kind(nic_findings(s), "nic_loopback")
    assert v.severity == "critical" and v.culprit_ranks == (0, 1)


def test_master_addr_that_no_node_has_and_nobody_reaches() -> None:
    # GIVEN ranks whose MASTER_ADDR is an address of no node (a stale or mistyped one), with
    # the half-open connections a TCPStore client leaves while it retries (as seen here)
    env = {"MASTER_ADDR": "10.255.255.1", "MASTER_PORT": "29511"}
    conns = (Connection("10.0.0.1:53662", "10.255.255.1:29511", "SYN_SENT", "eth0"),
             Connection("[::]:29511", "[::]:0", "LISTEN", None))
    s = two_hosts(env0=env, env1=env, conns0=conns)
    # THEN one critical finding names the address, the ranks and what their sockets show
    (v,) = by_kind(nic_findings(s), "nic_master_unreachable")
    assert v.severity == "critical" and v.culprit_ranks == (0, 1)
    assert "10.255.255.1" in v.summary
    assert any("SYN_SENT" in e for e in v.evidence)
    assert any("LISTEN" in e and "node001" in e for e in v.evidence)


@pytest.mark.parametrize(
    ("addr", "state"),
    [("10.0.0.1", "SYN_SENT"),          # an address of node001: the right place
     ("node001", "SYN_SENT"),           # a name: not judged from here
     ("10.255.255.1", "ESTABLISHED")],  # outside the job, but it answers (an external store)
)
def test_master_addr_that_is_fine_or_cannot_be_judged(addr: str, state: str) -> None:
    env = {"MASTER_ADDR": addr, "MASTER_PORT": "29511"}
    conns = (Connection("10.0.0.2:53662", f"{addr}:29511", state, "eth0"),)
    s = two_hosts(env0=env, env1=env, conns0=conns)
    assert by_kind(nic_findings(s), "nic_master_unreachable") == []


def test_emulated_nodes_on_one_host_get_no_between_host_findings() -> None:
    # every "node" of the local cluster is the same machine: same addresses, traffic over lo
    same = nics(eth("eth0", "10.9.9.9"))
    conns = (Connection("127.0.0.1:5000", "127.0.0.1:6000", "ESTABLISHED", "lo"),)
    env = {"MASTER_ADDR": "127.0.0.1", "GLOO_SOCKET_IFNAME": "lo"}
    s = snap(
        node(
            "node001",
            rank(0, collective("all_reduce"), world=2, env=env, connections=conns),
            nics=same,
            hostname="box",
        ),
        node(
            "node002",
            rank(1, collective("all_reduce"), world=2, env=env, connections=conns),
            nics=same,
            hostname="box",
        ),
    )
    assert nic_findings(s) == []


def test_real_nccl_log_of_16_nodes_agreeing_on_ib0_has_no_finding() -> None:
    text = FIXTURES / "nccl" / "jeanzay_v100_16node_nccl2.7.8_multi_if_bootstrap_HEAD600.log"
    findings = parse_nccl_log(text.read_text(), "job.out")
    s = snap(node("n1", rank(0, collective("all_reduce"), world=1)), log_findings=findings)
    assert nic_findings(s) == []


def test_nccl_log_hosts_on_different_interfaces_and_loopback() -> None:
    lines = [
        LogFinding(
            "job.out",
            1,
            "nccl_net",
            "gpu1:1:1 [0] NCCL INFO NET/Socket : Using [0]ib0:10.1.0.1<0>",
            rank=0,
            host="gpu1",
            fields={"network": "Socket", "devices": "ib0"},
        ),
        LogFinding(
            "job.out",
            2,
            "nccl_net",
            "gpu2:1:1 [0] NCCL INFO NET/Socket : Using [0]ib0:10.1.0.2<0>",
            rank=1,
            host="gpu2",
            fields={"network": "Socket", "devices": "ib0"},
        ),
        LogFinding(
            "job.out",
            3,
            "nccl_bootstrap",
            "gpu3:1:1 [0] NCCL INFO Bootstrap : Using lo:127.0.0.1<0>",
            rank=2,
            host="gpu3",
            fields={},
        ),
    ]
    s = snap(node("n1", rank(0, collective("all_reduce"), world=3)), log_findings=lines)
    found = nic_findings(s)
    (loop,) = by_kind(found, "nic_loopback")
    assert loop.culprit_ranks == (2,)
    (mismatch,) = by_kind(found, "nic_mismatch")
    assert mismatch.culprit_ranks == (2,)


def test_watchdog_timeouts_from_real_log_with_disagreeing_optypes() -> None:
    # GIVEN the real log where rank 7 times out in BROADCAST and rank 3 in ALLREDUCE at SeqNum 80078
    text = FIXTURES / "nccl" / "issue_NVIDIA_nccl1409_watchdog_mixed_optypes_indented.txt"
    findings = parse_nccl_log(text.read_text(), "job.out")
    s = snap(node("n1"), log_findings=findings)
    (v,) = watchdog_findings(s)
    assert v.kind == "watchdog_timeout" and v.severity == "critical"
    assert "80078" in v.summary and "disagree" in v.summary
    assert "ALLREDUCE" in v.summary and "BROADCAST" in v.summary
    line = watchdog_disagreement(s)
    assert line is not None and "SeqNum 80078" in line
    assert "BROADCAST on rank 7" in line and "ALLREDUCE on rank 3" in line


def test_watchdog_old_format_is_cited() -> None:
    text = FIXTURES / "nccl" / "issue_OFA271_watchdog_timeout_torch1.x_old_format.txt"
    s = snap(node("n1"), log_findings=parse_nccl_log(text.read_text(), "job.out"))
    (v,) = watchdog_findings(s)
    assert "SeqNum" in v.summary and v.culprit_ranks == ()


def test_watchdog_disagreement_is_evidence_for_the_mismatch_verdict() -> None:
    text = FIXTURES / "nccl" / "issue_NVIDIA_nccl1409_watchdog_mixed_optypes_indented.txt"
    findings = parse_nccl_log(text.read_text(), "job.out")
    s = snap(
        node(
            "n1",
            *[
                rank(r, *[collective("broadcast" if r == 7 else "all_reduce")] * 3, world=8)
                for r in range(8)
            ],
        ),
        log_findings=findings,
    )
    a = diagnose(s)
    assert [v.kind for v in a.verdicts] == ["mismatched_collective", "watchdog_timeout"]
    assert a.verdicts[0].culprit_ranks == (7,)
    assert any("SeqNum 80078" in e for e in a.verdicts[0].evidence)
