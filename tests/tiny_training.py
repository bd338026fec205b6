"""Tiny, real training pieces shared by the timing tests: a small CNN and CIFAR-shaped data.

Everything here runs for real on the CPU in milliseconds; nothing is mocked.
"""

from __future__ import annotations

import numpy as np
import torch

from nnperf.runner import RunData, RunRequest
from nnperf.train import Hyper
from nnperf.variant import parse_variant_settings

NUM_IMAGES = 64
NUM_CLASSES = 10
# CIFAR-10 channel statistics, the values a real run would pass.
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)


def tiny_model() -> torch.nn.Module:
    """conv-BN-ReLU-pool-linear: every layer kind of a ResNet step, at toy size."""
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=False),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(4),
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 4 * 4, NUM_CLASSES),
    )


def tiny_data(input_size: int = 32, num_images: int = NUM_IMAGES) -> RunData:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(num_images, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, NUM_CLASSES, size=num_images).astype(np.int64)
    return RunData(images=images, labels=labels, mean=MEAN, std=STD, num_classes=NUM_CLASSES,
                   input_size=input_size)


def tiny_request(precision: str = "fp32", settings: dict | None = None, batch_size: int = 8,
                 variant: str = "baseline", rep: int = 0, warmup_steps: int = 2,
                 timed_steps: int = 3, **hyper) -> RunRequest:
    return RunRequest(model="tiny", device="cpu", precision=precision, batch_size=batch_size,
                      variant=variant, settings=parse_variant_settings(settings or {}), rep=rep,
                      dataset="synthetic", warmup_steps=warmup_steps, timed_steps=timed_steps,
                      hyper=Hyper(**hyper))
