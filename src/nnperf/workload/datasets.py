"""Image-classification datasets on disk: fetch or generate them, then read a split back.

`prepare(request)` makes one dataset directory (rule `prepare_dataset`, into
`resources/data/{dataset}/`) from a `nnperf.core.contract.DatasetRequest`:
CIFAR-10 or CIFAR-100 downloaded from the official archive (or a mirror, a `file://` URL or a
local copy) and MD5-verified, or a deterministic synthetic set written in the same CIFAR-10
python-pickle layout (`nnperf.workload.cifar_pickle`), or for the user's ImageFolder a
manifest alone (`nnperf.workload.imagefolder`; the images stay in their folder).
`prepared()` and `read_split()` are what the jobs read, of either kind. `load_split()` reads any of the three
into numpy arrays with torchvision's own CIFAR reader, so there is exactly one loading path for
all of them.

Layout of a prepared directory (exactly what torchvision's CIFAR10/CIFAR100 expect as `root`):

    {root}/cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta}   cifar10, synthetic
    {root}/cifar-100-python/{train, test, meta}                               cifar100
    {root}/manifest.json   what was prepared, from where, with which checksum

A directory appears only when it is complete: everything is built in a scratch directory
beside it and renamed into place at the end, so a failed or interrupted attempt leaves
nothing behind and never damages a dataset that was already there.

This module is not the training input pipeline: batching, augmentation, normalisation and
device transfer belong to the code that times training steps. It ends at numpy arrays.
"""

from __future__ import annotations

import os
import re
import shutil
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nnperf.core import layout, vocab
from nnperf.core.contract import DatasetRequest, to_dict
from nnperf.core.errors import NnperfError
from nnperf.core.files import write_json
from nnperf.workload import imagefolder
from nnperf.workload.cifar_pickle import IMAGE_SHAPE, write_cifar10_folder
from nnperf.workload.synthetic import (  # noqa: F401 - re-exported: datasets.synthetic_split
    SPLITS,
    SYNTHETIC_LABEL_NAMES,
    SYNTHETIC_NUM_CLASSES,
    check_synthetic,
    synthetic_split,
)

MANIFEST_NAME = "manifest.json"


@dataclass(frozen=True)
class DatasetSpec:
    """What the rest of nnperf needs to know about one dataset."""

    name: str
    num_classes: int
    image_shape: tuple[int, int, int]
    # Per-channel mean and std of the training pixels scaled to [0, 1] (for Normalize).
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    url: str | None  # official archive; None when generated locally
    md5: str | None  # MD5 of the official archive
    archive_filename: str | None
    folder: str  # the folder inside the dataset directory (torchvision's `base_folder`)


# Normalisation constants: the per-channel mean and standard deviation of all training
# pixels in [0, 1], as computed over the official training splits (the values torchvision's
# and most CIFAR training recipes use). The std (0.2023, 0.1994, 0.2010) seen in many CIFAR
# repositories is not the pixel std (kuangliu/pytorch-cifar issue #19); it is not used here.
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
CIFAR100_MEAN = (0.5071, 0.4865, 0.4409)
CIFAR100_STD = (0.2673, 0.2564, 0.2762)

