"""Scenario (control): rank 2's log relay is slow, not stalled, and the job trains on.

`log_socket_stalled`'s healthy twin (the same program, ``main(slow_relay=True)``): from step 3
every rank logs a 4 MiB gradient dump each step through logging.handlers.SysLogHandler over TCP, and
rank 2's relay forwards at 128 KiB/s. Once the socket's buffers are full each step takes rank
2 about 32 s, most of it in sendall inside SysLogHandler.emit under the same logger line, while ranks 0,
1, 3 wait for it in the gradient all_reduce: the stacks of the stalled twin, but the data
moves. The liar of any rule that takes a rank in a socket send for stuck.
"""

from __future__ import annotations

import log_socket_stalled as job

if __name__ == "__main__":
    job.main(slow_relay=True)
