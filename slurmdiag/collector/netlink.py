"""Netlink dumps read in place: the message walk and attributes shared by nics and sockets."""

import posix as os
import sys

NLMSG_ERROR, NLMSG_DONE = 2, 3


def _netlink_messages(sock, what, lead=None):
    """(type, buffer, offset, length) of each message of the dump answering on ``sock``, until
    NLMSG_DONE; OSError for an error message (its errno when it has one).

    ``lead(buffer)`` may take a buffer's leading messages: it returns the offset after them."""
    import _struct

    head = _struct.Struct("=IH").unpack_from  # nlmsghdr's length and type, read in place
    while True:
        data = sock.recv(1 << 17)
        if not data:
            raise OSError(f"{what} dump ended early")
        offset, size = lead(data) if lead else 0, len(data)
        while offset + 16 <= size:
            length, kind = head(data, offset)
            if kind == NLMSG_DONE or kind == NLMSG_ERROR:
                code = int.from_bytes(data[offset + 16 : offset + 20], sys.byteorder, signed=True)
                if code < 0:
                    raise OSError(-code, f"{what}: {os.strerror(-code)}")
                if kind == NLMSG_ERROR:
                    raise OSError(f"{what}: error in a dump")
                return
            if length < 16:
                raise OSError(f"{what}: malformed message")
            yield kind, data, offset, length
            offset += (length + 3) & ~3


def _dump_request(kind, body):
    """A netlink dump request: nlmsghdr (length, type, flags NLM_F_REQUEST | NLM_F_DUMP,
    sequence, port id), then ``body``."""
    return _request(kind, body, 0x301, 1)


def _request(kind, body, flags, seq):
    """A netlink message to the kernel: nlmsghdr (length, type, flags, sequence, port id 0),
    then ``body``."""
    return _u(16 + len(body), 4) + _u(kind, 2) + _u(flags, 2) + _u(seq, 4) + _u(0, 4) + body


def _attributes(msg, offset):
    """{type: payload} of the rtattr list starting at ``offset``."""
    attrs = {}
    while offset + 4 <= len(msg):
        length, kind = _int(msg[offset : offset + 2]), _int(msg[offset + 2 : offset + 4])
        if length < 4:
            break
        attrs[kind & 0x3FFF] = msg[offset + 4 : offset + length]  # without NLA_F_NESTED
        offset += (length + 3) & ~3
    return attrs


def _u(value, size):
    return value.to_bytes(size, sys.byteorder)


def _int(data):
    return int.from_bytes(data, sys.byteorder)
