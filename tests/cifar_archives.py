"""CIFAR archives in their genuine format (Python 2 pickles in a tar.gz), built from random
images, for the tests of the dataset download and of the workflows that prepare one."""

from __future__ import annotations

import hashlib
import tarfile
from pathlib import Path

import numpy as np

from nnperf.workload import cifar_pickle

CIFAR10_LABEL_NAMES = [
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck",
]  # fmt: skip


def cifar_rows(images: np.ndarray) -> np.ndarray:
    """NHWC -> [N, 3072]: 1024 red values, then green, then blue, each plane row-major.

    Built plane by plane on purpose (not with the library's transpose) so the expected
    layout is stated independently of the code under test.
    """
    rows = [
        np.concatenate([image[:, :, channel].ravel() for channel in range(3)]) for image in images
    ]
    return np.array(rows, dtype=np.uint8).reshape(len(images), 3072)


def random_split(rng: np.random.Generator, count: int, num_classes: int):
    images = rng.integers(0, 256, size=(count, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, num_classes, size=count).astype(np.int64)
    return images, labels


def tar_gz(folder: Path, archive: Path) -> str:
    """Pack `folder` (as its own top-level directory) into `archive`; return its MD5."""
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    return hashlib.md5(archive.read_bytes()).hexdigest()


def build_cifar10_archive(where: Path, train_count: int = 7, test_count: int = 3, skip=()):
    rng = np.random.default_rng(10)
    train, test = random_split(rng, train_count, 10), random_split(rng, test_count, 10)
    folder = where / "build10" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    batches = np.array_split(np.arange(train_count), 5)
    files = {
        f"data_batch_{n}": {
            "batch_label": f"training batch {n} of 5",
            "labels": [int(v) for v in train[1][index]],
            "data": cifar_rows(train[0][index]),
            "filenames": [f"img_{i}.png" for i in index],
        }
        for n, index in enumerate(batches, start=1)
    }
    files["test_batch"] = {
        "batch_label": "testing batch 1 of 1",
        "labels": [int(v) for v in test[1]],
        "data": cifar_rows(test[0]),
        "filenames": [f"test_{i}.png" for i in range(test_count)],
    }
    files["batches.meta"] = {
        "num_cases_per_batch": len(batches[0]),
        "label_names": CIFAR10_LABEL_NAMES,
        "num_vis": 3072,
    }
    for name, content in files.items():
        if name not in skip:
            cifar_pickle.write_py2_pickle(folder / name, content)
    archive = where / "cifar-10-python.tar.gz"
    return archive, tar_gz(folder, archive), train, test


def build_cifar100_archive(where: Path, train_count: int = 6, test_count: int = 4):
    rng = np.random.default_rng(100)
    train, test = random_split(rng, train_count, 100), random_split(rng, test_count, 100)
    folder = where / "build100" / "cifar-100-python"
    folder.mkdir(parents=True)
    for name, (images, fine) in (("train", train), ("test", test)):
        cifar_pickle.write_py2_pickle(
            folder / name,
            {
                "filenames": [f"{name}_{i}.png" for i in range(len(fine))],
                "batch_label": f"{name}ing batch 1 of 1",
                "fine_labels": [int(v) for v in fine],
                "coarse_labels": [int(v) // 5 for v in fine],
                "data": cifar_rows(images),
            },
        )
    cifar_pickle.write_py2_pickle(
        folder / "meta",
        {
            "fine_label_names": [f"fine_{k}" for k in range(100)],
            "coarse_label_names": [f"coarse_{k}" for k in range(20)],
        },
    )
    archive = where / "cifar-100-python.tar.gz"
    return archive, tar_gz(folder, archive), train, test
