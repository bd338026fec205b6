"""A small ImageFolder of real JPEG and PNG files, written with PIL for the tests.

Each class has its own colour plus noise, sizes vary per image (landscape, portrait,
smaller and larger than the decode size), and every third image is a PNG, so the crop,
resize and both decoders all do real work.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

CLASSES = ("cat", "dog", "fox")
SIZES = ((40, 30), (64, 48), (30, 52), (96, 96), (50, 41))


def write_image(path: Path, colour, size, rng: np.random.Generator) -> None:
    width, height = size
    noise = rng.normal(0, 24, size=(height, width, 3))
    pixels = np.clip(np.asarray(colour, dtype=float) + noise, 0, 255).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path, quality=90)


def make_imagefolder(
    root: Path, train_per_class: int = 8, val_per_class: int = 2, seed: int = 0
) -> Path:
    """`root/train/<class>/` and `root/val/<class>/` of real images; returns `root`."""
    rng = np.random.default_rng(seed)
    for split, count in (("train", train_per_class), ("val", val_per_class)):
        for k, name in enumerate(CLASSES):
            colour = [60 + 70 * ((k + c) % 3) for c in range(3)]
            for i in range(count):
                suffix = "png" if i % 3 == 2 else "jpg"
                size = SIZES[(i + k) % len(SIZES)]
                write_image(root / split / name / f"{name}_{i:03d}.{suffix}", colour, size, rng)
    return root
