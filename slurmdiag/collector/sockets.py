"""The TCP sockets of the job's processes: copies of their descriptors, else sock_diag (netlink),
else /proc/PID/net/tcp."""

import posix as os
import sys

from .fdsockets import INFO_LEN, Reader, Unavailable, activity_of
from .netlink import _dump_request, _int, _netlink_messages, _request, _u
from .procfs import _read

TCP_STATES = {
    "01": "ESTABLISHED",
    "02": "SYN_SENT",
    "03": "SYN_RECV",
    "04": "FIN_WAIT1",
    "05": "FIN_WAIT2",
    "06": "TIME_WAIT",
    "07": "CLOSE",
    "08": "CLOSE_WAIT",
    "09": "LAST_ACK",
    "0A": "LISTEN",
    "0B": "CLOSING",
    "0C": "NEW_SYN_RECV",
}
MAX_CONNECTIONS = 300


def _ipv6_text(raw16):
    """Compressed text form of a 16-byte IPv6 address (v4-mapped ones as plain IPv4)."""
    if raw16[:12] == b"\0" * 10 + b"\xff\xff":
        return ".".join(str(b) for b in raw16[12:])
    groups = [int.from_bytes(raw16[i : i + 2], "big") for i in range(0, 16, 2)]
    best, best_len, run_start, run_len = -1, 0, -1, 0
    for i, group in enumerate(groups + [1]):
        if group == 0:
            if run_len == 0:
                run_start = i
            run_len += 1
        else:
            if run_len > best_len and run_len >= 2:
                best, best_len = run_start, run_len
            run_len = 0
    parts = [f"{g:x}" for g in groups]
    if best < 0:
        return ":".join(parts)
    return ":".join(parts[:best]) + "::" + ":".join(parts[best + best_len :])


def _kernel_addr(hexaddr):
    """An address from /proc/net/tcp{,6}: 32-bit words in host byte order, printed as hex."""
    raw = bytes.fromhex(hexaddr)
    if sys.byteorder == "little":
        raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    if len(raw) == 4:
        return ".".join(str(b) for b in raw)
    return _ipv6_text(raw)


def parse_proc_net_tcp(text, wanted=None):
    """{inode: (local_ip, local_port, remote_ip, remote_port, state, tx_queue, rx_queue)}.

    With ``wanted`` (a set of inode strings) only those sockets are decoded.
    """
    table = {}
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 10 or (wanted is not None and parts[9] not in wanted):
            continue
        try:
            lip, lport = parts[1].split(":")
            rip, rport = parts[2].split(":")
            txq, rxq = parts[4].split(":")
            table[parts[9]] = (
                _kernel_addr(lip),
                int(lport, 16),
                _kernel_addr(rip),
                int(rport, 16),
                TCP_STATES.get(parts[3].upper(), parts[3]),
                int(txq, 16),
                int(rxq, 16),
            )
        except ValueError:
            continue
    return table


def _endpoint(ip, port):
    return ("[%s]:%d" if ":" in ip else "%s:%d") % (ip, port)


NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY, IPPROTO_TCP = 4, 20, 6
# TCP states whose sockets can be a process's open file: all but TIME_WAIT (6) and NEW_SYN_RECV
# (12), which the kernel keeps without an inode and which are the bulk of a busy host's table.
SYN_SENT = 2
TCP_STATES_WITH_INODE = sum(1 << state for state in (1, 2, 3, 4, 5, 7, 8, 9, 10, 11))
# inet_diag_msg: family, state, timer, retrans, inet_diag_sockid (sport, dport big-endian; src,
# dst 16 bytes each; interface; cookie), expires, rqueue, wqueue, uid, inode
DIAG_MSG_LEN = 72
# An answer's inode, in 32-bit words from its start: nlmsghdr (16 bytes), then inet_diag_msg's last
INODE_WORD = (16 + DIAG_MSG_LEN - 4) // 4


def socket_inode(target):
    """The inode of a /proc/PID/fd link's target ``socket:[INODE]``, else None."""
    if target and target.startswith("socket:[") and target[8:-1].isdigit():
        return int(target[8:-1])
    return None


