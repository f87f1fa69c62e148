"""Scenario: rank 2 blocks inside logging, sending a record to a log relay that stopped reading.

Every rank ships its log records to a syslog relay beside it over TCP (the stdlib's
logging.handlers.SysLogHandler with SOCK_STREAM: each record sent with sendall on the caller's
thread, the socket without a timeout), as sites do with a node-local rsyslog. At step 3 each
rank logs a debugging dump of its gradients (megabytes of text in one record); rank 2's relay
has stopped reading (it accepted the connection and hangs on its own upstream), so once the
socket's buffers are full rank 2's main thread blocks in sendall inside SysLogHandler.emit,
under the logger call of the job's code: state S, no CPU, one TCP connection with data
queued. Ranks 0, 1, 3 wait in step 4's gradient all_reduce. A write stuck on a socket that is
not a collective's, reached through a library (logging) rather than called by the job's code
itself (pipe_write_full).

The first version used logging.handlers.SocketHandler and did not hang: its socket has a 1 s
timeout, the record is dropped and the job trains on (slurmdiag said progressing, rightly).
"""

from __future__ import annotations

import logging
import logging.handlers
import socket
import subprocess
import sys

import _harness as harness
import _training as training
import torch.distributed as dist

STALLED_RANK = 2
DUMP_STEP = 3
DUMP_BYTES = 24 << 20  # more than both ends' socket buffers can hold (tcp_wmem max 4 MiB)
SLOW_DUMP_BYTES = 4 << 20  # 32 s a step at the slow relay's 128 KiB/s
#: the slow relay's buffers (~10 MiB at most) are full by then: rank 2 sends at its pace
SLOW_READY_STEP = 8
STEPS = 1000

#: The relay: accepts one connection, prints its port, then reads and drops everything; stalled,
#: it reads nothing (its receive buffer made small before listen, so the accepted
#: connection's is too); slow, 32 KiB every 0.25 s (an upstream at 128 KiB/s).
RELAY = r"""
import socket, sys, time
server = socket.socket()
if sys.argv[1] == "stalled":
    server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
server.bind(("127.0.0.1", 0))
server.listen(1)
print(server.getsockname()[1], flush=True)
conn, _ = server.accept()
if sys.argv[1] == "stalled":
    time.sleep(float(sys.argv[2]))
while conn.recv(32 << 10):
    if sys.argv[1] == "slow":
        time.sleep(0.25)
"""


def start_log_relay(mode: str) -> tuple[subprocess.Popen[str], int]:
    relay = subprocess.Popen([sys.executable, "-c", RELAY, mode, str(harness.SAFETY_NET_SECONDS)],
                             stdout=subprocess.PIPE, text=True)
    assert relay.stdout is not None
    return relay, int(relay.stdout.readline())


def main(slow_relay: bool = False) -> None:
    """``slow_relay``: rank 2's relay reads at 128 KiB/s and every step from DUMP_STEP on logs
    a dump of SLOW_DUMP_BYTES (healthy_slow_log_relay); else it stops reading and the dump
    of step DUMP_STEP never completes."""
    info = harness.setup()
    harness.init_distributed(info)
    mode = ("slow" if slow_relay else "stalled") if info.rank == STALLED_RANK else "reading"
    relay, port = start_log_relay(mode)
    logger = logging.getLogger("train")
    logger.setLevel(logging.INFO)
    logger.addHandler(logging.handlers.SysLogHandler(("127.0.0.1", port),
                                                     socktype=socket.SOCK_STREAM))
    model = training.build_model()
    for step in range(STEPS):
        if slow_relay and step == SLOW_READY_STEP:
            harness.report_ready(info, f"step {step}: training, rank 2's log relay slow",
                                 role="healthy")
        if not slow_relay and step == DUMP_STEP + 1:
            harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
        if step == DUMP_STEP or (slow_relay and step > DUMP_STEP):
            size = SLOW_DUMP_BYTES if slow_relay else DUMP_BYTES
            dump = " ".join(f"{loss * i:.6f}" for i in range(size // 10))
            if info.rank == STALLED_RANK and not slow_relay:
                harness.report_ready(info, f"step {step}: log the gradient dump", role="culprit")
            logger.info("step %d gradient dump: %s", step, dump)  # CULPRIT
        else:
            logger.info("step %d loss %.4f", step, loss)
    dist.destroy_process_group()
    relay.terminate()


if __name__ == "__main__":
    main()
