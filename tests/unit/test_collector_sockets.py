"""The collector's TCP sockets: copies of a process's descriptors, netlink sock_diag and
/proc/net/tcp against each other on live sockets of the real kernel, and each fallback."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmdiag.collector import fdsockets, sockets, tools

UNREAD = b"hello"


def _inode(sock: socket.socket) -> int:
    return os.fstat(sock.fileno()).st_ino


def _port_written_to(ready: Path) -> int:
    """The port a child process writes to ``ready`` once its sockets are open."""
    deadline = time.monotonic() + 20
    while not ready.exists() or not ready.read_text():
        assert time.monotonic() < deadline, "child did not start"
        time.sleep(0.05)
    return int(ready.read_text())


def _by_descriptors(pid: int, socks: list[socket.socket]) -> dict:
    """What fdsockets reads of these sockets of ``pid`` (this process), the state as a name."""
    found = fdsockets.Reader().sockets(pid, {s.fileno(): _inode(s) for s in socks})
    return {inode: entry[:4] + (sockets._state(entry[4]),) + entry[5:]
            for inode, (entry, _) in found.items()}


def _no_descriptors(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel older than 5.6 (or a refusal): tcp_sockets cannot copy descriptors."""
    def unavailable() -> None:
        raise fdsockets.Unavailable("no pidfd_getfd (test)")

    monkeypatch.setattr(sockets, "Reader", unavailable)


@pytest.fixture
def live_sockets() -> Iterator[dict]:
    """Per family: a listening socket, a client and the accepted end, UNREAD bytes waiting in the
    accepted end's receive queue, and a second listener with one connection not yet accepted."""
    opened: list[socket.socket] = []
    made = {}
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.bind((host, 0))
        listener.listen(4)
        client = socket.create_connection(listener.getsockname()[:2])
        accepted, _ = listener.accept()
        client.sendall(UNREAD)
        backlog = socket.socket(family, socket.SOCK_STREAM)
        backlog.bind((host, 0))
        backlog.listen(4)
        pending = socket.create_connection(backlog.getsockname()[:2])
        opened += [listener, client, accepted, backlog, pending]
        made[family] = {"host": host, "listener": listener, "client": client,
                        "accepted": accepted, "backlog": backlog, "pending": pending}
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # the bytes reach the peer's queue over loopback at once
        if all(len(m["accepted"].recv(64, socket.MSG_PEEK)) == len(UNREAD) for m in made.values()):
            break
    try:
        yield made
    finally:
        for sock in opened:
            sock.close()


def test_descriptors_netlink_and_proc_net_tcp_agree_on_live_sockets(live_sockets: dict) -> None:
    for family, made in live_sockets.items():
        # GIVEN the inodes of live sockets of this process, and sockets that are not TCP
        others = [socket.socket(family, socket.SOCK_DGRAM), *socket.socketpair()]
        try:
            tcp = {_inode(s) for key, s in made.items() if key != "host"}
            every = tcp | {_inode(s) for s in others}
            # WHEN read through copies of the descriptors, from netlink and from the text table
            via_copies = _by_descriptors(os.getpid(), [s for key, s in made.items() if key != "host"]
                                         + others)
            via_netlink = sockets.sock_diag_tcp(family, every)
            via_text = sockets._proc_net_tcp(os.getpid(), every)
        finally:
            for sock in others:
                sock.close()
        # THEN all three see the same five TCP sockets, identically decoded
        assert via_netlink == via_text == via_copies
        assert set(via_netlink) == tcp
        host = made["host"]
        lport = made["listener"].getsockname()[1]
        cport = made["client"].getsockname()[1]
        anywhere = "::" if family == socket.AF_INET6 else "0.0.0.0"
        assert via_netlink[_inode(made["listener"])] == (host, lport, anywhere, 0, "LISTEN", 0, 0)
        assert via_netlink[_inode(made["client"])] == (host, cport, host, lport, "ESTABLISHED", 0, 0)
        # the bytes the accepted end has not read: rx_queue
        assert via_netlink[_inode(made["accepted"])] == (
            host, lport, host, cport, "ESTABLISHED", 0, len(UNREAD))
        # a listener's rx_queue is its accept queue: one connection waits
        assert via_netlink[_inode(made["backlog"])][4:] == ("LISTEN", 0, 1)


