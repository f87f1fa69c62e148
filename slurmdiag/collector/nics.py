"""Network interfaces (rtnetlink, else ``ip -j addr``) with their addresses, and IB ports."""

import posix as os

from .framing import loads
from .netlink import _attributes, _dump_request, _int, _netlink_messages
from .procfs import _read, _read_int
from .tools import _isdir, _one_line, find_tool, tool_run

ARPHRD_KINDS = {
    1: "ether",
    32: "infiniband",
    772: "loopback",
    65534: "none",
    776: "sit",
    778: "gre",
    768: "ipip",
    769: "tunnel6",
}


def collect_nics(clock):
    """Task: interfaces with their addresses, and InfiniBand ports.

    Links come from a netlink dump of this process's own network namespace: /sys/class/net
    shows the namespace of whoever mounted /sys, which is not ours on a node started with
    ``nsenter --net`` or in a container sharing the host's /sys. /sys is the fallback, and
    the source of link speed only where its ifindex matches the netlink one.
    """
    message = None
    try:
        links = _netlink_links()
    except (OSError, ImportError):  # no netlink here (seccomp?): read /sys
        links = None
    if links is None:
        try:
            names = sorted(os.listdir("/sys/class/net"))
        except OSError as exc:
            names = []
            message = f"cannot list /sys/class/net: {exc.strerror}"
        links = [_sys_link(name) for name in names]
    interfaces = []
    for link in links:
        base = "/sys/class/net/" + link["name"]
        same = link["index"] is None or _read_int(base + "/ifindex") == link["index"]
        speed = _read_int(base + "/speed") if same else None  # EINVAL on links that are down
        interfaces.append(
            {
                "name": link["name"],
                "state": link["state"],
                "mtu": link["mtu"],
                "speed_mbps": speed if speed is not None and speed >= 0 else None,
                "kind": link["kind"],
                "addresses": [],
            }
        )
    try:
        addresses, problem = _netlink_addresses(), None
    except (OSError, ImportError) as exc:  # no netlink here (seccomp?): ask ip
        addresses, problem = yield from _ip_addresses(clock)
        problem = problem and f"netlink: {exc}; {problem}"
    for item in interfaces:
        item["addresses"] = addresses.get(item["name"], [])
    if problem:
        message = problem if not message else message + "; " + problem
    return {"interfaces": interfaces, "ib_ports": _ib_ports(), "message": message}


def _sys_link(name):
    base = "/sys/class/net/" + name
    arphrd = _read_int(base + "/type")
    if _isdir(base + "/bridge"):
        kind = "bridge"
    elif _isdir(base + "/bonding"):
        kind = "bond"
    else:
        kind = ARPHRD_KINDS.get(arphrd, f"arphrd_{arphrd}")
    state = _read(base + "/operstate")
    return {"name": name, "index": None, "state": state.strip() if state else None,
            "mtu": _read_int(base + "/mtu"), "kind": kind}


RTM_NEWLINK, RTM_GETLINK = 16, 18
# IF_OPER_* as /sys/class/net/*/operstate spells them
OPERSTATES = ("unknown", "notpresent", "down", "lowerlayerdown", "testing", "dormant", "up")


def _netlink_dump(request, reply, handle):
    """Send one NLM_F_DUMP request (type ``request``) and hand every ``reply`` message's body to
    ``handle``; the request carries a zeroed family header of 16 bytes (ifinfomsg) or 8
    (ifaddrmsg), which asks for every family and every interface."""
    import _socket

    body = bytes(16 if request == RTM_GETLINK else 8)
    sock = _socket.socket(_socket.AF_NETLINK, _socket.SOCK_RAW, 0)  # NETLINK_ROUTE
    try:
        sock.send(_dump_request(request, body))
        for kind, data, offset, length in _netlink_messages(sock, "netlink"):
            if kind == reply:
                handle(data[offset + 16 : offset + length])
    finally:
        sock.close()


