"""Scenario: one rank retries its forward pass forever, in tensor maths.

A "robust" step recomputes the loss at a smaller input scale while it is not finite. Rank 2's
batch holds an inf, which no scaling makes finite, so rank 2 loops forever in the encoder's
forward passes (native code, the GIL released most of the time, its line moving between the
forward and the check); ranks 0, 1, 3 wait for it in the gradient all_reduce.

The job that makes the native-compute rule lie: for a look of a few seconds it is the sight
of rank0_eval_barrier's evaluation (one rank computing in tensor kernels, the others waiting).
"""

from __future__ import annotations

import _harness as harness
import _training as training
import torch
from torch import nn

WIDTH = 256
DEPTH = 8
#: (rank, step) whose batch holds an inf.
POISONED_AT = (2, 3)
STEPS = 1000


def build_encoder() -> nn.Module:
    torch.manual_seed(1)
    return nn.Sequential(*(nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh())
                           for _ in range(DEPTH)))


def encoded_loss(encoder: nn.Module, model: nn.Module, inputs: torch.Tensor,
                 targets: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        features = encoder(inputs.repeat(1, WIDTH // inputs.shape[1]).repeat(8, 1))
    penalty = features.square().mean() * 0
    return nn.functional.mse_loss(model(inputs), targets) + penalty


def robust_loss(  # CULPRIT
    encoder: nn.Module, model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    """The loss, recomputed at half the input scale while it is not finite."""
    inputs, targets = batch
    scale = 1.0
    while True:
        loss = encoded_loss(encoder, model, inputs * scale, targets * scale)
        if torch.isfinite(loss):
            return loss
        scale *= 0.5


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = training.build_model()
    encoder = build_encoder()
    for step in range(STEPS):
        inputs, targets = training.synthetic_batch(info.rank, step)
        if step == POISONED_AT[1]:
            role = "culprit" if info.rank == POISONED_AT[0] else "waiting"
            harness.report_ready(info, f"step {step}: " + (
                "robust_loss retries" if role == "culprit" else "gradient all_reduce"), role=role)
            if role == "culprit":
                inputs[0, 0] = float("inf")
        loss = robust_loss(encoder, model, (inputs, targets))
        loss.backward()
        training.all_reduce_gradients(model)
        training.sgd_update(model)
        harness.log(info, f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
