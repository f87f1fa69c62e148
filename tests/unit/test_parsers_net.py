"""Tests of slurmdiag.parsers.net on real outputs (tests/fixtures/net_ib/) and live /proc.

All fixture inputs are public outputs listed in the shared SOURCES.md.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from slurmdiag.errors import ParseError
from slurmdiag.parsers.net import (
    parse_ibstat,
    parse_ibstatus,
    parse_ibv_devinfo,
    parse_ip_addr_json,
    parse_ip_link_json,
    parse_proc_net_tcp,
    parse_sys_class_infiniband,
)
from slurmdiag.snapshot import IbPort, Interface

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "net_ib"


def read(name: str) -> str:
    return (FIXTURES / name).read_text()


# --- ip -j -----------------------------------------------------------------------------------


def test_ip_d_j_addr_reads_addresses_and_detail_kinds() -> None:
    # GIVEN `ip -d -j addr` of a workstation (detail keys, wireguard/sit/tun links)
    interfaces = parse_ip_addr_json(read("ip_d_j_addr_netplan_laptop.json"))
    # THEN every link is there, in order
    assert [i.name for i in interfaces] == [
        "lo",
        "enp0s31f6",
        "wlan0",
        "wg0",
        "wwan0",
        "tun0",
        "tun1",
    ]
    by_name = {i.name: i for i in interfaces}
    assert by_name["lo"] == Interface(
        name="lo", state="UNKNOWN", mtu=65536, addresses=("127.0.0.1/8", "::1/128"), kind="loopback"
    )
    assert by_name["enp0s31f6"].addresses[0] == "192.168.178.62/24"
    assert by_name["enp0s31f6"].kind == "ether" and by_name["enp0s31f6"].state == "UP"
    # AND the -d linkinfo kind wins over link_type "none"
    assert by_name["wg0"].kind == "wireguard" and by_name["wg0"].mtu == 1420
    assert by_name["wwan0"].state == "DOWN" and by_name["wwan0"].addresses == ()


def test_ip_j_link_ipoib_links() -> None:
    # GIVEN `ip -j link` of 8 IPoIB links with 20-byte hardware addresses
    interfaces = parse_ip_link_json(read("ip_j_link_ib_8x_ibpNNs0.json"))
    # THEN all are infiniband, up, MTU 2044
    assert len(interfaces) == 8
    assert interfaces[0] == Interface(name="ibp12s0", state="UP", mtu=2044, kind="infiniband")
    assert interfaces[-1].name == "ibp204s0"
    assert {i.kind for i in interfaces} == {"infiniband"}


def test_ip_json_rejects_text_output() -> None:
    # GIVEN `ip link` text output instead of JSON
    with pytest.raises(ParseError):
        parse_ip_link_json(read("ip_link_ib0_ipoib_azure_aks.txt"))


# --- ibstat / ibstatus / ibv_devinfo ---------------------------------------------------------


def test_ibstat_space_indented_with_ibpanic_trailer() -> None:
    # GIVEN ibstat (8-space indent) that failed on mlx5_8 after 8 devices ("ibpanic:" line)
    ports = parse_ibstat(read("ibstat_a100_azure_ibpanic_trailer.txt"))
    # THEN the 8 ports printed before the failure are read
    assert [p.device for p in ports] == [f"mlx5_{i}" for i in range(8)]
    assert ports[0] == IbPort(
        device="mlx5_0",
        port=1,
        state="Active",
        phys_state="LinkUp",
        rate="200 Gb/sec",
        link_layer="InfiniBand",
    )


def test_ibstat_tab_indented_with_down_disabled_ports() -> None:
    # GIVEN TAB-indented ibstat: CX-7 IB ports and CX-6 Dx Ethernet ports, some Down/Disabled
    ports = parse_ibstat(read("ibstat_h100_some_ports_down.txt"))
    # THEN the down ones are visible with their rate 40
    down = [p for p in ports if p.state == "Down"]
    assert [(p.device, p.phys_state, p.rate, p.link_layer) for p in down] == [
        ("mlx5_2", "Disabled", "40 Gb/sec", "Ethernet"),
        ("mlx5_7", "Disabled", "40 Gb/sec", "Ethernet"),
        ("mlx5_8", "Disabled", "40 Gb/sec", "Ethernet"),
    ]
    assert len(ports) == 12
    assert sum(p.link_layer == "InfiniBand" and p.state == "Active" for p in ports) == 8


def test_ibstat_roce_polling() -> None:
    # GIVEN RoCE ports (Link layer Ethernet) with one in Polling
    ports = parse_ibstat(read("ibstat_h100_roce_ethernet_polling.txt"))
    by_device = {p.device: p for p in ports}
    # THEN
    assert by_device["mlx5_11"] == IbPort(
        device="mlx5_11",
        port=1,
        state="Down",
        phys_state="Polling",
        rate="40 Gb/sec",
        link_layer="Ethernet",
    )
    assert by_device["mlx5_5"].phys_state == "Disabled"
    assert {p.link_layer for p in ports} == {"Ethernet"}


def test_ibstat_all_active_includes_bond() -> None:
    # GIVEN 8x NDR plus an Ethernet bond device
    ports = parse_ibstat(read("ibstat_h100_ndr_all_active.txt"))
    # THEN
    assert len(ports) == 9
    assert {p.state for p in ports} == {"Active"}
    assert ports[-1].device == "mlx5_bond_0" and ports[-1].rate == "200 Gb/sec"


def test_ibstat_rejects_other_text() -> None:
    with pytest.raises(ParseError):
        parse_ibstat(read("ibv_devinfo_azure_mlx5_an0_accelnet_ethernet.txt"))


def test_ibstatus_numbers_normalised() -> None:
    # GIVEN ibstatus: "state: 4: ACTIVE", "phys state: 5: LinkUp", "rate: 200 Gb/sec (4X HDR)"
    ports = parse_ibstatus(read("ibstatus_a100_hdr.txt"))
    # THEN the states read as ibstat's words and the rate is kept whole
    assert ports[0] == IbPort(
        device="mlx5_0",
        port=1,
        state="Active",
        phys_state="LinkUp",
        rate="200 Gb/sec (4X HDR)",
        link_layer="InfiniBand",
    )
    assert len(ports) == 9


def test_ibv_devinfo_two_hcas_tab_aligned() -> None:
    # GIVEN ibv_devinfo with an IB VF and an Ethernet VF
    ports = parse_ibv_devinfo(read("ibv_devinfo_azure_hbv_cx6vf_plus_cx4_ethernet.txt"))
    # THEN "PORT_ACTIVE (4)" reads Active; rate needs -v and stays None
    assert ports == (
        IbPort(device="mlx5_0", port=1, state="Active", link_layer="InfiniBand"),
        IbPort(device="mlx5_1", port=1, state="Active", link_layer="Ethernet"),
    )


def test_ibv_devinfo_device_not_named_mlx5_n() -> None:
    # GIVEN Azure accelerated networking: device mlx5_an0
    (port,) = parse_ibv_devinfo(read("ibv_devinfo_azure_mlx5_an0_accelnet_ethernet.txt"))
    assert (port.device, port.state, port.link_layer) == ("mlx5_an0", "Active", "Ethernet")


# --- /sys/class/infiniband -------------------------------------------------------------------


def test_sys_class_infiniband_tree() -> None:
    # GIVEN the files of a captured /sys/class/infiniband tree (values without newline)
    root = FIXTURES / "sys_class_infiniband_h100"
    files = {
        str(path.relative_to(root)): path.read_text() for path in root.rglob("*") if path.is_file()
    }
    # WHEN parsed
    ports = parse_sys_class_infiniband(files)
    # THEN one port per device, counters ignored, "4: ACTIVE" normalised
    assert [p.device for p in ports] == [
        "mlx5_0",
        "mlx5_1",
        "mlx5_4",
        "mlx5_5",
        "mlx5_6",
        "mlx5_7",
        "mlx5_8",
        "mlx5_9",
        "mlx5_bond_0",
    ]
    assert ports[0] == IbPort(
        device="mlx5_0",
        port=1,
        state="Active",
        phys_state="LinkUp",
        rate="400 Gb/sec (4X NDR)",
        link_layer="InfiniBand",
    )
    assert (ports[-1].rate, ports[-1].link_layer) == ("200 Gb/sec (2X NDR)", "Ethernet")


def test_sys_class_infiniband_accepts_absolute_keys_with_newlines() -> None:
    # GIVEN the same values as real sysfs gives them: absolute paths, trailing newline
    root = FIXTURES / "sys_class_infiniband_h100" / "mlx5_0" / "ports" / "1"
    files = {
        f"/sys/class/infiniband/mlx5_0/ports/1/{name}": (root / name).read_text() + "\n"
        for name in ("state", "phys_state", "rate", "link_layer")
    }
    # THEN the port reads the same
    (port,) = parse_sys_class_infiniband(files)
    assert (port.state, port.phys_state, port.rate) == ("Active", "LinkUp", "400 Gb/sec (4X NDR)")


# --- /proc/net/tcp ---------------------------------------------------------------------------


def test_proc_net_tcp_sees_a_live_connection() -> None:
    # GIVEN a listening socket and a connection to it on the loopback, open right now
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = server.accept()
            with accepted:
                client_port = client.getsockname()[1]
                # WHEN this process's /proc/net/tcp is read and parsed
                sockets = parse_proc_net_tcp(Path("/proc/self/net/tcp").read_text())
    # THEN the listener and both ends of the connection are there, decoded
    server_side = sorted((s.remote, s.state) for s in sockets if s.local == f"127.0.0.1:{port}")
    assert server_side == [
        ("0.0.0.0:0", "LISTEN"),
        (f"127.0.0.1:{client_port}", "ESTABLISHED"),
    ]
    (client_row,) = [s for s in sockets if s.local == f"127.0.0.1:{client_port}"]
    assert client_row.remote == f"127.0.0.1:{port}"
    assert client_row.state == "ESTABLISHED"
    assert client_row.inode > 0


def test_proc_net_tcp6_shows_ipv4_mapped_peers_as_ipv4() -> None:
    # GIVEN a dual-stack IPv6 listener and an IPv4 client connected to it, open right now
    if not socket.has_ipv6:
        pytest.skip("no IPv6 support in this Python")
    try:
        server = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    except OSError:
        pytest.skip("no IPv6 in this kernel")
    with server:
        server.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        server.bind(("::", 0))
        server.listen(1)
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = server.accept()
            with accepted:
                client_port = client.getsockname()[1]
                # WHEN /proc/self/net/tcp6 is parsed
                sockets = parse_proc_net_tcp(Path("/proc/self/net/tcp6").read_text())
    # THEN the listener is "[::]:port" and the accepted end reads as plain IPv4
    rows = {(s.local, s.remote, s.state) for s in sockets}
    assert (f"[::]:{port}", "[::]:0", "LISTEN") in rows
    assert (f"127.0.0.1:{port}", f"127.0.0.1:{client_port}", "ESTABLISHED") in rows


def test_proc_net_tcp_rejects_other_text() -> None:
    with pytest.raises(ParseError):
        parse_proc_net_tcp(read("ip_link_ib0_ipoib_azure_aks.txt"))
