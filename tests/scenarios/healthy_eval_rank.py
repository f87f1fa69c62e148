"""Scenario (control): the last rank is a dedicated evaluator, on process groups of its own.

Ranks 0-2 train: each step they compute, then average gradients over the trainers' group
(``new_group([0, 1, 2])``). Rank 3 never trains: it waits in a broadcast on the evaluation group
(``new_group([0, 3])``) for the weights rank 0 sends every 4 steps, evaluates them for about a
second, and waits again: the asynchronous evaluator of RL and large-model jobs, which keeps the
trainers from stopping for evaluation. At any instant rank 3 most likely waits in a broadcast
that ranks 1-2 never call while they wait in an all_reduce rank 3 is not a member of: by names
alone "the ranks called different collectives". Every rank logs every step (the evaluator each
evaluation): must never alarm.
"""

from __future__ import annotations

import socket
import time

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

TRAINERS = [0, 1, 2]
EVALUATOR = 3
EVAL_EVERY = 4
#: A step computes for about this long (matrix products on one core).
STEP_SECONDS = 0.25
#: ~30 minutes of training, the job's time limit.
STEPS = 6000


def busy(seconds: float) -> None:
    """The step's forward and backward on a real model: matrix products for ``seconds``."""
    weights = torch.randn(256, 256)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        weights = torch.tanh(weights @ weights)


def flat_weights(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def train(info: harness.RankInfo, trainers: dist.ProcessGroup, evaluation: dist.ProcessGroup,
          stuck: bool) -> None:
    model = training.build_model()
    for step in range(STEPS):
        busy(STEP_SECONDS)
        loss = training.compute_loss(model, training.synthetic_batch(info.rank, step))
        loss.backward()
        grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        dist.all_reduce(grads, group=trainers)  # WAITING
        offset = 0
        with torch.no_grad():
            for param in model.parameters():
                param -= training.LEARNING_RATE * grads[offset:offset + param.numel()].view_as(param) / len(TRAINERS)
                offset += param.numel()
                param.grad = None
        harness.log(info, f"step {step} loss {loss.item():.4f}")
        if info.rank == 0 and step % EVAL_EVERY == 0:
            dist.broadcast(flat_weights(model), src=0, group=evaluation)  # WAITING
        if step == 2 * EVAL_EVERY:
            harness.report_ready(info, "training", role="waiting" if stuck else "healthy")


def publish(round_: int, loss: float) -> None:
    """Post the evaluation to the team's metrics service, which takes the connection into its
    backlog and never answers; the request has no timeout."""
    service = socket.socket()
    service.bind(("127.0.0.1", 0))
    service.listen(1)
    client = socket.create_connection(service.getsockname())
    client.sendall(f"POST /metrics round={round_} loss={loss:.4f}\n".encode())
    client.recv(4096)  # CULPRIT


def evaluate_forever(info: harness.RankInfo, evaluation: dist.ProcessGroup, stuck: bool) -> None:
    model = training.build_model()
    weights = flat_weights(model)
    for round_ in range(STEPS // EVAL_EVERY + 1):
        dist.broadcast(weights, src=0, group=evaluation)
        torch.nn.utils.vector_to_parameters(weights, model.parameters())
        busy(1.0)  # the validation set
        with torch.no_grad():
            loss = training.compute_loss(model, training.synthetic_batch(info.rank, round_))
        harness.log(info, f"step {round_} loss {loss.item():.4f} (evaluation of step {round_ * EVAL_EVERY})")
        if round_ == 2:
            harness.report_ready(info, "publishing its evaluation" if stuck else "evaluating",
                                 role="culprit" if stuck else "healthy")
            if stuck:
                publish(round_, loss.item())


def main(stuck: bool = False) -> None:
    info = harness.setup()
    harness.init_distributed(info)
    trainers = dist.new_group(TRAINERS)
    evaluation = dist.new_group([0, EVALUATOR])
    if info.rank == EVALUATOR:
        evaluate_forever(info, evaluation, stuck)
    else:
        train(info, trainers, evaluation, stuck)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
