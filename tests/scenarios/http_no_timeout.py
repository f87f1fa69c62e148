"""Scenario: four ranks on ONE node; the last rank waits forever on an HTTP call without timeout.

After each step the last rank posts a heartbeat to the experiment tracker with
urllib.request.urlopen and no timeout. The tracker accepts connections but has stopped
answering (here: a listening socket nobody accepts from, set up before training, standing
in for an overloaded service): the request is sent and the response never comes, so the
rank sits in the socket read (state S, no CPU). Ranks 0-2, on the same node, wait in the
next gradient all_reduce.
"""

from __future__ import annotations

import socket
import urllib.request

import _harness as harness
import _training as training
import torch.distributed as dist

HEARTBEAT_FROM_STEP = 3
STEPS = 1000
#: urlopen without a timeout; no proxy, so the request goes where the URL says.
TRACKER_CLIENT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def unresponsive_tracker() -> socket.socket:
    """A tracker endpoint that takes connections into its backlog and never answers."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    return server


def post_heartbeat(url: str, step: int, loss: float) -> None:
    body = f'{{"step": {step}, "loss": {loss:.4f}}}'.encode()
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    with TRACKER_CLIENT.open(request) as response:  # CULPRIT
        response.read()


def main(info: harness.RankInfo | None = None) -> None:
    info = harness.setup(info)
    harness.init_distributed(info)
    posts_heartbeats = info.rank == info.world_size - 1
    tracker = unresponsive_tracker() if posts_heartbeats else None
    model = training.build_model()
    for step in range(STEPS):
        if step == HEARTBEAT_FROM_STEP + 1:
            harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
        if tracker is not None and step >= HEARTBEAT_FROM_STEP:
            host, port = tracker.getsockname()
            harness.report_ready(info, f"step {step}: heartbeat POST", role="culprit")
            post_heartbeat(f"http://{host}:{port}/api/heartbeat", step, loss)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
