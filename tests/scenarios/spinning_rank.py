"""Scenario: one rank spins forever in pure Python, in a data-augmentation helper.

Random crops are drawn by rejection sampling until the crop covers MIN_CROP_FRACTION of
the *output* size, not of the image. Rank 3's shard holds a 4x4 thumbnail that can never
give such a crop, so sample_crop_box loops forever at full CPU (its current line keeps
moving); the other ranks wait for rank 3 in the gradient all_reduce.
"""

from __future__ import annotations

import random

import _harness as harness
import _training as training
import torch.distributed as dist

CROP_SIZE = 32
MIN_CROP_FRACTION = 0.25
#: (rank, step) of the batch that contains the thumbnail.
THUMBNAIL_AT = (3, 3)
STEPS = 1000


def image_sizes(rank: int, step: int) -> list[tuple[int, int]]:
    """Height and width of the images in one batch of this rank's shard."""
    sizes = [(48 + 8 * (i % 3), 64 - 4 * (i % 4)) for i in range(training.BATCH_SIZE)]
    if (rank, step) == THUMBNAIL_AT:
        sizes[5] = (4, 4)
    return sizes


def sample_crop_box(  # CULPRIT
    rng: random.Random, height: int, width: int
) -> tuple[int, int, int, int]:
    """Rejection-sample a crop box (top, left, h, w) of at least the minimum area."""
    min_area = MIN_CROP_FRACTION * CROP_SIZE * CROP_SIZE
    while True:
        h = rng.randint(1, height)
        w = rng.randint(1, width)
        if h * w >= min_area:
            return rng.randint(0, height - h), rng.randint(0, width - w), h, w


def augment(rng: random.Random, sizes: list[tuple[int, int]]) -> list[tuple[int, int, int, int]]:
    return [sample_crop_box(rng, height, width) for height, width in sizes]


def train(info: harness.RankInfo) -> None:
    model = training.build_model()
    rng = random.Random(info.rank)
    for step in range(STEPS):
        if step == THUMBNAIL_AT[1]:
            role = "culprit" if info.rank == THUMBNAIL_AT[0] else "waiting"
            phase = "sample_crop_box loop" if role == "culprit" else "gradient all_reduce"
            harness.report_ready(info, f"step {step}: {phase}", role=role)
        augment(rng, image_sizes(info.rank, step))
        batch = training.synthetic_batch(info.rank, step)
        loss = training.train_step(model, batch)
        harness.log(info, f"step {step} loss {loss:.4f}")


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    train(info)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
