"""Scenario: a pipeline-parallel job hangs in its last stage while a health group keeps talking.

`healthy_pipeline_p2p`'s four stages (one a rank, GPipe's schedule over point-to-point only),
with `heartbeat_group_hang`'s health thread on every rank (a one-float "alive" all_reduce over a
second gloo group every 0.1 s). The last stage gets its labels from a loader thread through a
queue; at step 3 that thread dies on a corrupt record (its exception printed, nothing put), and
the last stage's main thread waits in `queue.get()` for ever. Stages 0-2 then wait in their
sends and receives for it; no collective of the training is pending, and every rank's
connections to the other ranks carry the health checks' data all along. Culprit: rank 3.
"""

from __future__ import annotations

import queue
import threading
import time

import _harness as harness
import torch
import torch.distributed as dist
from heartbeat_group_hang import start_health_check

ROWS, WIDTH = 128, 1024
LAYERS_PER_STAGE = 4
MICRO_BATCHES = 4
STEPS = 600
#: The step whose labels hold the corrupt record.
CORRUPT_STEP = 3


def build_stage(rank: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(rank)
    return [torch.randn(WIDTH, WIDTH, generator=generator) / WIDTH**0.5
            for _ in range(LAYERS_PER_STAGE)]


def decode_record(seconds: float) -> torch.Tensor:
    """A label record decoded in Python, for ``seconds`` of a core (a slow tokenizer)."""
    until, total = time.monotonic() + seconds, 0
    while time.monotonic() < until:
        total += sum(range(1000)) % 7
    return torch.full((ROWS, WIDTH), float(total % 2))


def load_labels(labels: queue.Queue[torch.Tensor], decode_s: float | None) -> None:
    """The last stage's label loader: one tensor of targets per micro-batch, a step ahead; a
    corrupt record at CORRUPT_STEP kills it, unless each record takes ``decode_s`` to decode
    (the healthy twin)."""
    for step in range(STEPS):
        for micro in range(MICRO_BATCHES):
            if decode_s is not None:
                labels.put(decode_record(decode_s))
                continue
            if step == CORRUPT_STEP and micro == 1:
                raise ValueError(f"corrupt label record at step {step}, micro-batch {micro}")
            labels.put(torch.zeros(ROWS, WIDTH))


def receive(shape: tuple[int, int], src: int) -> torch.Tensor:
    buffer = torch.empty(shape)
    dist.recv(buffer, src=src)  # WAITING
    return buffer


def pipeline_step(info: harness.RankInfo, weights: list[torch.Tensor],
                  labels: queue.Queue[torch.Tensor] | None, step: int) -> float:
    rank, last = info.rank, info.world_size - 1
    shape = (ROWS, WIDTH)
    outputs, targets, loss = [], [], 0.0
    for micro in range(MICRO_BATCHES):
        x = (torch.randn(shape, generator=torch.Generator().manual_seed(step * 97 + micro))
             if rank == 0 else receive(shape, rank - 1))
        for weight in weights:
            x = torch.tanh(x @ weight)
        if rank < last:
            dist.send(x, dst=rank + 1)  # WAITING
        else:
            target = labels.get()  # CULPRIT
            targets.append(target)
            loss += float((x - target).pow(2).mean())
        outputs.append(x)
    for micro in reversed(range(MICRO_BATCHES)):
        grad = ((outputs[micro] - targets[micro]) * 2.0 / outputs[micro].numel()
                if rank == last else receive(shape, rank + 1))
        for weight in reversed(weights):
            grad = (grad * 0.5) @ weight.T
        if rank > 0:
            dist.send(grad, dst=rank - 1)  # WAITING
    return loss / MICRO_BATCHES


def main(decode_s: float | None = None) -> None:
    info = harness.setup()
    harness.init_distributed(info)
    start_health_check()
    labels: queue.Queue[torch.Tensor] | None = None
    if info.rank == info.world_size - 1:
        labels = queue.Queue(maxsize=1 if decode_s else MICRO_BATCHES)
        threading.Thread(target=load_labels, args=(labels, decode_s), name="label-loader",
                         daemon=True).start()
    weights = build_stage(info.rank)
    for step in range(STEPS):
        if decode_s and step == 1:
            harness.report_ready(info, "pipeline steps", role="healthy")
        elif step == CORRUPT_STEP and not decode_s:
            role = "culprit" if info.rank == info.world_size - 1 else "waiting"
            harness.report_ready(info, f"step {step}: pipeline", role=role)
        loss = pipeline_step(info, weights, labels, step)
        harness.log(info, f"step {step} loss {loss:.4f}")


if __name__ == "__main__":
    main()
