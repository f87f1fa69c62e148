"""Scenario (control): `healthy_pipeline_slow_labels` whose metrics thread died at its start.

The same healthy pipeline (four stages over point-to-point, a health thread on every rank, the
last stage's label loader alive but 2.5 s a record), and on every rank a telemetry thread that
pushes metrics to a collector service: the service is not there, so each rank's thread dies at
once on its connection, its traceback ("Exception in thread telemetry") in the job's stderr with
no rank label, and the job trains on without metrics, as jobs do when a dashboard is down. The
last stage's main thread waits in `queue.get()` for the live, slow loader; the dead thread fed
nothing it waits for. It must never get a hang verdict.
"""

from __future__ import annotations

import socket
import threading

from healthy_pipeline_slow_labels import DECODE_S
from pipeline_heartbeat_hang import main


def unused_port() -> int:
    """A loopback port nothing listens on: the metrics service that is down."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def push_metrics(port: int) -> None:
    """The telemetry thread: one connection to the metrics service, then a push a minute;
    refused, it dies with its traceback."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as service:
        service.sendall(b"job started\n")


if __name__ == "__main__":
    threading.Thread(target=push_metrics, args=(unused_port(),), name="telemetry",
                     daemon=True).start()
    main(decode_s=DECODE_S)
