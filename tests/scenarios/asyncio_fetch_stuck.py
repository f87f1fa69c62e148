"""Scenario: one rank waits forever inside an asyncio event loop.

Before each step after the third, rank 2 refreshes its shard manifest from the data service
with a small asyncio client (`asyncio.run(fetch_manifest(...))`: open a connection, send the
request, await the first line of the answer, no timeout). The service accepts connections but
has stopped answering (a listening socket nobody accepts from). The awaiting coroutine is not
on the thread's stack: the main thread sits in the event loop's selector (epoll_wait, state S,
no CPU), below the line that started the loop; the other ranks wait in the gradient all_reduce.
"""

from __future__ import annotations

import asyncio
import socket

import _harness as harness
import _training as training
import torch.distributed as dist

STUCK_RANK = 2
REFRESH_FROM_STEP = 3
STEPS = 1000


def unresponsive_service() -> socket.socket:
    """A data service endpoint that takes connections into its backlog and never answers."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    return server


async def fetch_manifest(host: str, port: int, step: int) -> list[str]:
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(f"GET /manifest?step={step} HTTP/1.0\r\n\r\n".encode())
    await writer.drain()
    status = await reader.readline()
    writer.close()
    return [status.decode()]


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    service = unresponsive_service() if info.rank == STUCK_RANK else None
    model = training.build_model()
    for step in range(STEPS):
        if step == REFRESH_FROM_STEP and service is None:
            harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
        if service is not None and step >= REFRESH_FROM_STEP:
            host, port = service.getsockname()
            harness.report_ready(info, f"step {step}: manifest refresh", role="culprit")
            asyncio.run(fetch_manifest(host, port, step))  # CULPRIT
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