def test_inodes_of_another_process_and_both_readers(tmp_path: Path) -> None:
    # GIVEN a process holding a TCP listener, a connection to it and a UNIX socket pair
    ready = tmp_path / "ready"
    program = (
        "import socket, sys, time\n"
        "l = socket.socket(); l.bind(('127.0.0.1', 0)); l.listen(1)\n"
        "c = socket.create_connection(l.getsockname()); a, _ = l.accept()\n"
        "u = socket.socketpair()\n"
        "open(sys.argv[1], 'w').write(str(l.getsockname()[1]))\n"
        "time.sleep(60)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", program, str(ready)])
    try:
        port = _port_written_to(ready)
        # WHEN its sockets are read (through copies of its descriptors)
        by_pid, how = sockets.tcp_sockets([child.pid, 999999999])
        # THEN the three TCP sockets, not the UNIX pair; an unreadable process is None
        assert how == "descriptors"
        assert by_pid[999999999] is None
        conns = sockets.connection_list(by_pid[child.pid], {})
        assert sorted((c["state"], c["local"] == f"127.0.0.1:{port}") for c in conns) == [
            ("ESTABLISHED", False), ("ESTABLISHED", True), ("LISTEN", True)]
        assert {c["interface"] for c in conns} == {"lo"}
        assert len(sockets.socket_fds(child.pid) or ()) == 5
        # AND the text table of its namespace says the same
        text = sockets._proc_net_tcp(child.pid, set(sockets.socket_fds(child.pid).values()))
        assert sorted(text.values()) == sorted(by_pid[child.pid])
        # AND so does netlink, where copies of descriptors are refused (its namespace is ours)
        with pytest.MonkeyPatch.context() as patch:
            _no_descriptors(patch)
            via_netlink, how = sockets.tcp_sockets([child.pid])
        assert how == "descriptors unavailable (no pidfd_getfd (test)), netlink"
        assert sorted(via_netlink[child.pid]) == sorted(by_pid[child.pid])
    finally:
        child.kill()
        child.wait()


