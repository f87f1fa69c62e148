"""Scenario: training is over, one rank never exits, and its heartbeat keeps talking.

exit_waits_uploader (the same program) with a monitoring heartbeat: every rank also runs a
daemon "heartbeat" thread that sends a status line every 0.2 s to the node's monitoring agent
(a child process standing in for a node agent, which exits when the rank's connection closes).
At the end every rank uploads its final shard in a non-daemon "uploader" thread and returns
from main; rank 1's gateway never answers, so its uploader sits in the socket read and its main
thread in threading._shutdown. Ranks 0, 2, 3 finish and exit 0. On rank 1 strace and tcp_info
see data move all along, but on the heartbeat's connection, not on the one the uploader waits
on.

The job that makes an at-exit rule reading "data moved" as "still finishing" lie.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time

import _harness as harness
import exit_waits_uploader as uploader

HEARTBEAT_EVERY_S = 0.2


def start_agent() -> int:
    """The node's monitoring agent (a child process): its port."""
    agent = subprocess.Popen([sys.executable, __file__, "--agent"], stdout=subprocess.PIPE,
                             text=True)
    assert agent.stdout is not None
    return int(agent.stdout.readline())


def serve_agent() -> None:
    """The agent's program: reads one rank's heartbeats until its connection closes."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    print(server.getsockname()[1], flush=True)
    conn, _ = server.accept()
    while conn.recv(65536):
        pass


def send_heartbeats(port: int, rank: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as conn:
        while True:
            status = {"rank": rank, "time": time.time(), "state": "alive"}
            conn.sendall(json.dumps(status).encode() + b"\n")
            time.sleep(HEARTBEAT_EVERY_S)


def start_heartbeat(info: harness.RankInfo) -> None:
    threading.Thread(target=send_heartbeats, args=(start_agent(), info.rank), name="heartbeat",
                     daemon=True).start()


if __name__ == "__main__":
    serve_agent() if sys.argv[1:] == ["--agent"] else uploader.main(also=start_heartbeat)