def _netlink_links():
    """[{name, index, state, mtu, kind}] of this namespace's links, from RTM_GETLINK."""
    links = []

    def handle(msg):
        # ifinfomsg: family, pad, type (ARPHRD), index, flags, change
        arphrd, index = _int(msg[2:4]), _int(msg[4:8])
        attrs = _attributes(msg, 16)
        name = (attrs.get(3) or b"").rstrip(b"\0").decode("utf-8", "replace")  # IFLA_IFNAME
        if not name:
            return
        operstate = attrs.get(16)  # IFLA_OPERSTATE
        state = OPERSTATES[operstate[0]] if operstate and operstate[0] < len(OPERSTATES) else None
        mtu = _int(attrs[4]) if 4 in attrs else None  # IFLA_MTU
        info_kind = _attributes(attrs[18], 0).get(1) if 18 in attrs else None  # LINKINFO/KIND
        info_kind = (info_kind or b"").rstrip(b"\0").decode("ascii", "replace")
        kind = info_kind if info_kind in ("bridge", "bond") else ARPHRD_KINDS.get(
            arphrd, f"arphrd_{arphrd}")
        links.append({"name": name, "index": index, "state": state, "mtu": mtu, "kind": kind})

    _netlink_dump(RTM_GETLINK, RTM_NEWLINK, handle)
    links.sort(key=lambda link: link["name"])
    return links


RTM_NEWADDR, RTM_GETADDR = 20, 22


def _netlink_addresses():
    """{ifname: ["addr/prefix", ...]} as ``ip -j addr`` lists them (local address, prefixlen;
    IPv4 before IPv6, in the kernel's order), from the RTM_GETADDR dump that ip itself reads."""
    import _socket

    names = dict(_socket.if_nameindex())
    found = {}  # type: dict
    _netlink_dump(RTM_GETADDR, RTM_NEWADDR, lambda msg: _add_address(msg, names, found, _socket))
    return found


def _add_address(msg, names, found, _socket):
    """One RTM_NEWADDR message: ifaddrmsg (family, prefixlen, flags, scope, index), attributes."""
    family, prefixlen, index = msg[0], msg[1], _int(msg[4:8])
    if family not in (_socket.AF_INET, _socket.AF_INET6):
        return
    attrs, offset = {}, 8
    while offset + 4 <= len(msg):
        length, kind = _int(msg[offset : offset + 2]), _int(msg[offset + 2 : offset + 4])
        if length < 4:
            break
        attrs[kind] = msg[offset + 4 : offset + length]
        offset += (length + 3) & ~3
    raw = attrs.get(2) or attrs.get(1)  # IFA_LOCAL, else IFA_ADDRESS: what ip prints as local
    if raw:
        address = _socket.inet_ntop(family, raw)
        found.setdefault(names.get(index, str(index)), []).append(f"{address}/{prefixlen}")


def _ip_addresses(clock):
    """Task: ({ifname: ["addr/prefix", ...]}, problem) from ``ip -j addr show``."""
    ip_tool = find_tool("ip", ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"])
    if not ip_tool:
        return {}, "ip not found"
    argv = [ip_tool, "-j", "addr", "show"]
    rc, out, err, note = yield from tool_run(argv, min(3.0, clock.left()))
    if rc != 0:
        return {}, "ip -j addr failed (%s)" % (note or _one_line(err) or rc)
    try:
        found = {}
        for link in loads(out):
            found[link.get("ifname")] = [
                "{}/{}".format(a.get("local"), a.get("prefixlen"))
                for a in link.get("addr_info") or ()
                if a.get("local")
            ]
        return found, None
    except (ValueError, AttributeError, TypeError) as exc:
        return {}, f"ip -j addr output not understood ({exc})"


def _ib_ports():
    ports = []  # type: list
    root = "/sys/class/infiniband"
    try:
        devices = sorted(os.listdir(root))
    except OSError:
        return ports
    for device in devices:
        try:
            numbers = sorted(os.listdir(f"{root}/{device}/ports"), key=lambda s: int(s))
        except (OSError, ValueError):
            continue
        for number in numbers:
            base = f"{root}/{device}/ports/{number}/"
            values = {}
            for key in ("state", "phys_state", "rate", "link_layer"):
                text = _read(base + key)
                values[key] = text.strip() if text is not None else None
            ports.append(dict(device=device, port=int(number), **values))
    return ports