def test_netlink_refused_falls_back_to_the_text_table(
        live_sockets: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a kernel (or seccomp profile) that refuses NETLINK_SOCK_DIAG, and no copies of
    # descriptors either
    real = sockets.sock_diag_tcp(socket.AF_INET, {_inode(live_sockets[socket.AF_INET]["client"])})
    _no_descriptors(monkeypatch)

    def refused(family: int, wanted: set[int], ids: dict | None = None,
                states: int = sockets.TCP_STATES_WITH_INODE) -> dict:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(sockets, "sock_diag_tcp", refused)
    # WHEN this process's sockets are read
    by_pid, how = sockets.tcp_sockets([os.getpid()])
    # THEN they come from /proc/net/tcp, and the document says why
    assert how == ("descriptors unavailable (no pidfd_getfd (test)), "
                   "netlink refused ([Errno 13] Permission denied), proc")
    assert set(real.values()) <= set(by_pid[os.getpid()])


def test_a_connecting_socket_is_read_with_its_far_end(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a listener whose one-slot accept queue is full (the kernel drops new SYNs) and a
    # process whose connect() to it therefore sits in SYN_SENT
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    filler = socket.create_connection(server.getsockname())
    port = server.getsockname()[1]
    program = f"import socket\nsocket.socket().connect(('127.0.0.1', {port}))"
    child = subprocess.Popen([sys.executable, "-c", program])
    try:
        deadline = time.monotonic() + 10
        while True:
            # WHEN its sockets are read
            by_pid, how = sockets.tcp_sockets([child.pid])
            if by_pid[child.pid] or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        # THEN the socket is SYN_SENT with the address it connects to (getpeername cannot
        # say it: the state's one-state dump does)
        [entry] = by_pid[child.pid]
        assert entry[2:5] == ("127.0.0.1", port, "SYN_SENT"), entry
        assert how == "descriptors, netlink"
        # AND where netlink is refused, the namespace's text table says it
        def refused(*args: object) -> dict:
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(sockets, "sock_diag_tcp", refused)
        by_pid, how = sockets.tcp_sockets([child.pid])
        assert by_pid[child.pid][0][2:5] == ("127.0.0.1", port, "SYN_SENT")
        assert how.endswith("proc")
    finally:
        child.kill()
        child.wait()
        filler.close()
        server.close()


def test_state_filter_keeps_every_state_a_process_can_hold() -> None:
    # TIME_WAIT (6) and NEW_SYN_RECV (12) have no inode; every other TCP state may be an open fd
    states = {s for s in range(1, 13) if sockets.TCP_STATES_WITH_INODE >> s & 1}
    assert states == set(range(1, 12)) - {6}
    assert {int(k, 16) for k in sockets.TCP_STATES} - states == {6, 12}


def test_the_sockets_are_read_while_the_first_tools_run() -> None:
    # GIVEN two tasks that each run a real tool for a moment
    seen: list[tuple[int, int]] = []

    def meanwhile() -> None:  # what the collector does with the sockets
        seen.append((len(tools._LIVE), len(tools._TASKS)))

    gens = (tools.tool_run(["sleep", "0.2"], 5.0) for _ in range(2))
    # WHEN run with work of the collector's own
    results = tools.run_tasks(gens, 8, meanwhile)
    # THEN that work ran once, while both tools were alive, and the tools ended normally
    assert seen == [(2, 2)]
    assert [r[0] for r in results] == [0, 0]


class _Replies:
    """A netlink socket's side of a dump: the buffers recv() returns, in order."""

    def __init__(self, buffers: list[bytes]) -> None:
        self.buffers = list(buffers)

    def recv(self, size: int) -> bytes:
        return self.buffers.pop(0)


def _answer(inode: int, port: int, state: int = 1, extra: bytes = bytes(36)) -> bytes:
    """One SOCK_DIAG_BY_FAMILY answer for an IPv4 socket 10.0.0.<port % 250>:port -> 10.0.0.9:29500,
    with ``extra`` standing for the attributes a kernel adds (36 bytes: 6.18's four)."""
    body = (bytes([socket.AF_INET, state, 0, 0]) + port.to_bytes(2, "big")
            + (29500).to_bytes(2, "big") + bytes([10, 0, 0, port % 250]) + bytes(12)
            + bytes([10, 0, 0, 9]) + bytes(12) + bytes(4) + bytes(8)
            + bytes(4) + (7).to_bytes(4, sys.byteorder) + (3).to_bytes(4, sys.byteorder)
            + bytes(4) + inode.to_bytes(4, sys.byteorder))
    assert len(body) == sockets.DIAG_MSG_LEN
    length = 16 + len(body) + len(extra)
    return (length.to_bytes(4, sys.byteorder) + sockets.SOCK_DIAG_BY_FAMILY.to_bytes(2, sys.byteorder)
            + bytes(10) + body + extra)


DONE = (20).to_bytes(4, sys.byteorder) + (3).to_bytes(2, sys.byteorder) + bytes(14)


@pytest.mark.parametrize("shape", ["alike", "one answer longer", "alike, then the end alone"])
def test_a_dump_read_by_columns_equals_the_dump_read_message_by_message(
        shape: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a dump of 600 sockets in two buffers, 3 of them wanted (and one wanted inode absent);
    # in one shape an answer carries one more attribute, so the buffer is not all alike
    answers = [_answer(1000 + i, 20000 + i, state=1 if i % 3 else 10) for i in range(600)]
    if shape == "one answer longer":
        answers[450] = _answer(1450, 20450, extra=bytes(44))
    first, rest = b"".join(answers[:300]), b"".join(answers[300:])
    buffers = [first, rest + DONE] if shape != "alike, then the end alone" else [first, rest, DONE]
    wanted = {1007, 1300, 1450, 99}
    # WHEN read with the column path, then with every message walked
    by_columns = sockets.read_tcp_dump(_Replies(buffers), wanted, True)
    used = []
    real = sockets._uniform_run
    monkeypatch.setattr(sockets, "_uniform_run", lambda *a: used.append(real(*a)) or 0)
    walked = sockets.read_tcp_dump(_Replies(buffers), wanted, True)
    # THEN both find the same three sockets, decoded alike
    assert by_columns == walked
    assert set(by_columns) == {1007, 1300, 1450}
    assert by_columns[1007] == ("10.0.0.7", 20007, "10.0.0.9", 29500, "ESTABLISHED", 3, 7)
    assert by_columns[1300][4:] == ("LISTEN", 0, 7)  # a listener's wqueue is its backlog: 0
    assert by_columns[1450][1] == 20450
    # AND the column path took the buffers whose answers are alike, and only those
    taken = [offset > 0 for offset in used]
    assert taken == {"alike": [True, True], "one answer longer": [True, False],
                     "alike, then the end alone": [True, True, False]}[shape]


def _pair(family: int) -> tuple[socket.socket, socket.socket, socket.socket]:
    """A listener, a client and the accepted end, on loopback."""
    listener = socket.socket(family)
    listener.bind(("::1" if family == socket.AF_INET6 else "127.0.0.1", 0))
    listener.listen()
    client = socket.create_connection(listener.getsockname()[:2])
    accepted, _ = listener.accept()
    return listener, client, accepted


@pytest.mark.parametrize("reader,batch", [("descriptors", None), ("netlink", sockets.LOOKUP_BATCH),
                                          ("netlink", 2)])
def test_connections_that_carried_data_are_told_from_idle_ones(
        reader: str, batch: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    if reader == "netlink":
        _no_descriptors(monkeypatch)
        monkeypatch.setattr(sockets, "LOOKUP_BATCH", batch)
    # GIVEN three connections of this process (IPv4 and IPv6), idle for 300 ms, then data
    # sent over one of them
    opened = [*_pair(socket.AF_INET), *_pair(socket.AF_INET), *_pair(socket.AF_INET6)]
    later: list[socket.socket] = []
    try:
        time.sleep(0.3)
        busy_client, busy_server = opened[1], opened[2]
        busy_client.sendall(b"x" * 100)
        assert busy_server.recv(100)
        # WHEN the sockets are read with their keys and endpoints, then read again with their
        # tcp_info
        ids: dict = {}
        _, how = sockets.tcp_sockets([os.getpid()], ids)
        assert how.endswith(reader)
        ends = {key: (local, remote) for key, local, remote in ids[os.getpid()]}
        found = sockets.recent_activity(ends)
        # THEN the established sockets are found (keys are kept for no other state)
        listeners = {s.getsockname()[1] for s in opened[0::3]}
        ports = {key: tuple(int(e.rpartition(":")[2]) for e in ends[key]) for key in found}
        mine = {ports[key]: times for key, times in found.items() if listeners & set(ports[key])}
        assert len(mine) == 6, mine
        assert {ends[key][0].startswith("[::1]:") for key in found} >= {True, False}
        # AND the connection that carried data says so on both ends: the client sent, the
        # accepted end received, just now; every other direction and connection is idle
        client = (busy_client.getsockname()[1], busy_client.getpeername()[1])
        assert mine[client][0] < 250 <= mine[client][1]
        assert mine[client[::-1]][1] < 250 <= mine[client[::-1]][0]
        idle = [times for ends_, times in mine.items() if ends_ not in (client, client[::-1])]
        assert len(idle) == 4 and all(min(times[:2]) >= 250 for times in idle), mine
        # AND a connection closed meanwhile (both ends: one gone, one in TIME_WAIT, which has
        # no tcp_info) is left out, the others still found, though new sockets now hold the
        # closed ones' descriptor numbers (and carried data just now)
        gone = {tuple(f"{end[0]}:{end[1]}" for end in (s.getsockname(), s.getpeername()))
                for s in opened[4:6]}
        opened[4].close()
        opened[5].close()
        time.sleep(0.05)
        later = [*_pair(socket.AF_INET)]
        later[1].sendall(b"y")
        again = sockets.recent_activity(ends)
        assert len(again) == len(found) - 2
        assert {ends[key] for key in found if key not in again} == gone
    finally:
        for sock in opened + later:
            sock.close()


def test_listening_sockets_are_listed_first_and_kept_past_the_cap() -> None:
    # GIVEN a process with more established connections than are listed, a listener and one
    # connection closing
    established = [("10.0.0.1", 40000 + i, "10.0.0.2", 5000, "ESTABLISHED", 0, 0)
                   for i in range(sockets.MAX_CONNECTIONS + 5)]
    closing = [("10.0.0.1", 39999, "10.0.0.3", 5000, "CLOSE_WAIT", 0, 0)]
    listener = [("0.0.0.0", 29500, "0.0.0.0", 0, "LISTEN", 0, 0)]
    listed = sockets.connection_list(established + closing + listener, {})
    # THEN the listener comes first (the analysis matches peers' connections with it), then
    # established ones up to the cap; the closing one is cut
    assert len(listed) == sockets.MAX_CONNECTIONS
    assert listed[0]["local"] == "0.0.0.0:29500" and listed[0]["state"] == "LISTEN"
    assert {c["state"] for c in listed[1:]} == {"ESTABLISHED"}


STALLING = """
import socket, subprocess, sys, threading, time
server = socket.socket(); server.bind(("127.0.0.1", 45678)); server.listen(1)
client = socket.create_connection(("127.0.0.1", 45678)); accepted, _ = server.accept()
client.sendall(b"before"); accepted.recv(16)
# from now on what the server's port sends goes through a one-packet queue drained at 1 kbit/s
# (htb: no drop action in this kernel), kept full by the server's own data: its
# acknowledgements of the client's data are lost, as on a path that drops packets
for line in ("qdisc add dev lo root handle 1: htb default 10",
             "class add dev lo parent 1: classid 1:10 htb rate 10gbit",
             "class add dev lo parent 1: classid 1:30 htb rate 1kbit ceil 1kbit burst 1 cburst 1",
             "qdisc add dev lo parent 1:30 handle 30: pfifo limit 1",
             "filter add dev lo parent 1: protocol ip prio 1 u32 match ip sport 45678 0xffff "
             "classid 1:30"):
    subprocess.run(["tc", *line.split()], check=True, capture_output=True)
threading.Thread(target=lambda: accepted.sendall(b"s" * 10**6), daemon=True).start()
time.sleep(0.2)
client.sendall(b"lost" * 100)
open(sys.argv[1], "w").write("45678")
time.sleep(60)
"""


def test_a_connection_whose_data_is_lost_reads_as_stalled(tmp_path: Path) -> None:
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("tc"):
        pytest.skip("needs root, unshare and tc for a network namespace that drops packets")
    # GIVEN a process in a network namespace of its own whose connection's server -> client
    # packets are mostly lost (a tc queue kept full) after the handshake: the client's data
    # is not acknowledged
    ready = tmp_path / "ready"
    child = subprocess.Popen(["unshare", "--net", "sh", "-c",
                              'ip link set lo up && exec "$0" -c "$1" "$2"',
                              sys.executable, STALLING, str(ready)])
    try:
        _port_written_to(ready)
        time.sleep(0.8)  # the first retransmission timeouts (200 ms, 400 ms) pass
        # WHEN its sockets are read, and read again with their tcp_info
        ids: dict = {}
        sockets.tcp_sockets([child.pid], ids)
        ends = {key: (local, remote) for key, local, remote in ids[child.pid]}
        activity = {ends[key]: times for key, times in sockets.recent_activity(ends).items()}
        # THEN the client's end has segments unacknowledged and retransmitted on timeout, its
        # last acknowledgement older than that
        client = next(times for (local, remote), times in activity.items()
                      if remote == "127.0.0.1:45678")
        _sent, _received, unacked, retransmits, backoff, last_ack = client
        assert unacked >= 1 and retransmits >= 1 and backoff >= 1, client
        assert last_ack >= 600, client
    finally:
        child.kill()
        child.wait()


def test_a_process_in_another_network_namespace_is_read_through_its_descriptors(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        pytest.skip("needs root, unshare and ip for a network namespace")
    # GIVEN a process in a network namespace of its own: a listener and a connection to it on
    # its loopback, data sent over the connection every 50 ms
    ready = tmp_path / "ready"
    program = (
        "import socket, sys, time\n"
        "l = socket.socket(); l.bind(('127.0.0.1', 0)); l.listen(1)\n"
        "c = socket.create_connection(l.getsockname()); a, _ = l.accept()\n"
        "open(sys.argv[1], 'w').write(str(l.getsockname()[1]))\n"
        "while True:\n"
        "    c.sendall(b'x'); a.recv(1); time.sleep(0.05)\n"
    )
    child = subprocess.Popen(["unshare", "--net", "sh", "-c",
                              'ip link set lo up && exec "$0" -c "$1" "$2"',
                              sys.executable, program, str(ready)])
    try:
        port = _port_written_to(ready)
        assert sockets._netns(child.pid) != sockets._netns("self")
        # WHEN its sockets are read, and read again with their tcp_info
        ids: dict = {}
        by_pid, how = sockets.tcp_sockets([child.pid], ids)
        activity = sockets.recent_activity(key for key, _, _ in ids[child.pid])
        # THEN the three sockets of its namespace (our own has no such listener)
        assert how == "descriptors"
        assert sorted(s[4] for s in by_pid[child.pid]) == ["ESTABLISHED", "ESTABLISHED", "LISTEN"]
        assert ("127.0.0.1", port, "0.0.0.0", 0, "LISTEN", 0, 0) in by_pid[child.pid]
        # AND both ends of its connection carried data in the last half second
        assert len(activity) == 2 and all(max(times[:2]) < 500 for times in activity.values()), activity
        # AND without copies of descriptors its namespace's text table gives the same sockets,
        # with no keys to read again (netlink answers for our namespace only)
        _no_descriptors(monkeypatch)
        ids = {}
        text, how = sockets.tcp_sockets([child.pid], ids)
        assert how == "descriptors unavailable (no pidfd_getfd (test)), proc"
        # (the queues left out: data moves meanwhile)
        assert sorted(s[:5] for s in text[child.pid]) == sorted(s[:5] for s in by_pid[child.pid])
        assert ids == {child.pid: []}
    finally:
        child.kill()
        child.wait()


def test_a_childs_connection_that_carries_data_is_read_as_moving(tmp_path: Path) -> None:
    # GIVEN two children of a rank (role "child"): a copy tool sending every 50 ms, and one
    # whose connection has been quiet since it was made
    from types import SimpleNamespace

    from slurmdiag.collector.main import read_children_traffic

    def child(loop: str, ready: Path) -> subprocess.Popen:
        program = (
            "import socket, sys, time\n"
            "l = socket.socket(); l.bind(('127.0.0.1', 0)); l.listen(1)\n"
            "c = socket.create_connection(l.getsockname()); a, _ = l.accept()\n"
            "open(sys.argv[1], 'w').write(str(l.getsockname()[1]))\n"
            f"{loop}\n"
        )
        return subprocess.Popen([sys.executable, "-c", program, str(ready)])

    quiet = child("time.sleep(3600)", tmp_path / "quiet")
    sending = child("while True:\n    c.sendall(b'x' * 4096); a.recv(4096); time.sleep(0.05)",
                    tmp_path / "sending")
    try:
        _port_written_to(tmp_path / "quiet")
        _port_written_to(tmp_path / "sending")
        time.sleep(2.7)  # the quiet connection's handshake older than the window
        ids: dict = {}
        sockets.tcp_sockets([sending.pid, quiet.pid], ids)
        entries = [{"pid": sending.pid, "role": "child"}, {"pid": quiet.pid, "role": "child"},
                   {"pid": os.getpid(), "role": "rank"}]
        run = SimpleNamespace(sockets={"ids": ids}, entries=entries, errors=[])
        # WHEN the children's traffic is read (no strace)
        read_children_traffic(run)
        # THEN the sender's two ends carried data lately, the quiet one's none; ranks untouched
        moving, still, rank = entries
        assert run.errors == []
        assert moving["recent_traffic"]["checked"] == 2
        assert len(moving["recent_traffic"]["active"]) == 2
        assert all(min(c["last_sent_ms"], c["last_received_ms"]) < 1000
                   for c in moving["recent_traffic"]["active"])
        assert still["recent_traffic"] == {"within_ms": 2500, "checked": 2, "active": []}
        assert "recent_traffic" not in rank
    finally:
        for process in (sending, quiet):
            process.kill()
            process.wait()


@pytest.mark.parametrize("role", ["child", "task"])
def test_a_childs_file_io_rate_is_read_over_the_collection(tmp_path: Path, role: str) -> None:
    # GIVEN two children of a rank (or two tasks of a node without ranks: a wrapper's staging
    # copy): one writing a file (~4 MB/s), one asleep
    from types import SimpleNamespace

    from slurmdiag.collector.main import read_children_io
    from slurmdiag.collector.stacks import _io_counters

    program = ("import sys, time\nf = open(sys.argv[1], 'wb')\n"
               "while True:\n    f.write(bytes(40960)); f.flush(); time.sleep(0.01)\n")
    writer = subprocess.Popen([sys.executable, "-c", program, str(tmp_path / "out")])
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        time.sleep(0.3)
        start = time.monotonic()
        run = SimpleNamespace(
            entries=[{"pid": writer.pid, "role": role}, {"pid": sleeper.pid, "role": role},
                     {"pid": os.getpid(), "role": "rank"}],
            window_start={p: (start, 0, 0) for p in (writer.pid, sleeper.pid, os.getpid())},
            child_io={p: _io_counters(f"/proc/{p}/io") for p in (writer.pid, sleeper.pid)})
        # WHEN read before the shortest window: nothing; after it: each child's rate
        read_children_io(run)
        assert all("io_rate" not in e for e in run.entries)
        time.sleep(0.6)
        read_children_io(run)
        written, asleep, rank = run.entries
        assert written["io_rate"] > 1_000_000 and asleep["io_rate"] == 0
        assert "io_rate" not in rank
    finally:
        for process in (writer, sleeper):
            process.kill()
            process.wait()