# Archive URLs and MD5s as published on https://www.cs.toronto.edu/~kriz/cifar.html (the
# same values torchvision.datasets.CIFAR10/CIFAR100 carry). One entry per name in
# `vocab.DATASETS` (a test checks they agree).
DATASETS: dict[str, DatasetSpec] = {
    "cifar10": DatasetSpec(
        name="cifar10",
        num_classes=10,
        image_shape=IMAGE_SHAPE,
        mean=CIFAR10_MEAN,
        std=CIFAR10_STD,
        url="https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
        md5="c58f30108f718f92721af3b95e74349a",
        archive_filename="cifar-10-python.tar.gz",
        folder="cifar-10-batches-py",
    ),
    "cifar100": DatasetSpec(
        name="cifar100",
        num_classes=100,
        image_shape=IMAGE_SHAPE,
        mean=CIFAR100_MEAN,
        std=CIFAR100_STD,
        url="https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
        md5="eb9058c3a382ffc7106e4002c42a8d85",
        archive_filename="cifar-100-python.tar.gz",
        folder="cifar-100-python",
    ),
    # Synthetic images depend on the seed and the image counts, so no single constant is
    # their true statistic; CIFAR-10's constants keep a normalised input in the same range
    # as for the real data (the prepared manifest records the measured values).
    "synthetic": DatasetSpec(
        name="synthetic",
        num_classes=SYNTHETIC_NUM_CLASSES,
        image_shape=IMAGE_SHAPE,
        mean=CIFAR10_MEAN,
        std=CIFAR10_STD,
        url=None,
        md5=None,
        archive_filename=None,
        folder="cifar-10-batches-py",
    ),
}

URL_SCHEMES = ("http", "https", "ftp", "file")
_MD5_PATTERN = re.compile(r"[0-9a-fA-F]{32}")


def get_spec(name: str) -> DatasetSpec:
    """The spec of dataset `name`; an unknown name is an NnperfError listing the known ones."""
    try:
        return DATASETS[name]
    except (KeyError, TypeError):
        raise NnperfError(
            f"dataset.name {name!r} is unknown; allowed: {', '.join(vocab.DATASETS)}"
        ) from None


# --------------------------------------------------------------------------------------
# Reading (torchvision's reader)
# --------------------------------------------------------------------------------------


def _torchvision_reader(spec: DatasetSpec):
    """torchvision's CIFAR10/CIFAR100 class for `spec`, minus its per-file checksums.

    torchvision checks each batch file against the MD5 of the official file. That is right
    for the official data only: synthetic sets and custom archives hold other bytes. The
    archive itself was verified by `prepare()`, so here a file only has to exist.
    """
    from torchvision.datasets import CIFAR10, CIFAR100

    base = CIFAR100 if spec.folder == CIFAR100.base_folder else CIFAR10

    class Reader(base):
        train_list = [[filename, None] for filename, _ in base.train_list]
        test_list = [[filename, None] for filename, _ in base.test_list]
        meta = {**base.meta, "md5": None}

    Reader.__name__ = f"Unchecked{base.__name__}"
    return Reader


def _read(root: Path, spec: DatasetSpec, split: str, label: str | None = None):
    """Run torchvision's reader on `root`; any failure is one NnperfError line.

    Messages name `label` (default: the dataset folder) as the file at fault.
    """
    folder = root / spec.folder
    where = label or folder
    again = "" if label else "; prepare it again"
    if not folder.is_dir():
        raise NnperfError(
            f"{folder}: not found; prepare the dataset first (rule prepare_dataset: "
            f"`snakemake {layout.path('dataset', dataset=spec.name)}`)"
        )
    try:
        dataset = _torchvision_reader(spec)(root=root, train=(split == "train"))
    except RuntimeError:  # torchvision's "Dataset not found or corrupted": a file is missing
        raise NnperfError(
            f"{where}: incomplete {spec.name} dataset, a batch or meta file is missing{again}"
        ) from None
    except Exception as exc:  # noqa: BLE001 - any unpickling failure means a damaged file
        detail = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise NnperfError(f"{where}: cannot read the {split} split ({detail}){again}") from None
    images = np.ascontiguousarray(dataset.data, dtype=np.uint8)
    labels = np.asarray(dataset.targets, dtype=np.int64)
    if len(images) != len(labels):
        raise NnperfError(
            f"{where}: {split} split has {len(images)} images but {len(labels)} labels"
        )
    if len(labels) and (labels.min() < 0 or labels.max() >= spec.num_classes):
        raise NnperfError(
            f"{where}: {split} labels span {labels.min()}..{labels.max()}; "
            f"allowed for {spec.name}: 0..{spec.num_classes - 1}"
        )
    return images, labels, list(dataset.classes)


