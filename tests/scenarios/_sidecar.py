"""A metrics sidecar (a stand-in for wandb's service process): a child of the rank that sends a
small record over a local TCP connection every 100 ms, for ever. Stdlib only."""

from __future__ import annotations

import socket
import time

if __name__ == "__main__":
    server = socket.create_server(("127.0.0.1", 0))
    sender = socket.create_connection(server.getsockname())
    receiver, _ = server.accept()
    while True:
        sender.sendall(b"x" * 1024)
        receiver.recv(65536)
        time.sleep(0.1)
