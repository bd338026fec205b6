"""The user's own images: a folder in torchvision's ImageFolder layout, checked and described.

    <path>/train/<class>/**/*.jpg|*.jpeg|*.png     the training split; one folder per class
    <path>/val/<class>/**/*.jpg|...                the evaluation split (its classes: train's)

Three things happen to such a folder, at three times:

* `scan()` lists it while Snakemake builds the DAG (torch-free, no image is opened): a path
  that does not exist, a folder without `train/` or with no image in it is one line before
  any job runs. The listing gives the class count (the models' `num_classes`) and a
  `fingerprint` of each file's relative path, size and modification time, which the rule
  `prepare_dataset` takes as a param: touching, adding or removing an image changes it, so
  Snakemake runs the data stage again.
* `prepare()` (rule `prepare_dataset`) reads every byte: it decodes each image fully (a
  header check, PIL's `verify()`, passes a truncated JPEG; decoding does not) and hashes the
  relative path, size and bytes of every file into `sha256`, then writes the manifest: counts
  per split and class, bytes, formats and the hash. Every job that reads the images takes the
  prepared folder as an input, so a new manifest re-runs them. Cost, measured on a 2-core VM
  with 500x375 JPEGs of 88 kB: 1.0 ms to decode (JPEG draft mode) and 0.1 ms to hash an image,
  so about 1 ms per image and thread; ImageNet's 1.28 M images take minutes on 8 threads.
* `open_split()` (in the jobs) lists the folder again and checks it against the manifest, so
  a folder changed since it was prepared is one line, not numbers about other images.

Decoding, augmentation and the decoded-once array are `nnperf.workload.image_decoding`'s;
this module never imports torch.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from nnperf.core.errors import NnperfError

SPLITS = ("train", "val")
# File endings torchvision's ImageFolder would also take (case-insensitive), JPEG and PNG only.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")
# Normalisation: ImageNet's per-channel mean and std in [0, 1] (torchvision's reference
# recipes and every pretrained torchvision weight expect them). Computing a folder's own
# would decode every image at every size before the first job; the values are recorded in
# the manifest.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
HASH_METHOD = "sha256_relpath_size_bytes"
FINGERPRINT_METHOD = "sha256_relpath_size_mtime_ns"
MAX_CHECK_THREADS = 8


@dataclasses.dataclass(frozen=True)
class Scan:
    """A listed ImageFolder: its classes (train's class folders, sorted) and per split the
    images as (path relative to `root`, class index), in torchvision's order."""

    root: Path
    classes: tuple[str, ...]
    samples: dict[str, tuple[tuple[str, int], ...]]
    sizes: dict[str, tuple[int, ...]]
    fingerprint: str

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def count(self, split: str) -> int:
        return len(self.samples[split])


def resolve(path: str | os.PathLike) -> Path:
    """`dataset.path` as an absolute path (relative to the folder Snakemake runs in)."""
    return Path(os.path.abspath(os.path.expanduser(os.fspath(path))))


def _is_image(name: str) -> bool:
    return name.lower().endswith(IMAGE_EXTENSIONS)


def _class_files(folder: Path) -> list[Path]:
    """The images under one class folder, as torchvision's `make_dataset` orders them."""
    found = []
    for parent, _, names in sorted(os.walk(folder, followlinks=True)):
        found.extend(Path(parent, name) for name in sorted(names) if _is_image(name))
    return found


def _list_split(root: Path, split: str, classes: list[str]) -> tuple[list, list, list]:
    samples, sizes, stamps = [], [], []
    for index, name in enumerate(classes):
        folder = root / split / name
        if not folder.is_dir():
            continue
        for file in _class_files(folder):
            info = file.stat()
            relative = file.relative_to(root).as_posix()
            samples.append((relative, index))
            sizes.append(info.st_size)
            stamps.append(f"{relative}\0{info.st_size}\0{info.st_mtime_ns}\n")
    return samples, sizes, stamps


def _class_folders(folder: Path) -> list[str]:
    return sorted(entry.name for entry in os.scandir(folder) if entry.is_dir())


def scan(path: str | os.PathLike) -> Scan:
    """List the ImageFolder at `path` (no image is opened); NnperfError with one line when
    it is not one."""
    root = resolve(path)
    if not root.exists():
        raise NnperfError(f"dataset.path {os.fspath(path)}: no such folder")
    if not root.is_dir():
        raise NnperfError(
            f"dataset.path {os.fspath(path)}: is a file, not a folder; allowed: a folder "
            "holding train/ and val/"
        )
    train = root / "train"
    if not train.is_dir():
        found = ", ".join(sorted(entry.name for entry in os.scandir(root))[:8]) or "nothing"
        raise NnperfError(
            f"dataset.path {os.fspath(path)}: has no train/ folder (found: {found}); "
            "allowed: train/<class>/*.jpg and val/<class>/*.jpg (torchvision's ImageFolder)"
        )
    classes = _class_folders(train)
    train_samples, train_sizes, stamps = _list_split(root, "train", classes)
    # A class folder with no image is no class: torchvision's ImageFolder refuses it too.
    held = sorted({index for _, index in train_samples})
    if not held:
        kinds = "no class folders" if not classes else f"{len(classes)} class folders"
        raise NnperfError(
            f"dataset.path {os.fspath(path)}: train/ holds no image ({kinds}, none holding "
            f"a {'/'.join(IMAGE_EXTENSIONS)} file); allowed: train/<class>/<image>"
        )
    if len(held) < len(classes):
        empty = classes[next(i for i in range(len(classes)) if i not in held)]
        raise NnperfError(
            f"dataset.path {os.fspath(path)}: class folder train/{empty}/ holds no "
            f"{'/'.join(IMAGE_EXTENSIONS)} file; every class needs training images"
        )
    val_samples, val_sizes, val_stamps = [], [], []
    if (root / "val").is_dir():
        extra = sorted(set(_class_folders(root / "val")) - set(classes))
        if extra:
            raise NnperfError(
                f"dataset.path {os.fspath(path)}: val/{extra[0]}/ is a class train/ does not "
                "have; allowed in val/: the classes of train/"
            )
        val_samples, val_sizes, val_stamps = _list_split(root, "val", classes)
    digest = hashlib.sha256()
    for line in stamps + val_stamps:
        digest.update(line.encode())
    return Scan(
        root=root,
        classes=tuple(classes),
        samples={"train": tuple(train_samples), "val": tuple(val_samples)},
        sizes={"train": tuple(train_sizes), "val": tuple(val_sizes)},
        fingerprint=digest.hexdigest(),
    )


@functools.lru_cache(maxsize=8)
def scan_once(path: str) -> Scan:
    """`scan(path)`, listed once per process: building a DAG asks for it from many jobs."""
    return scan(path)


def check_batch_sizes(found: Scan, batch_sizes, where: str) -> None:
    """Full batches only: a batch larger than the training split cannot be timed."""
    too_large = [b for b in batch_sizes if b > found.count("train")]
    if too_large:
        raise NnperfError(
            f"config batch_sizes has {too_large[0]}, more than the {found.count('train')} "
            f"training images of {where}; allowed: at most {found.count('train')}"
        )


# --- the data stage ---------------------------------------------------------------------


def _check_file(root: Path, relative: str) -> tuple[str, bytes, str]:
    """(format, sha256 of path + size + bytes, error or '') of one image, decoded in full."""
    from PIL import Image

    data = (root / relative).read_bytes()
    digest = hashlib.sha256(f"{relative}\0{len(data)}\0".encode())
    digest.update(data)
    try:
        with Image.open(io.BytesIO(data)) as image:
            kind = image.format or "unknown"
            # JPEG draft mode decodes at a reduced scale, which still reads every byte of the
            # compressed stream (a truncated file still fails) at 3/4 of the cost.
            image.draft("RGB", (64, 64))
            image.load()
    except Exception as exc:  # noqa: BLE001 - PIL raises many kinds for a damaged file
        return "", digest.digest(), " ".join(f"{type(exc).__name__}: {exc}".split())
    return kind, digest.digest(), ""


def manifest_counts(found: Scan, threads: int | None = None) -> dict:
    """Decode every image of `found` and hash its bytes: the manifest's counts and hash.

    The first file (in split, class and name order) that does not decode is one line."""
    threads = threads or min(MAX_CHECK_THREADS, os.cpu_count() or 1)
    total = hashlib.sha256()
    formats: dict[str, int] = {}
    per_class: dict[str, dict[str, int]] = {}
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for split in SPLITS:
            counts = dict.fromkeys(found.classes, 0)
            samples = found.samples[split]
            checked = pool.map(lambda s: _check_file(found.root, s[0]), samples)
            for (relative, index), (kind, digest, error) in zip(samples, checked):
                if error:
                    raise NnperfError(
                        f"{found.root / relative}: unreadable image ({error}); the first of "
                        f"dataset.path {found.root} that does not decode: replace or remove it"
                    )
                total.update(digest)
                formats[kind] = formats.get(kind, 0) + 1
                counts[found.classes[index]] += 1
            per_class[split] = counts
    return {
        "images": {split: found.count(split) for split in SPLITS},
        "images_per_class": per_class,
        "bytes": {split: int(sum(found.sizes[split])) for split in SPLITS},
        "formats": dict(sorted(formats.items())),
        "sha256": total.hexdigest(),
        "hash_method": HASH_METHOD,
        "check_seconds": round(time.perf_counter() - started, 3),
        "check_threads": threads,
    }


def manifest(settings, key: str) -> dict:
    """The manifest of the ImageFolder `settings` names (`DatasetSettings`), filed as `key`."""
    found = scan(settings.path)
    return {
        "dataset": key,
        "name": "imagefolder",
        "path": os.fspath(found.root),
        "classes": list(found.classes),
        "num_classes": found.num_classes,
        **manifest_counts(found),
        "fingerprint": found.fingerprint,
        "fingerprint_method": FINGERPRINT_METHOD,
        "normalisation": "imagenet",
        "mean": list(IMAGENET_MEAN),
        "std": list(IMAGENET_STD),
    }


def summary(document: dict) -> str:
    """One line for the job log."""
    images = document["images"]
    return (
        f"{document['dataset']}: ImageFolder {document['path']}, {document['num_classes']} "
        f"classes, {images['train']} train and {images['val']} val images, all decoded "
        f"({document['check_seconds']:.1f} s on {document['check_threads']} threads), "
        f"sha256 {document['sha256'][:12]}"
    )


# --- in the jobs --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Split:
    """One split of a prepared ImageFolder, as the jobs read it: absolute file paths and
    their class indices, the side images are decoded at, and the manifest's hash."""

    name: str
    files: tuple[str, ...]
    labels: tuple[int, ...]
    image_size: int
    num_classes: int
    sha256: str

    def __len__(self) -> int:
        return len(self.files)


def read_manifest(data_root: str | os.PathLike) -> dict:
    import json

    path = Path(data_root) / "manifest.json"
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise NnperfError(
            f"{path}: not found; prepare the dataset first (rule prepare_dataset)"
        ) from None
    if document.get("name") != "imagefolder":
        raise NnperfError(f"{path}: not an ImageFolder's manifest")
    return document


def open_split(data_root: str | os.PathLike, split: str, image_size: int) -> Split:
    """Split `split` of the ImageFolder prepared in `data_root`, listed again and checked
    against its manifest."""
    document = read_manifest(data_root)
    found = scan(document["path"])
    counts = {name: found.count(name) for name in SPLITS}
    if found.fingerprint != document["fingerprint"] or counts != document["images"]:
        raise NnperfError(
            f"{document['path']}: changed since it was prepared ({counts['train']} train and "
            f"{counts['val']} val images now, {document['images']['train']} and "
            f"{document['images']['val']} then); run Snakemake again to prepare it anew"
        )
    if not found.samples[split]:
        raise NnperfError(
            f"{document['path']}: {split}/ holds no image; training to accuracy evaluates on "
            "val/<class>/<image>"
        )
    return Split(
        name=split,
        files=tuple(os.fspath(found.root / relative) for relative, _ in found.samples[split]),
        labels=tuple(index for _, index in found.samples[split]),
        image_size=int(image_size),
        num_classes=found.num_classes,
        sha256=document["sha256"],
    )
