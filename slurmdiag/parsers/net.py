"""Parsers for network state: ``ip -j``, ibstat, ibstatus, ibv_devinfo, sysfs, /proc/net/tcp.

InfiniBand port states are normalised to ibstat's words whatever the source: ``state`` is
one of Down, Initializing, Armed, Active, ActiveDefer; ``phys_state`` one of Sleep, Polling,
Disabled, PortConfigurationTraining, LinkUp, LinkErrorRecovery, PhyTest. ``rate`` always
starts with the number of Gb/s (ibstat's bare ``400`` becomes ``400 Gb/sec``; sysfs and
ibstatus keep their ``400 Gb/sec (4X NDR)``).
"""

from __future__ import annotations

import ipaddress
import json
import re
import struct
from collections.abc import Mapping
from typing import Any, NamedTuple

from slurmdiag.errors import ParseError
from slurmdiag.safeio import decimal_int
from slurmdiag.snapshot import IbPort, Interface

__all__ = [
    "TcpSocket",
    "parse_ibstat",
    "parse_ibstatus",
    "parse_ibv_devinfo",
    "parse_ip_addr_json",
    "parse_ip_link_json",
    "parse_proc_net_tcp",
    "parse_sys_class_infiniband",
]

# ---------------------------------------------------------------------------------------------
# ip -j


def _load_json_list(text: str, what: str) -> list[Any]:
    if not text.strip():
        return []
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError(f"{what} output is not JSON: {exc}") from None
    if not isinstance(data, list):
        raise ParseError(f"{what} output must be a JSON list, got {type(data).__name__}")
    return data


def _interface_from_json(item: dict[str, Any]) -> Interface:
    info_kind = (item.get("linkinfo") or {}).get("info_kind")
    link_type = item.get("link_type")
    addresses = tuple(
        f"{addr['local']}/{addr['prefixlen']}" if "prefixlen" in addr else str(addr["local"])
        for addr in item.get("addr_info") or ()
        if isinstance(addr, dict) and addr.get("local")
    )
    mtu = item.get("mtu")
    return Interface(
        name=str(item.get("ifname")),
        state=item.get("operstate"),
        mtu=mtu if isinstance(mtu, int) else None,
        addresses=addresses,
        kind=str(info_kind or link_type) if (info_kind or link_type) else None,
    )


def parse_ip_addr_json(text: str) -> tuple[Interface, ...]:
    """Parse ``ip -j addr`` / ``ip -d -j addr``; addresses are ``ip/prefixlen``.

    ``kind`` is the ``-d`` linkinfo kind when present (bridge, vlan, bond, wireguard, ...),
    else ``link_type`` (loopback, ether, infiniband, none).
    """
    interfaces = []
    for item in _load_json_list(text, "ip -j addr"):
        if isinstance(item, dict) and item.get("ifname"):
            interfaces.append(_interface_from_json(item))
    return tuple(interfaces)


def parse_ip_link_json(text: str) -> tuple[Interface, ...]:
    """Parse ``ip -j link`` (no addresses; IPoIB links have a 20-byte ``address``)."""
    return parse_ip_addr_json(text)


# ---------------------------------------------------------------------------------------------
# InfiniBand

_STATE_BY_NUMBER = {1: "Down", 2: "Initializing", 3: "Armed", 4: "Active", 5: "ActiveDefer"}
_PHYS_BY_NUMBER = {
    1: "Sleep",
    2: "Polling",
    3: "Disabled",
    4: "PortConfigurationTraining",
    5: "LinkUp",
    6: "LinkErrorRecovery",
    7: "PhyTest",
}
_STATE_BY_WORD = {name.upper(): name for name in _STATE_BY_NUMBER.values()}
_STATE_BY_WORD.update({"INIT": "Initializing", "ACTIVE_DEFER": "ActiveDefer"})
_PHYS_BY_WORD = {name.upper(): name for name in _PHYS_BY_NUMBER.values()}
_PHYS_BY_WORD.update({"LINK_UP": "LinkUp", "LINKUP": "LinkUp"})
_NUMBER_IN_TEXT_RE = re.compile(r"(?:^|\()\s*(\d+)\s*(?::|\))")


