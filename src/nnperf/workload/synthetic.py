"""The synthetic dataset: CIFAR-10's shape and layout, images a network can learn.

Deterministic for a seed and the image counts; `nnperf.workload.datasets` writes it in
CIFAR-10's pickle layout. Apart from datasets.py because it is generation, not download or
reading.
"""

from __future__ import annotations

import numpy as np

from nnperf.core.contract import SyntheticData
from nnperf.core.errors import NnperfError
from nnperf.workload.cifar_pickle import IMAGE_SHAPE

SPLITS = ("train", "test")


def check_synthetic(settings: SyntheticData) -> SyntheticData:
    """`settings` if every count is a positive integer and the seed is >= 0, else NnperfError.

    The config schema checks the same bounds; this is for requests built by hand.
    """
    for key in ("train_images", "test_images", "seed"):
        value = getattr(settings, key)
        minimum = 0 if key == "seed" else 1
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
            raise NnperfError(
                f"dataset.synthetic.{key} is {value!r}; allowed: an integer >= {minimum}"
            )
    return settings


SYNTHETIC_NUM_CLASSES = 10  # as CIFAR-10, whose layout and statistics the set borrows
SYNTHETIC_LABEL_NAMES = tuple(f"pattern_{k}" for k in range(SYNTHETIC_NUM_CLASSES))
# The signal is a class colour plus an oriented stripe pattern (one orientation per class)
# of +-SYNTHETIC_PATTERN_AMPLITUDE grey levels. Each image gets a random overall brightness
# shift, so mean colour alone separates the classes only partly, and per-pixel Gaussian
# noise hides the pattern from any single pixel. Half the images, drawn at random, show their
# class's pattern mirrored left to right, and the orientations lie between vertical and
# horizontal stripes (0 to 90 degrees), where no class is the mirror of another: so the
# horizontal flip of the standard CIFAR augmentation keeps every label, as it does on
# natural images, and a training run sees the same distribution its test split holds.
# Seed 0, 2000 test images: the nearest class-mean colour is right for 64% of them, the
# nearest of the twenty noiseless patterns (ten and their mirror images) for 93%.
#
# Learnable on purpose, so that a training run to accuracy has a curve to show offline
# (nnperf.training.to_accuracy), and not at once, so that the curve says something. Measured with
# SGD (Nesterov, lr 0.05, one warm-up epoch, cosine), batch 32 and flip-and-crop
# augmentation on 512 training images, test top-1 on 500 test images (chance: 10%):
#   a two-conv CNN (5.5k parameters):  38%, 72%, 86%, 91%, 90% after epochs 1-5 (1 s on CPU)
#   resnet18_cifar:                    21%, 29%, 78%, 97% after epochs 1-4 (74 s on CPU)
# (tests/training/test_to_accuracy.py checks the first).
SYNTHETIC_COLOUR_RANGE = (96.0, 160.0)
SYNTHETIC_PATTERN_AMPLITUDE = 40.0
SYNTHETIC_BRIGHTNESS_STD = 16.0
SYNTHETIC_NOISE_STD = 48.0
# Images are generated in fixed-size chunks to bound memory (float32 noise for 50k images
# would be 600 MB); the chunk size is fixed so the bytes never depend on it.
_SYNTHETIC_CHUNK = 2048


def _synthetic_templates(rng: np.random.Generator) -> np.ndarray:
    """One noiseless float32 [classes, 32, 32, 3] image per class."""
    _, height, width = IMAGE_SHAPE
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    templates = np.empty((SYNTHETIC_NUM_CLASSES, height, width, 3), dtype=np.float32)
    for k in range(SYNTHETIC_NUM_CLASSES):
        colour = rng.uniform(*SYNTHETIC_COLOUR_RANGE, size=3)
        # A distinct stripe orientation per class in [0, pi/2]: mirrored, they fill
        # (pi/2, pi], so no class's mirror image is another class's pattern.
        angle = (np.pi / 2) * k / (SYNTHETIC_NUM_CLASSES - 1)
        cycles = rng.uniform(1.5, 3.0)
        phase = rng.uniform(0.0, 2.0 * np.pi)
        channel_weight = rng.uniform(-1.0, 1.0, size=3)
        wave = np.sin(
            2 * np.pi * cycles * (xs * np.cos(angle) + ys * np.sin(angle)) / width + phase
        )
        templates[k] = colour + SYNTHETIC_PATTERN_AMPLITUDE * wave[..., None] * channel_weight
    return templates


def synthetic_split(settings: SyntheticData, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Generate one synthetic split: (uint8 [N, 32, 32, 3], int64 [N]) from the seed alone.

    Train and test share the class templates and draw their noise (and which images are
    mirrored) from independent streams, so the test split does not change when the number of
    training images does.
    """
    check_synthetic(settings)
    if split not in SPLITS:
        raise NnperfError(f"split {split!r} is unknown; allowed: {', '.join(SPLITS)}")
    template_seed, train_seed, test_seed = np.random.SeedSequence(settings.seed).spawn(3)
    templates = _synthetic_templates(np.random.default_rng(template_seed))
    rng = np.random.default_rng(train_seed if split == "train" else test_seed)
    count = settings.train_images if split == "train" else settings.test_images
    # Balanced classes in random order.
    labels = rng.permutation(np.arange(count) % SYNTHETIC_NUM_CLASSES).astype(np.int64)
    images = np.empty((count, *templates.shape[1:]), dtype=np.uint8)
    for start in range(0, count, _SYNTHETIC_CHUNK):
        chunk = labels[start : start + _SYNTHETIC_CHUNK]
        brightness = rng.standard_normal((len(chunk), 1, 1, 1), dtype=np.float32)
        noise = rng.standard_normal((len(chunk), *templates.shape[1:]), dtype=np.float32)
        mirrored = rng.integers(0, 2, size=len(chunk)).astype(bool)
        patterns = np.where(
            mirrored[:, None, None, None], templates[chunk][:, :, ::-1], templates[chunk]
        )
        pixels = patterns + SYNTHETIC_BRIGHTNESS_STD * brightness + SYNTHETIC_NOISE_STD * noise
        images[start : start + len(chunk)] = np.clip(np.rint(pixels), 0, 255)
    return images, labels