def load_split(root: str | os.PathLike, name: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Read one split of a prepared dataset.

    Returns (images: uint8 [N, 32, 32, 3] in RGB, labels: int64 [N]); CIFAR-100 labels are
    the 100 fine classes.
    """
    spec = get_spec(name)
    if split not in SPLITS:
        raise NnperfError(f"split {split!r} is unknown; allowed: {', '.join(SPLITS)}")
    images, labels, _ = _read(Path(root), spec, split)
    return images, labels


def pixel_mean_std(images: np.ndarray) -> tuple[list[float], list[float]]:
    """Per-channel mean and std of uint8 NHWC images, in [0, 1] units.

    Summed in float64 chunks so 50k images never need a 1.2 GB float copy.
    """
    count = 0
    total = np.zeros(3)
    total_sq = np.zeros(3)
    for start in range(0, len(images), 4096):
        chunk = images[start : start + 4096].reshape(-1, 3).astype(np.float64) / 255.0
        count += len(chunk)
        total += chunk.sum(axis=0)
        total_sq += np.square(chunk).sum(axis=0)
    if count == 0:
        return [float("nan")] * 3, [float("nan")] * 3
    mean = total / count
    std = np.sqrt(np.maximum(total_sq / count - mean**2, 0.0))
    return [round(float(v), 6) for v in mean], [round(float(v), 6) for v in std]


# --------------------------------------------------------------------------------------
# Preparing a dataset directory
# --------------------------------------------------------------------------------------


def _check_md5(md5: str | None) -> str | None:
    if md5 is None:
        return None
    if not isinstance(md5, str) or not _MD5_PATTERN.fullmatch(md5):
        raise NnperfError(f"dataset.md5 {md5!r} is not an MD5; allowed: 32 hex digits or null")
    return md5.lower()


def _fetch(source: str, destination: Path) -> None:
    """Copy the archive at `source` (URL or local path) to `destination`."""
    scheme = urllib.parse.urlparse(source).scheme.lower()
    if scheme in ("http", "https", "ftp"):
        from torchvision.datasets.utils import download_url

        try:
            # md5=None: the checksum is checked by the caller, which can name both values.
            download_url(source, str(destination.parent), destination.name, md5=None)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise NnperfError(f"dataset.source {source}: download failed ({reason})") from None
        return
    if scheme == "file":
        # torchvision's download_url cannot fetch file: URLs (its _urlretrieve reads
        # `response.length`, which urllib's file responses lack), so they are copied here.
        parsed = urllib.parse.urlparse(source)
        local = Path(urllib.request.url2pathname(parsed.path))
    elif scheme and len(scheme) > 1:  # one letter would be a Windows drive, i.e. a path
        raise NnperfError(
            f"dataset.source {source!r} has scheme {scheme!r}; allowed: "
            f"{', '.join(s + '://' for s in URL_SCHEMES)} URLs or a local file path"
        )
    else:
        local = Path(source).expanduser()
    if local.is_dir():
        raise NnperfError(
            f"dataset.source {source}: is a folder, not an archive; allowed: the CIFAR "
            "python archive (.tar.gz), or for a folder of images dataset.name imagefolder "
            "with dataset.path"
        )
    if not local.is_file():
        raise NnperfError(f"dataset.source {source}: no such file")
    # Copied rather than read in place, so the bytes that are verified are the bytes that
    # are extracted even if the source changes meanwhile.
    try:
        shutil.copyfile(local, destination)
    except OSError as exc:
        raise NnperfError(f"dataset.source {source}: cannot read ({exc.strerror})") from None


def _extract(archive: Path, destination: Path, source: str) -> None:
    """Unpack the tar archive `archive` into `destination`.

    Written with tarfile instead of torchvision's extract_archive because that calls
    extractall() without a filter; the "data" filter refuses members that would land
    outside `destination` (absolute paths, "..", links), which matters when the source can
    be any URL.
    """
    options = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
    try:
        with tarfile.open(archive, "r:*") as tar:
            tar.extractall(destination, **options)
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise NnperfError(
            f"{source}: not a complete tar archive, cannot extract it ({exc})"
        ) from None


def _install(staging: Path, root: Path, scratch: Path) -> None:
    """Put the finished `staging` directory at `root`, replacing what was there.

    Two renames on the same filesystem; an existing dataset is moved into `scratch` first
    (and deleted with it) and moved back if the second rename fails.
    """
    if root.exists() or root.is_symlink():
        previous = scratch / "previous"
        os.replace(root, previous)
        try:
            os.replace(staging, root)
        except BaseException:
            os.replace(previous, root)
            raise
    else:
        os.replace(staging, root)


def _prepare_cifar(
    spec: DatasetSpec, source: str | None, md5: str | None, scratch: Path, staging: Path
) -> dict:
    is_official = source is None or source == spec.url
    source = spec.url if source is None else os.fspath(source)
    # Verified by default, whatever the source: a mirror or a local copy of the official
    # archive has the official bytes. Another archive needs its own dataset.md5.
    expected = md5 if md5 is not None else spec.md5
    md5_origin = "dataset.md5" if md5 is not None else "official"

    archive = scratch / "download" / spec.archive_filename
    archive.parent.mkdir()
    _fetch(source, archive)

    from torchvision.datasets.utils import calculate_md5

    actual = calculate_md5(archive)
    if actual != expected:
        hint = (
            "; for an archive other than the official one, set dataset.md5 to its MD5"
            if md5 is None and not is_official
            else ""
        )
        raise NnperfError(
            f"{source}: md5 {actual} does not match the expected {expected} "
            f"({md5_origin}); the archive is corrupt, incomplete or not {spec.name}{hint}"
        )

    extracted = scratch / "extract"
    extracted.mkdir()
    _extract(archive, extracted, source)
    archive.unlink()  # the archive is not kept: the extracted files are the dataset
    if not (extracted / spec.folder).is_dir():
        found = ", ".join(sorted(p.name for p in extracted.iterdir())) or "nothing"
        raise NnperfError(
            f"{source}: archive has no {spec.folder}/ folder (found: {found}); "
            f"expected the CIFAR python version, like {spec.url}"
        )
    os.replace(extracted / spec.folder, staging / spec.folder)
    return {
        "source": source,
        "md5": {"expected": expected, "actual": actual, "origin": md5_origin, "verified": True},
        "synthetic": None,
    }


def prepare(request: DatasetRequest) -> dict:
    """Create the dataset directory `request.root` for `request.dataset`; return its manifest.

    cifar10/cifar100: fetch `dataset.source` (default: the official URL; also any
    http(s)/ftp or file:// URL or a local path), check its MD5 against `dataset.md5`
    (default: the official archive's MD5, also for other sources, since a mirror or a local
    copy holds the same bytes), extract it and read both splits back before anything is
    installed. synthetic: generate `dataset.synthetic` images; source and md5 must be null.

    Built in a scratch directory beside the root and renamed onto it at the end: on any
    failure the root is exactly as before (absent, or the previous dataset) and the scratch
    directory is gone. The manifest (also written as `manifest.json`) names the dataset and
    how it was made, so the directory carries its own key.
    """
    settings = request.dataset
    if settings.name == vocab.IMAGEFOLDER:
        return _prepare_imagefolder(request)
    name, source, synthetic = settings.name, settings.source, settings.synthetic
    spec = get_spec(name)
    md5 = _check_md5(settings.md5)
    if spec.url is None:
        for key, value in (("source", source), ("md5", md5)):
            if value is not None:
                raise NnperfError(
                    f"dataset.{key} is {value!r} but dataset {name!r} is generated, not "
                    f"downloaded; allowed: null"
                )
        check_synthetic(synthetic)

    root = Path(request.root)
    root.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{root.name}.", suffix=".tmp", dir=root.parent))
    try:
        staging = scratch / "dataset"
        staging.mkdir()
        if spec.url is None:
            train = synthetic_split(synthetic, "train")
            test = synthetic_split(synthetic, "test")
            write_cifar10_folder(
                staging / spec.folder,
                train,
                test,
                SYNTHETIC_LABEL_NAMES,
                filename_prefix="synthetic",
            )
            provenance = {
                "source": "synthetic",
                "md5": None,
                "synthetic": to_dict(synthetic),
            }
        else:
            provenance = _prepare_cifar(spec, source, md5, scratch, staging)

        # Read both splits back with the loader the runs use: what is installed is readable.
        label = f"{provenance['source']} ({spec.folder}/)"
        train_images, train_labels, class_names = _read(staging, spec, "train", label)
        test_images, _, _ = _read(staging, spec, "test", label)
        mean, std = pixel_mean_std(train_images)
        manifest = {
            "dataset": spec.name,
            "layout": spec.folder,
            **provenance,
            "images": {"train": int(len(train_labels)), "test": int(len(test_images))},
            "num_classes": spec.num_classes,
            "image_shape": list(spec.image_shape),
            "class_names": class_names,
            "train_pixel_mean": mean,
            "train_pixel_std": std,
            "created_at_unix": time.time(),
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        write_json(staging / MANIFEST_NAME, manifest)
        _install(staging, root, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return manifest


def _prepare_imagefolder(request: DatasetRequest) -> dict:
    """The manifest of the user's ImageFolder, written alone into `request.root`: the images
    stay where they are (`nnperf.workload.imagefolder`)."""
    root = Path(request.root)
    root.parent.mkdir(parents=True, exist_ok=True)
    document = imagefolder.manifest(request.dataset, request.dataset.key)
    document = {
        **document,
        "created_at_unix": time.time(),
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    scratch = Path(tempfile.mkdtemp(prefix=f".{root.name}.", suffix=".tmp", dir=root.parent))
    try:
        staging = scratch / "dataset"
        staging.mkdir()
        write_json(staging / MANIFEST_NAME, document)
        _install(staging, root, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return document


# --------------------------------------------------------------------------------------
# What the jobs read: a built-in dataset's arrays or an ImageFolder's split
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PreparedData:
    """What a job needs to know about a prepared dataset, whichever kind it is."""

    key: str
    num_classes: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    imagefolder: bool


def is_builtin(key: str) -> bool:
    """Whether the dataset key `key` names a built-in dataset (else an ImageFolder's label)."""
    return key in DATASETS


def prepared(root: str | os.PathLike, key: str) -> PreparedData:
    """The classes and normalisation of dataset `key`, prepared in `root`."""
    if is_builtin(key):
        spec = get_spec(key)
        return PreparedData(key, spec.num_classes, spec.mean, spec.std, False)
    document = imagefolder.read_manifest(root)
    return PreparedData(
        key,
        int(document["num_classes"]),
        tuple(document["mean"]),
        tuple(document["std"]),
        True,
    )


def read_split(root: str | os.PathLike, key: str, split: str, image_size: int | None):
    """(images, labels) of one split, `split` "train" or "test": uint8 NHWC arrays of a
    built-in dataset, or an ImageFolder's `Split` (its `val/` for "test"), decoded later by
    the data path at `image_size`."""
    if is_builtin(key):
        return load_split(root, key, split)
    if image_size is None:
        raise NnperfError(f"dataset {key!r} is an ImageFolder; its image_size must be given")
    folder_split = imagefolder.open_split(root, "train" if split == "train" else "val", image_size)
    return folder_split, np.asarray(folder_split.labels, dtype=np.int64)


def summary(manifest: dict) -> str:
    """One line for the job log: what was prepared and how it was checked."""
    if manifest.get("name") == vocab.IMAGEFOLDER:
        return imagefolder.summary(manifest)
    images = manifest["images"]
    if manifest["md5"] is None:
        how = f"generated with seed {manifest['synthetic']['seed']}"
    else:
        how = f"md5 {manifest['md5']['actual']} verified"
    return (
        f"{manifest['dataset']}: {images['train']} train and {images['test']} test images ({how})"
    )
