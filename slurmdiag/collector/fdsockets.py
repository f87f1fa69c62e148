"""A process's TCP sockets read through copies of its own descriptors (pidfd_getfd, Linux 5.6).

The cost follows the process's own sockets, not its network namespace's table: on a node that
holds thousands of other sockets (storage clients, monitoring, other jobs; every emulated node of
one shared namespace) a sock_diag dump walks and copies all of them. A copy of a descriptor
answers getsockname, getpeername and TCP_INFO like the process's own, in any namespace, and
needs the access py-spy needs (ptrace's attach check); nothing in the process stops or changes.
The copy is closed at once: the socket lives on through the process's descriptor.
"""

import posix as os

from .netlink import _int

# pidfd_getfd's number: new system calls share one table on every architecture but alpha
SYS_PIDFD_GETFD = 438
TCP_INFO = 11
TCP_ESTABLISHED, TCP_LISTEN = 1, 10
# struct tcp_info: tcpi_state (u8) first, tcpi_retransmits (u8: RTO retransmissions of the
# oldest unacknowledged segment, 0 once it is acknowledged), tcpi_backoff (u8); tcpi_unacked
# (u32; a listener's accept queue); tcpi_last_data_sent and tcpi_last_data_recv (ms since data
# last went out and came in); tcpi_last_ack_recv (ms since the peer last acknowledged)
RETRANSMITS, BACKOFF = 2, 4
UNACKED, LAST_DATA_SENT, LAST_DATA_RECV, LAST_ACK_RECV = 24, 44, 52, 56
INFO_LEN = LAST_ACK_RECV + 4


def activity_of(info, at=0):
    """(ms since data sent, ms since data received, segments unacknowledged, RTO
    retransmissions pending, RTO backoff, ms since the last acknowledgement) from a tcp_info
    starting at ``at``: what recent_activity reports of a connection."""
    return (_u32(info, at + LAST_DATA_SENT), _u32(info, at + LAST_DATA_RECV),
            _u32(info, at + UNACKED), info[at + RETRANSMITS], info[at + BACKOFF],
            _u32(info, at + LAST_ACK_RECV))
_AF_INET, _AF_INET6 = 2, 10


class Unavailable(OSError):
    """pidfd_getfd cannot be used here: the caller reads the namespace's table instead."""


def _syscall():
    """pidfd_getfd(pidfd, fd) -> (new fd or -1, errno) through libc's syscall(), or Unavailable.

    Built on _ctypes (a C module, ~1 ms to load) the way the ctypes package builds c_long and
    CDLL functions: ctypes itself loads os, struct and more, ~6 ms on every node."""
    try:
        import _ctypes
    except ImportError as exc:  # an interpreter built without it
        raise Unavailable(f"no _ctypes ({exc})") from exc

    class Long(_ctypes._SimpleCData):
        _type_ = "l"

    class Function(_ctypes.CFuncPtr):
        _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
        _restype_ = Long

    class Libc:  # what CFuncPtr((name, library)) asks a library for
        _handle = 0

    try:
        Libc._handle = _ctypes.dlopen(None)  # type: ignore[arg-type]  # None: the program itself
        call = Function(("syscall", Libc))  # type: ignore[arg-type]  # any object with _handle
    except (OSError, AttributeError) as exc:  # no libc to open, no syscall() in it
        raise Unavailable(str(exc)) from exc
    call.argtypes = (Long, Long, Long, Long)
    return lambda pidfd, fd: (call(SYS_PIDFD_GETFD, pidfd, fd, 0), _ctypes.get_errno())