def socket_fds(pid):
    """{fd: inode} of the sockets ``pid`` holds open; None if its fds cannot be read."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    found = {}
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        inode = socket_inode(target)
        if inode is not None:
            found[int(fd)] = inode
    return found


def _netns(pid):
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def sock_diag_tcp(family, wanted, ids=None, states=TCP_STATES_WITH_INODE):
    """{inode: (local_ip, local_port, remote_ip, remote_port, state, tx_queue, rx_queue)} of the
    TCP sockets of ``family`` (AF_INET or AF_INET6) in our own network namespace whose inode is
    in ``wanted``, from one NETLINK_SOCK_DIAG dump (what ``ss`` reads), filtered by state in the
    kernel and by inode here: no text table is written or parsed. OSError if the kernel refuses.

    The queues mean what /proc/net/tcp's do: for a listening socket rx is the accept queue.
    ``ids`` (a dict) gets {inode: key} of the ESTABLISHED ones, for data_activity.
    """
    import _socket

    sock = _socket.socket(_socket.AF_NETLINK, _socket.SOCK_RAW, NETLINK_SOCK_DIAG)
    try:
        # inet_diag_req_v2: family, protocol, no extensions, pad, states, a zero (any) sockid
        body = bytes([family, IPPROTO_TCP, 0, 0]) + _u(states, 4) + bytes(48)
        sock.send(_dump_request(SOCK_DIAG_BY_FAMILY, body))
        return read_tcp_dump(sock, wanted, family == _socket.AF_INET, ids)
    finally:
        sock.close()


def read_tcp_dump(sock, wanted, ipv4, ids=None):
    """sock_diag_tcp's table from the dump answering on ``sock``; ``ids`` (a dict) gets the
    lookup key of every ESTABLISHED socket found (see socket_key)."""
    import _struct

    word = _struct.Struct("=I")
    found = {}  # type: dict
    alike = lambda data: _uniform_run(data, wanted, found, ipv4, ids)
    for kind, data, offset, length in _netlink_messages(sock, "sock_diag", alike):
        if (kind == SOCK_DIAG_BY_FAMILY and length >= 16 + DIAG_MSG_LEN
                and word.unpack_from(data, offset + 84)[0] in wanted):
            msg = data[offset + 16 : offset + 16 + DIAG_MSG_LEN]
            found[_int(msg[68:72])] = _diag_socket(msg, ipv4)
            _keep_key(msg, ids)
    return found


def socket_key(msg):
    """What finds one socket again (data_activity): its family byte and inet_diag_sockid (ports,
    addresses, interface, cookie) as its inet_diag_msg ``msg`` gives them."""
    return bytes(msg[0:1]) + bytes(msg[4:52])


def _keep_key(msg, ids):
    if ids is not None and msg[1] == 1:  # ESTABLISHED: the only state whose data can move
        ids[_int(msg[68:72])] = socket_key(msg)


def _uniform_run(data, wanted, found, ipv4, ids=None):
    """A buffer of answers all alike (SOCK_DIAG_BY_FAMILY, one length): their inodes read as one
    strided column and matched as a set, the matches decoded into ``found``. The offset after
    them, or 0 when the buffer is not such a run (bench/README.md: 4,200 answers a node)."""
    if len(data) < 16:
        return 0
    length = int.from_bytes(data[0:4], sys.byteorder)
    count = len(data) // length if length >= 16 + DIAG_MSG_LEN and length % 4 == 0 else 0
    if not count:
        return 0
    view = memoryview(data)[: count * length]
    words = view.cast("I")
    step = length // 4
    if (words[0::step].tolist().count(length) != count
            or view.cast("H")[2 :: 2 * step].tolist().count(SOCK_DIAG_BY_FAMILY) != count):
        return 0  # answers of different lengths (attributes) or another type: walk them
    inodes = words[INODE_WORD::step].tolist()
    hits = wanted.intersection(inodes)
    if hits:
        where = dict(zip(inodes, range(count)))
        for inode in hits:
            start = where[inode] * length + 16
            found[inode] = _diag_socket(data[start : start + DIAG_MSG_LEN], ipv4)
            _keep_key(data[start : start + DIAG_MSG_LEN], ids)
    return count * length


def _diag_socket(msg, ipv4):
    size = 4 if ipv4 else 16
    local, remote = msg[8 : 8 + size], msg[24 : 24 + size]
    return (
        ".".join(str(b) for b in local) if ipv4 else _ipv6_text(local),
        int.from_bytes(msg[4:6], "big"),
        ".".join(str(b) for b in remote) if ipv4 else _ipv6_text(remote),
        int.from_bytes(msg[6:8], "big"),
        _state(msg[1]),
        # wqueue is the unsent bytes, but a listener's backlog limit: /proc/net/tcp shows 0
        0 if msg[1] == 10 else _int(msg[60:64]),
        _int(msg[56:60]),  # rqueue: unread bytes, a listener's accept queue
    )


def _proc_net_tcp(pid, wanted):
    """sock_diag_tcp's table from ``pid``'s /proc/PID/net/tcp{,6} text (its namespace's)."""
    names = {str(inode) for inode in wanted}
    found = {}  # type: dict
    for name in ("tcp", "tcp6"):
        text = _read(f"/proc/{pid}/net/{name}") or ""
        found.update((int(inode), entry) for inode, entry in parse_proc_net_tcp(text, names).items())
    return found


def tcp_sockets(pids, ids=None, endpoints=None):
    """({pid: [socket tuple, ...] or None when its fds cannot be read}, how they were read).

    Each process's sockets are found from /proc/PID/fd and read through copies of its own
    descriptors (fdsockets): the cost follows its own sockets, whatever else its namespace
    holds. Where that is refused or unavailable (Linux < 5.6), in our own network namespace one
    sock_diag dump per address family for all such processes at once, and a process in another
    namespace from its /proc/PID/net/tcp{,6}, read once per namespace. ``how`` is
    "descriptors", "netlink", "proc" or several, each fallback after the reason for it.
    ``ids`` (a dict) gets {pid: [(key, local endpoint, remote endpoint), ...]} of the
    process's ESTABLISHED sockets, the keys for recent_activity; ``endpoints`` (a dict)
    {inode: (local endpoint, remote endpoint)} of every socket read.
    """
    import _socket

    fds = {pid: socket_fds(pid) for pid in pids}
    table, how, keys = {}, [], {}  # keys: inode -> key, of the ESTABLISHED sockets
    reader, refused = _descriptor_reader()
    namespaces = {}  # type: dict  # netns -> (a pid in it, wanted inodes), for the others
    for pid, found in fds.items():
        if not found:
            continue
        if reader is not None:
            try:
                for inode, (entry, handle) in reader.sockets(pid, found).items():
                    table[inode] = entry[:4] + (_state(entry[4]),) + entry[5:]
                    if handle is not None:
                        keys[inode] = (pid,) + handle
                how.append("descriptors")
                continue
            except Unavailable as exc:
                refused = f"descriptors refused ({exc})"
        if refused:
            how.append(refused)
        namespaces.setdefault(_netns(pid), (pid, set()))[1].update(found.values())
    own, netlink_refused = _netns("self"), None
    connecting = _connecting(table, fds)
    for pid, wanted in connecting.items():  # getpeername cannot name their far end
        namespaces.setdefault(_netns(pid), (pid, set()))[1].update(wanted)
    for netns, (pid, wanted) in namespaces.items():
        got = None
        if netns is not None and netns == own and netlink_refused is None:
            try:
                # only connecting sockets left to read: a dump of that one state, a few lines
                states = (1 << SYN_SENT) if all(i in table for i in wanted) else TCP_STATES_WITH_INODE
                got = sock_diag_tcp(_socket.AF_INET, wanted, keys, states)
                got.update(sock_diag_tcp(_socket.AF_INET6, wanted, keys, states))
                how.append("netlink")
            except OSError as exc:
                netlink_refused, got = f"netlink refused ({exc})", None
                how.append(netlink_refused)
        if got is None:
            got = _proc_net_tcp(pid, wanted)
            how.append("proc")
        table.update(got)  # socket inodes are unique on the host, across namespaces
    if endpoints is not None:
        endpoints.update((inode, _endpoints(entry)) for inode, entry in table.items())
    out = {}
    for pid, found in fds.items():
        out[pid] = None if found is None else [table[i] for i in found.values() if i in table]
        if ids is not None and found is not None:
            ids[pid] = [(keys[i],) + _endpoints(table[i]) for i in found.values() if i in keys]
    return out, ", ".join(dict.fromkeys(how)) or None


def _connecting(table, fds):
    """{pid: {inode}} of the SYN_SENT sockets the descriptors read: a connect() in progress,
    its far end unknown to getpeername (ENOTCONN) but not to the kernel's table (a connect
    that no answer completes: a host down, a firewall dropping, a full accept queue)."""
    found = {}  # type: dict
    for pid, owned in fds.items():
        for inode in (owned or {}).values():
            entry = table.get(inode)
            if entry is not None and entry[4] == "SYN_SENT" and entry[3] == 0:
                found.setdefault(pid, set()).add(inode)
    return found


def _state(number):
    return TCP_STATES.get(f"{number:02X}", str(number))


def _descriptor_reader():
    """(a fdsockets.Reader, None), or (None, why there is none)."""
    try:
        return Reader(), None
    except Unavailable as exc:
        return None, f"descriptors unavailable ({exc})"


def _endpoints(entry):
    """("ip:port", "ip:port"), local and remote, of a socket tuple."""
    return _endpoint(entry[0], entry[1]), _endpoint(entry[2], entry[3])


def recent_activity(keys):
    """{key: fdsockets.activity_of its tcp_info} of the ESTABLISHED
    sockets tcp_sockets' keys name: read through copies of the descriptors again, or looked up
    by netlink (data_activity). A socket closed meanwhile is left out."""
    by_pid, lookups = {}, []  # type: dict, list
    for key in keys:
        if isinstance(key, tuple):
            by_pid.setdefault(key[0], []).append(key[1:])
        else:
            lookups.append(key)
    found = data_activity(lookups) if lookups else {}
    if by_pid:
        reader = Reader()
        for pid, handles in by_pid.items():
            try:
                found.update(((pid,) + handle, times)
                             for handle, times in reader.activity(pid, handles).items())
            except Unavailable:
                continue
    return found


INET_DIAG_INFO = 2  # its payload is struct tcp_info (read by fdsockets.activity_of)
# Lookups sent before their answers are read: each answer is ~330 bytes, the batch well inside
# a netlink socket's default receive buffer (~200 KB).
LOOKUP_BATCH = 128


def data_activity(keys):
    """{key: fdsockets.activity_of its tcp_info} of the sockets ``keys``
    names (socket_key), each looked up on its own with its tcp_info (sock_diag without the dump
    flag: the kernel finds the socket by its ports, addresses, interface and cookie; no walk of
    the namespace's table), a batch of lookups in one message. A socket closed meanwhile is
    left out (a TIME_WAIT one has no tcp_info). OSError if the kernel refuses."""
    import _socket

    keys = list(keys)
    found = {}  # type: dict
    sock = _socket.socket(_socket.AF_NETLINK, _socket.SOCK_RAW, NETLINK_SOCK_DIAG)
    # The kernel answers each request while it reads it: a missing answer is a bug, not a wait.
    sock.settimeout(0.5)
    # inet_diag_req_v2 after the family: TCP, tcp_info, pad, any state; then the sockid
    asked = bytes([IPPROTO_TCP, 1 << (INET_DIAG_INFO - 1), 0]) + _u(0xFFFFFFFF, 4)
    try:
        for start in range(0, len(keys), LOOKUP_BATCH):
            batch = keys[start : start + LOOKUP_BATCH]
            sock.send(b"".join(  # NLM_F_REQUEST; the sequence number is the index in the batch
                _request(SOCK_DIAG_BY_FAMILY, key[:1] + asked + key[1:], 1, seq)
                for seq, key in enumerate(batch)))
            _read_lookups(sock, batch, found)
    finally:
        sock.close()
    return found


def _read_lookups(sock, batch, found):
    """The answers to one batch of lookups into ``found``; the others (an error: the socket is
    gone) are skipped."""
    import _socket
    import _struct

    head = _struct.Struct("=IHHI").unpack_from  # nlmsghdr: length, type, flags, sequence
    attr = _struct.Struct("=HH").unpack_from
    answered = 0
    while answered < len(batch):
        try:
            data = sock.recv(1 << 17)
        except (_socket.timeout, BlockingIOError):
            return
        offset = 0
        while offset + 16 <= len(data):
            length, kind, _, seq = head(data, offset)
            if length < 16:
                return
            answered += 1
            end, at = offset + length, offset + 16 + DIAG_MSG_LEN
            while kind == SOCK_DIAG_BY_FAMILY and at + 4 <= end and seq < len(batch):
                size, what = attr(data, at)
                if size < 4:
                    break
                if what & 0x3FFF == INET_DIAG_INFO:
                    if size - 4 >= INFO_LEN:
                        found[batch[seq]] = activity_of(data, at + 4)
                    break
                at += (size + 3) & ~3
            offset += (length + 3) & ~3


def connection_list(sockets, addr_to_if):
    """Documented connections from tcp_sockets' tuples, with the interface each one's local
    address belongs to; at most MAX_CONNECTIONS: the listening ones first (a process has few,
    and they are what its peers connect to: the analysis matches their connections with them),
    then the established ones."""
    out = []
    for lip, lport, rip, rport, state, txq, rxq in sockets:
        if lip.startswith("127.") or lip == "::1":
            interface = "lo"
        else:
            interface = addr_to_if.get(lip)
        out.append(
            {
                "local": _endpoint(lip, lport),
                "remote": _endpoint(rip, rport),
                "state": state,
                "interface": interface,
                "tx_queue": txq,
                "rx_queue": rxq,
            }
        )
    out.sort(key=lambda c: (c["state"] != "LISTEN", c["state"] != "ESTABLISHED", c["local"],
                            c["remote"]))
    return out[:MAX_CONNECTIONS]