def _normalise(value: str | None, by_number: dict[int, str], by_word: dict[str, str]) -> str | None:
    """``4: ACTIVE`` (sysfs), ``PORT_ACTIVE (4)`` (ibv_devinfo), ``Active`` (ibstat) -> Active."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    number = _NUMBER_IN_TEXT_RE.search(value)
    if number and int(number.group(1)) in by_number:
        return by_number[int(number.group(1))]
    word = re.sub(r"^PORT_", "", value.upper())
    return by_word.get(word, value)


def _state(value: str | None) -> str | None:
    return _normalise(value, _STATE_BY_NUMBER, _STATE_BY_WORD)


def _phys_state(value: str | None) -> str | None:
    return _normalise(value, _PHYS_BY_NUMBER, _PHYS_BY_WORD)


def _rate(value: str | None) -> str | None:
    if value is None or not value.strip():
        return None
    value = value.strip()
    return f"{value} Gb/sec" if re.fullmatch(r"\d+(?:\.\d+)?", value) else value


_CA_RE = re.compile(r"^\s*CA '(?P<device>[^']+)'")
_IBSTAT_PORT_RE = re.compile(r"^\s*Port (?P<port>\d+):\s*$")
_IBSTAT_FIELD_RE = re.compile(r"^\s*(?P<key>[A-Za-z][A-Za-z ]*?)\s*:\s*(?P<value>.*?)\s*$")


def parse_ibstat(text: str) -> tuple[IbPort, ...]:
    """Parse ``ibstat`` (TAB- or space-indented); an ``ibpanic:`` trailer ends the output."""
    ports: list[IbPort] = []
    device: str | None = None
    current: dict[str, str] | None = None
    port_no = 0
    seen_ca = False

    def flush() -> None:
        if device is not None and current is not None:
            ports.append(
                IbPort(
                    device=device,
                    port=port_no,
                    state=_state(current.get("State")),
                    phys_state=_phys_state(current.get("Physical state")),
                    rate=_rate(current.get("Rate")),
                    link_layer=current.get("Link layer"),
                )
            )

    for line in text.splitlines():
        if line.startswith(("ibpanic:", "ibwarn:")):
            continue
        ca = _CA_RE.match(line)
        if ca:
            flush()
            device, current, seen_ca = ca.group("device"), None, True
            continue
        port = _IBSTAT_PORT_RE.match(line)
        if port and device is not None:
            flush()
            port_no, current = int(port.group("port")), {}
            continue
        field = _IBSTAT_FIELD_RE.match(line)
        if field and current is not None:
            current[field.group("key")] = field.group("value")
    flush()
    if not seen_ca and text.strip() and "ibpanic:" not in text:
        raise ParseError("not ibstat output: no \"CA '...'\" line")
    return tuple(ports)


_IBSTATUS_HEADER_RE = re.compile(
    r"^Infiniband device '(?P<device>[^']+)' port (?P<port>\d+) status:"
)


def parse_ibstatus(text: str) -> tuple[IbPort, ...]:
    """Parse ``ibstatus`` (``Infiniband device 'mlx5_0' port 1 status:`` blocks)."""
    ports: list[IbPort] = []
    blocks: list[tuple[str, int, dict[str, str]]] = []
    for line in text.splitlines():
        header = _IBSTATUS_HEADER_RE.match(line)
        if header:
            blocks.append((header.group("device"), int(header.group("port")), {}))
            continue
        if blocks and ":" in line:
            key, _, value = line.strip().partition(":")
            blocks[-1][2][key.strip()] = value.strip()
    if not blocks and text.strip():
        raise ParseError("not ibstatus output: no \"Infiniband device '...' port N status:\" line")
    for device, port, fields in blocks:
        ports.append(
            IbPort(
                device=device,
                port=port,
                state=_state(fields.get("state")),
                phys_state=_phys_state(fields.get("phys state")),
                rate=_rate(fields.get("rate")),
                link_layer=fields.get("link_layer"),
            )
        )
    return tuple(ports)


_HCA_RE = re.compile(r"^hca_id:\s*(?P<device>\S+)")
_IBV_PORT_RE = re.compile(r"^\s*port:\s*(?P<port>\d+)\s*$")
_IBV_FIELD_RE = re.compile(r"^\s+(?P<key>[a-z_]+):\s*(?P<value>.*?)\s*$")


def parse_ibv_devinfo(text: str) -> tuple[IbPort, ...]:
    """Parse ``ibv_devinfo`` (TAB-aligned ``hca_id:`` blocks, one ``port:`` block per port)."""
    ports: list[IbPort] = []
    device: str | None = None
    current: dict[str, str] | None = None
    port_no = 0
    seen_hca = False

    def flush() -> None:
        if device is not None and current is not None:
            ports.append(
                IbPort(
                    device=device,
                    port=port_no,
                    state=_state(current.get("state")),
                    phys_state=_phys_state(current.get("phys_state")),
                    rate=None,  # only -v prints active_width/active_speed
                    link_layer=current.get("link_layer"),
                )
            )

    for line in text.splitlines():
        hca = _HCA_RE.match(line)
        if hca:
            flush()
            device, current, seen_hca = hca.group("device"), None, True
            continue
        port = _IBV_PORT_RE.match(line)
        if port and device is not None:
            flush()
            port_no, current = int(port.group("port")), {}
            continue
        field = _IBV_FIELD_RE.match(line)
        if field and current is not None:
            current.setdefault(field.group("key"), field.group("value"))
    flush()
    if not seen_hca and text.strip() and "No IB devices found" not in text:
        raise ParseError("not ibv_devinfo output: no 'hca_id:' line")
    return tuple(ports)


def parse_sys_class_infiniband(files: Mapping[str, str]) -> tuple[IbPort, ...]:
    """Build ports from ``/sys/class/infiniband`` files, keyed ``mlx5_0/ports/1/state``.

    Keys may carry any leading path (``/sys/class/infiniband/...``); counters are ignored.
    Ports come out sorted by device then port.
    """
    found: dict[tuple[str, int], dict[str, str]] = {}
    for path, content in files.items():
        parts = [p for p in path.replace("\\", "/").split("/") if p]
        port_number = decimal_int(parts[-2]) if len(parts) >= 4 else None
        if port_number is None or parts[-3] != "ports":
            continue
        device, port, attribute = parts[-4], port_number, parts[-1]
        found.setdefault((device, port), {})[attribute] = content.strip()
    ports = []
    for (device, port), attrs in sorted(found.items()):
        ports.append(
            IbPort(
                device=device,
                port=port,
                state=_state(attrs.get("state")),
                phys_state=_phys_state(attrs.get("phys_state")),
                rate=_rate(attrs.get("rate")),
                link_layer=attrs.get("link_layer") or None,
            )
        )
    return tuple(ports)


# ---------------------------------------------------------------------------------------------
# /proc/net/tcp, /proc/net/tcp6

_TCP_STATES = {
    1: "ESTABLISHED",
    2: "SYN_SENT",
    3: "SYN_RECV",
    4: "FIN_WAIT1",
    5: "FIN_WAIT2",
    6: "TIME_WAIT",
    7: "CLOSE",
    8: "CLOSE_WAIT",
    9: "LAST_ACK",
    10: "LISTEN",
    11: "CLOSING",
    12: "NEW_SYN_RECV",
}


class TcpSocket(NamedTuple):
    """One row of /proc/net/tcp[6]: ``local``/``remote`` as ``ip:port`` (``[v6]:port``)."""

    local: str
    remote: str
    state: str
    inode: int


def _endpoint(hex_endpoint: str) -> str:
    """``0100007F:1F90`` -> ``127.0.0.1:8080``; IPv4-mapped IPv6 is shown as IPv4."""
    hex_ip, _, hex_port = hex_endpoint.partition(":")
    port = int(hex_port, 16)
    # The kernel prints each 32-bit word of the address in host byte order (little-endian).
    words = [int(hex_ip[i : i + 8], 16) for i in range(0, len(hex_ip), 8)]
    packed = struct.pack(f"<{len(words)}I", *words)
    address = ipaddress.ip_address(packed)
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return f"{address.ipv4_mapped}:{port}"
        return f"[{address}]:{port}"
    return f"{address}:{port}"


def parse_proc_net_tcp(text: str) -> list[TcpSocket]:
    """Parse ``/proc/net/tcp`` or ``/proc/net/tcp6``; malformed rows are skipped."""
    sockets = []
    lines = text.splitlines()
    if lines and not lines[0].strip().startswith("sl") and any(line.strip() for line in lines):
        raise ParseError(
            "not /proc/net/tcp content: first line is not the 'sl local_address' header"
        )
    for line in lines[1:]:
        fields = line.split()
        if len(fields) < 10:
            continue
        try:
            local = _endpoint(fields[1])
            remote = _endpoint(fields[2])
            state = _TCP_STATES.get(int(fields[3], 16), fields[3])
            inode = int(fields[9])
        except (ValueError, struct.error):
            continue
        sockets.append(TcpSocket(local, remote, state, inode))
    return sockets