class Reader:
    """Copies of processes' descriptors: ``sockets(pid, fds)`` reads a process's TCP sockets,
    ``activity(pid, handles)`` their tcp_info again later."""

    def __init__(self):
        if not hasattr(os, "pidfd_open"):
            raise Unavailable("no os.pidfd_open (Python < 3.9)")
        self._getfd = _syscall()

    def _copies(self, pid, fds):
        """(fd, a copy of it) of each of ``fds`` still open in ``pid``; Unavailable when the
        kernel has no pidfd_getfd or refuses it for this process."""
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            return  # gone: no sockets
        except OSError as exc:
            raise Unavailable(f"pidfd_open({pid}): {exc.strerror}") from exc
        try:
            for fd in fds:
                copy, errno = self._getfd(pidfd, fd)
                if copy >= 0:
                    yield fd, copy
                elif errno != 9:  # EBADF: closed meanwhile; anything else is a refusal
                    raise Unavailable(f"pidfd_getfd: {os.strerror(errno)}")
        finally:
            os.close(pidfd)

    def sockets(self, pid, fds):
        """{inode: (socket tuple, handle)} of ``pid``'s TCP sockets among ``fds`` ({fd: inode}
        of its descriptors that are sockets): the tuple as sockets.tcp_sockets gives it but for
        the state, the kernel's number; handle is (fd, inode, family) for activity(), None
        unless the socket is ESTABLISHED."""
        found = {}
        for fd, copy in self._copies(pid, fds):
            try:
                read = _tcp_socket(copy)
            except OSError:
                continue  # not TCP (TCP_INFO refused), or closed between two calls
            finally:
                os.close(copy)
            family = _AF_INET6 if ":" in read[0] else _AF_INET
            found[fds[fd]] = (read, (fd, fds[fd], family) if read[4] == TCP_ESTABLISHED else None)
        return found

    def activity(self, pid, handles):
        """{handle: activity_of its tcp_info} of the sockets
        ``handles`` names that ``pid`` still holds under the same descriptor."""
        by_fd = {handle[0]: handle for handle in handles}
        found = {}
        for fd, copy in self._copies(pid, list(by_fd)):
            try:
                if os.fstat(copy).st_ino == by_fd[fd][1]:
                    info = _tcp_info(copy, by_fd[fd][2])
                    found[by_fd[fd]] = activity_of(info)
            except OSError:
                pass
            finally:
                os.close(copy)
        return found


def _u32(data, offset):
    return _int(data[offset : offset + 4])


def _on(fd, family):
    """A socket object on ``fd`` that does not own it (detach before it goes); the family given,
    not asked: asking costs three calls, and the kernel's answers say their own family."""
    import _socket

    return _socket.socket(family, _socket.SOCK_STREAM, 0, fd)


def _tcp_info(fd, family):
    """``fd``'s struct tcp_info (INFO_LEN bytes); OSError for a socket that is not TCP."""
    import _socket

    sock = _on(fd, family)
    try:
        info = sock.getsockopt(_socket.IPPROTO_TCP, TCP_INFO, INFO_LEN)
    finally:
        sock.detach()
    if len(info) < INFO_LEN:
        raise OSError("tcp_info too short")
    return info


def _tcp_socket(fd):
    """(local_ip, local_port, remote_ip, remote_port, state, tx_queue, rx_queue) of the TCP
    socket ``fd``, the state as a number, the queues as /proc/net/tcp gives them; OSError for
    any other socket (TCP_INFO is TCP's own)."""
    sock = _on(fd, _AF_INET6)  # room for either family's address
    try:
        info = sock.getsockopt(6, TCP_INFO, INFO_LEN)  # IPPROTO_TCP
        state, local = info[0], sock.getsockname()
        nowhere = ("::" if ":" in local[0] else "0.0.0.0", 0)
        if state == TCP_LISTEN:
            remote, tx, rx = nowhere, 0, _u32(info, UNACKED)
        else:
            try:
                remote = sock.getpeername()
            except OSError:  # not connected (closed, or connecting)
                remote = nowhere
            tx, rx = _queues(fd)
    finally:
        sock.detach()
    return (_plain(local[0]), local[1], _plain(remote[0]), remote[1], state, tx, rx)


def _queues(fd):
    """(bytes not yet acknowledged by the peer, bytes not yet read): SIOCOUTQ and SIOCINQ."""
    import fcntl
    import termios

    out = bytearray(4)
    fcntl.ioctl(fd, termios.TIOCOUTQ, out)
    inq = bytearray(4)
    fcntl.ioctl(fd, termios.FIONREAD, inq)
    return _int(out), _int(inq)


def _plain(host):
    """An address as the dump gives it: a v4-mapped IPv6 one as plain IPv4."""
    return host[7:] if host.startswith("::ffff:") and "." in host else host
