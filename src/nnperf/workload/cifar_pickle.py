"""Writing CIFAR-10's python-pickle layout, byte for byte as the genuine files are written.

`write_cifar10_folder` writes `data_batch_1..5`, `test_batch` and `batches.meta` from numpy
arrays, with the keys of the genuine files, and `write_py2_pickle` writes them as Python 2
pickles, which is what lets torchvision's reader and the dataset page's own snippet both read
them. `nnperf.workload.datasets` writes the synthetic dataset with it, so the synthetic set and
CIFAR-10 share one loading path; the tests build genuine-format archives with it.

It writes; reading is torchvision's (`nnperf.workload.datasets.load_split`).
"""

from __future__ import annotations

import os
import pickle
import struct
from pathlib import Path

import numpy as np

IMAGE_SHAPE = (3, 32, 32)  # channels, height, width: every CIFAR-shaped image here


class _Py2Pickler(pickle._Pickler):
    """Pickle `str` and `bytes` the way Python 2's cPickle wrote its `str` (BINSTRING).

    Written by hand because no library writes Python 2 pickles from Python 3. The genuine
    CIFAR files were written by Python 2, so their keys and byte strings are Python 2 `str`:
    they load as `str` under `encoding="latin1"` (what torchvision uses: `entry["data"]`)
    and as `bytes` under `encoding="bytes"` (the dataset page's snippet: `d[b"data"]`).
    A plain Python 3 pickle would satisfy only one of those readers. Only the pure-Python
    pickler (`pickle._Pickler`) lets a subclass emit its own opcodes per type.
    """

    dispatch = dict(pickle._Pickler.dispatch)

    def _save_py2_str(self, obj: str | bytes) -> None:
        raw = obj.encode("latin-1") if isinstance(obj, str) else bytes(obj)
        if len(raw) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(raw)]))
        elif len(raw) <= 0x7FFFFFFF:
            self.write(pickle.BINSTRING + struct.pack("<i", len(raw)))
        else:
            raise ValueError(f"a Python 2 string holds at most 2 GiB, got {len(raw)} bytes")
        self.write(raw)
        self.memoize(obj)

    dispatch[str] = _save_py2_str
    dispatch[bytes] = _save_py2_str


def write_py2_pickle(path: str | os.PathLike, obj: object) -> None:
    """Write `obj` as a protocol-2 pickle in which every str/bytes is a Python 2 `str`.

    Numpy arrays pickle through their own reduce; their raw buffer becomes a Python 2
    string, exactly as in the genuine CIFAR files.
    """
    with open(path, "wb") as handle:
        _Py2Pickler(handle, protocol=2).dump(obj)


def _to_cifar_rows(images: np.ndarray) -> np.ndarray:
    """uint8 [N, 32, 32, 3] -> uint8 [N, 3072]: the red, green, blue 32x32 planes, row-major."""
    return np.ascontiguousarray(images.transpose(0, 3, 1, 2).reshape(len(images), -1))


def write_cifar10_folder(
    folder: str | os.PathLike,
    train: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    label_names: tuple[str, ...] | list[str],
    filename_prefix: str = "image",
) -> None:
    """Write the CIFAR-10 python layout: data_batch_1..5, test_batch, batches.meta.

    `train` and `test` are (uint8 [N, 32, 32, 3], int labels [N]). The training images are
    spread over five batches in order, as in the original (whose batches hold 10000 each).
    Keys are those of the genuine files: batch_label, labels, data, filenames;
    batches.meta holds num_cases_per_batch, label_names, num_vis.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    train_images, train_labels = train
    batches = np.array_split(np.arange(len(train_labels)), 5)
    for number, index in enumerate(batches, start=1):
        write_py2_pickle(
            folder / f"data_batch_{number}",
            _cifar10_batch(
                f"training batch {number} of 5",
                train_images[index],
                np.asarray(train_labels)[index],
                [f"{filename_prefix}_train_{i:06d}.png" for i in index],
            ),
        )
    test_images, test_labels = test
    write_py2_pickle(
        folder / "test_batch",
        _cifar10_batch(
            "testing batch 1 of 1",
            test_images,
            np.asarray(test_labels),
            [f"{filename_prefix}_test_{i:06d}.png" for i in range(len(test_labels))],
        ),
    )
    write_py2_pickle(
        folder / "batches.meta",
        {
            "num_cases_per_batch": len(batches[0]),
            "label_names": list(label_names),
            "num_vis": int(np.prod(IMAGE_SHAPE)),
        },
    )


def _cifar10_batch(
    batch_label: str, images: np.ndarray, labels: np.ndarray, filenames: list[str]
) -> dict:
    return {
        "batch_label": batch_label,
        "labels": [int(label) for label in labels],  # a list of ints, as in the original
        "data": _to_cifar_rows(images),
        "filenames": filenames,
    }
