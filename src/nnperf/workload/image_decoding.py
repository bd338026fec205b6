"""Decoding an ImageFolder's files: per step on the DataLoader's workers, or once.

* `ImageFiles` is the `Dataset` of the `dataloader` data path: each `__getitem__` opens and
  decodes one file (PIL) and transforms it with torchvision's v2 transforms, so on a
  DataLoader with workers the decoding and augmentation run in the workers, every step.
  Training: RandomResizedCrop(image_size) and RandomHorizontalFlip, as torchvision's
  reference ImageNet recipe; evaluation: resize the shorter side to image_size / 0.875 and
  CenterCrop(image_size) (224 from 256). Both yield uint8 CHW tensors: normalising and the
  cast to float happen on the device (`nnperf.engine.feeders.InputPreparer`), as for CIFAR.
* `decode_all()` decodes a split once, with the evaluation transform (no random crop), into
  one uint8 NHWC array: what the `device_resident` data path keeps on the device and
  augments there, and what training to accuracy evaluates on. `check_resident_fits()` refuses
  an array the device cannot hold, with the bytes needed and available.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from torch.utils.data import Dataset
from torchvision.transforms import v2

from nnperf.core.errors import NnperfError
from nnperf.workload.imagefolder import Split

# torchvision's reference recipe evaluates at 224 after resizing to 256.
EVAL_CROP_FRACTION = 0.875
# The share of the host's available memory a decoded-once split may take on a CPU (or on
# Apple's unified memory): the run's model, activations and the DataLoader need the rest.
HOST_MEMORY_SHARE = 0.5
DECODE_THREADS = 8


def train_transform(image_size: int) -> v2.Compose:
    return v2.Compose(
        [
            v2.RandomResizedCrop(image_size, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.PILToTensor(),
        ]
    )


def eval_transform(image_size: int) -> v2.Compose:
    return v2.Compose(
        [
            v2.Resize(round(image_size / EVAL_CROP_FRACTION), antialias=True),
            v2.CenterCrop(image_size),
            v2.PILToTensor(),
        ]
    )


def _load_rgb(path: str):
    from PIL import Image

    try:
        with Image.open(path) as image:
            return image.convert("RGB")
    except Exception as exc:  # noqa: BLE001 - PIL raises many kinds for a damaged file
        detail = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise NnperfError(f"{path}: unreadable image ({detail})") from None


class ImageFiles(Dataset):
    """The images of a split, decoded and transformed per item (on the DataLoader's
    workers when it has any)."""

    def __init__(self, split: Split, augment: bool):
        self.files = split.files
        self.labels = torch.tensor(split.labels, dtype=torch.int64)
        size = split.image_size
        self.transform = train_transform(size) if augment else eval_transform(size)

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int):
        return self.transform(_load_rgb(self.files[index])), self.labels[index]


def resident_bytes(split: Split) -> int:
    """Bytes of `split` decoded once: uint8, three channels, image_size squared."""
    return len(split) * 3 * split.image_size**2


def available_bytes(device: torch.device) -> tuple[int, str]:
    """(bytes a decoded-once split may take on `device`, where they were counted)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free), f"free on {device.type}"
    import psutil

    available = psutil.virtual_memory().available
    return int(available * HOST_MEMORY_SHARE), f"{HOST_MEMORY_SHARE:.0%} of available host memory"


def check_resident_fits(split: Split, device: torch.device, what: str = "device_resident") -> None:
    """NnperfError with one line when the decoded split would not fit on `device`.

    On CUDA the array is built in host memory first, so the host must hold it too."""
    needed = resident_bytes(split)
    places = [available_bytes(device)]
    if device.type == "cuda":
        places.append(available_bytes(torch.device("cpu")))
    for available, where in places:
        if needed > available:
            raise NnperfError(
                f"the {what} data path needs {needed:,} bytes for {len(split)} images decoded "
                f"at {split.image_size}x{split.image_size}, more than the {available:,} bytes "
                f"{where}; use data_path dataloader or a smaller dataset.image_size"
            )


def decode_all(split: Split, threads: int | None = None) -> np.ndarray:
    """Every image of `split` decoded once with the evaluation transform: uint8
    [N, image_size, image_size, 3] (PIL decodes outside the GIL, so threads help)."""
    transform = eval_transform(split.image_size)
    size = split.image_size
    out = np.empty((len(split), size, size, 3), dtype=np.uint8)

    def one(index: int) -> None:
        out[index] = transform(_load_rgb(split.files[index])).permute(1, 2, 0).numpy()

    threads = threads or min(DECODE_THREADS, os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(one, range(len(split))))
    return out
