"""nnperf.workload.datasets: fetching, verifying and reading CIFAR-format datasets, and the
synthetic set.

No network here, so the tests build tiny archives in the genuine CIFAR python format (a
tar.gz holding `cifar-10-batches-py/` or `cifar-100-python/` with Python-2-style pickles,
keys and array layout as described on https://www.cs.toronto.edu/~kriz/cifar.html) and
serve them as a local path, a file:// URL and over HTTP from a local server.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import pickle
import pickletools
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from nnperf.core import vocab
from nnperf.core.contract import DatasetRequest, DatasetSettings, SyntheticData, from_dict
from nnperf.core.errors import NnperfError
from nnperf.core.files import read_json
from nnperf.workload import cifar_pickle
from nnperf.workload import datasets as data

from cifar_archives import (  # noqa: E402
    CIFAR10_LABEL_NAMES,
    build_cifar10_archive,
    build_cifar100_archive,
    cifar_rows,
    random_split,
    tar_gz,
)

BUILDERS = {"cifar10": build_cifar10_archive, "cifar100": build_cifar100_archive}


def prepare(name, root, source=None, md5=None, synthetic=SyntheticData()) -> dict:
    """`data.prepare` with the request rule prepare_dataset would build for these settings."""
    settings = DatasetSettings(name=name, source=source, md5=md5, synthetic=synthetic)
    return data.prepare(DatasetRequest(root=str(root), dataset=settings))


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture
def served(tmp_path):
    """An HTTP server on localhost serving `tmp_path/www`; yields (base URL, folder)."""
    www = tmp_path / "www"
    www.mkdir()

    class QuietHandler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(QuietHandler, directory=str(www))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", www
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


# --------------------------------------------------------------------------------------
# Registry and bad input
# --------------------------------------------------------------------------------------


def test_registry_holds_the_three_datasets_with_their_constants():
    assert list(data.DATASETS) == sorted(vocab.DATASETS)
    c10, c100, syn = data.DATASETS["cifar10"], data.DATASETS["cifar100"], data.DATASETS["synthetic"]
    assert (c10.num_classes, c100.num_classes, syn.num_classes) == (10, 100, 10)
    assert {c10.image_shape, c100.image_shape, syn.image_shape} == {(3, 32, 32)}
    assert c10.url == "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
    assert c10.md5 == "c58f30108f718f92721af3b95e74349a"
    assert c100.url == "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz"
    assert c100.md5 == "eb9058c3a382ffc7106e4002c42a8d85"
    assert (c10.folder, c100.folder, syn.folder) == (
        "cifar-10-batches-py", "cifar-100-python", "cifar-10-batches-py",
    )  # fmt: skip
    assert c10.mean == (0.4914, 0.4822, 0.4465) and c10.std == (0.2470, 0.2435, 0.2616)
    assert c100.mean == (0.5071, 0.4865, 0.4409) and c100.std == (0.2673, 0.2564, 0.2762)
    assert syn.url is None and syn.md5 is None


def test_unknown_dataset_names_what_exists(tmp_path):
    expected = "dataset.name 'imagenet' is unknown; allowed: synthetic, cifar10, cifar100"
    for call in (
        lambda: data.get_spec("imagenet"),
        lambda: prepare("imagenet", tmp_path / "d"),
        lambda: data.load_split(tmp_path, "imagenet", "train"),
    ):
        with pytest.raises(NnperfError) as info:
            call()
        assert str(info.value) == expected
    assert listing(tmp_path) == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"name": "cifar10", "md5": "xyz"},
            "dataset.md5 'xyz' is not an MD5; allowed: 32 hex digits or null",
        ),
        (
            {"name": "synthetic", "source": "/tmp/a.tar.gz"},
            "dataset.source is '/tmp/a.tar.gz' but dataset 'synthetic' is generated, not "
            "downloaded; allowed: null",
        ),
        (
            {"name": "synthetic", "md5": "A" * 32},
            f"dataset.md5 is '{'a' * 32}' but dataset 'synthetic' is generated, not "
            "downloaded; allowed: null",
        ),
        (
            {"name": "synthetic", "synthetic": SyntheticData(train_images=0)},
            "dataset.synthetic.train_images is 0; allowed: an integer >= 1",
        ),
        (
            {"name": "synthetic", "synthetic": SyntheticData(test_images=True)},
            "dataset.synthetic.test_images is True; allowed: an integer >= 1",
        ),
        (
            {"name": "synthetic", "synthetic": SyntheticData(seed=-1)},
            "dataset.synthetic.seed is -1; allowed: an integer >= 0",
        ),
        (
            {"name": "cifar10", "source": "s3://bucket/cifar.tar.gz"},
            "dataset.source 's3://bucket/cifar.tar.gz' has scheme 's3'; allowed: http://, "
            "https://, ftp://, file:// URLs or a local file path",
        ),
    ],
)
def test_bad_prepare_input_is_one_clear_line(tmp_path, kwargs, message):
    with pytest.raises(NnperfError) as info:
        prepare(root=tmp_path / "out", **kwargs)
    assert str(info.value) == message
    assert listing(tmp_path) == []


def test_missing_source_names_it_and_leaves_nothing(tmp_path):
    missing = tmp_path / "nowhere" / "cifar-10-python.tar.gz"
    for source in (str(missing), missing.as_uri()):
        with pytest.raises(NnperfError) as info:
            prepare("cifar10", tmp_path / "out", source=source)
        assert str(info.value) == f"dataset.source {source}: no such file"
    assert listing(tmp_path) == []


def test_load_split_refuses_unknown_split_and_missing_dataset(tmp_path):
    with pytest.raises(NnperfError) as info:
        data.load_split(tmp_path, "cifar10", "validation")
    assert str(info.value) == "split 'validation' is unknown; allowed: train, test"
    with pytest.raises(NnperfError) as info:
        data.load_split(tmp_path / "cifar10", "cifar10", "train")
    assert str(info.value) == (
        f"{tmp_path / 'cifar10' / 'cifar-10-batches-py'}: not found; prepare the dataset first "
        "(rule prepare_dataset: `snakemake resources/data/cifar10`)"
    )


# --------------------------------------------------------------------------------------
# The real CIFAR path on built archives
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
@pytest.mark.parametrize("as_url", [True, False], ids=["file-url", "path"])
def test_cifar_archive_is_verified_extracted_and_read_back(tmp_path, name, as_url):
    archive, md5, train, test = BUILDERS[name](tmp_path / "src")
    source = archive.as_uri() if as_url else str(archive)
    root = tmp_path / "resources" / "data" / name

    manifest = prepare(name, root, source=source, md5=md5)

    spec = data.DATASETS[name]
    assert listing(root.parent) == [name]  # no scratch directory left beside it
    assert listing(root) == sorted([spec.folder, "manifest.json"])
    for split, (images, labels) in (("train", train), ("test", test)):
        got_images, got_labels = data.load_split(root, name, split)
        assert got_images.dtype == np.uint8 and got_images.shape == images.shape
        assert got_labels.dtype == np.int64
        np.testing.assert_array_equal(got_images, images)
        np.testing.assert_array_equal(got_labels, labels)  # CIFAR-100: the fine labels

    on_disk = read_json(root / "manifest.json")
    assert on_disk == {"schema_version": 1, **manifest}
    assert on_disk["dataset"] == name and on_disk["layout"] == spec.folder
    assert on_disk["source"] == source
    assert on_disk["md5"] == {
        "expected": md5,
        "actual": md5,
        "origin": "dataset.md5",
        "verified": True,
    }
    assert on_disk["images"] == {"train": len(train[1]), "test": len(test[1])}
    assert on_disk["num_classes"] == spec.num_classes
    assert on_disk["image_shape"] == [3, 32, 32]
    assert on_disk["synthetic"] is None
    if name == "cifar10":
        assert on_disk["class_names"] == CIFAR10_LABEL_NAMES
    else:
        assert on_disk["class_names"] == [f"fine_{k}" for k in range(100)]
    pixels = train[0].reshape(-1, 3) / 255.0
    np.testing.assert_allclose(on_disk["train_pixel_mean"], pixels.mean(axis=0), atol=1e-6)
    np.testing.assert_allclose(on_disk["train_pixel_std"], pixels.std(axis=0), atol=1e-6)
    assert on_disk["created_at"].endswith("Z") and on_disk["created_at_unix"] > 1.7e9


def test_cifar_archive_downloads_over_http_with_torchvision(tmp_path, served):
    base_url, www = served
    archive, md5, train, _ = build_cifar10_archive(tmp_path / "src")
    (www / "mirror.tar.gz").write_bytes(archive.read_bytes())
    root = tmp_path / "cifar10"

    manifest = prepare("cifar10", root, source=f"{base_url}/mirror.tar.gz", md5=md5)

    assert manifest["md5"]["actual"] == md5
    images, labels = data.load_split(root, "cifar10", "train")
    np.testing.assert_array_equal(images, train[0])
    np.testing.assert_array_equal(labels, train[1])
    with pytest.raises(NnperfError) as info:
        prepare("cifar10", tmp_path / "other", source=f"{base_url}/absent.tar.gz", md5=md5)
    assert str(info.value).startswith(f"dataset.source {base_url}/absent.tar.gz: download failed (")
    assert listing(tmp_path) == ["cifar10", "src", "www"]


def test_pixels_are_read_from_the_rgb_planes_row_major(tmp_path):
    """One hand-written batch row: red plane, green plane, blue plane, each row by row."""
    row = np.zeros(3072, dtype=np.uint8)
    row[0 * 1024 + 0 * 32 + 1] = 11  # red at (y=0, x=1)
    row[1 * 1024 + 2 * 32 + 0] = 22  # green at (y=2, x=0)
    row[2 * 1024 + 31 * 32 + 31] = 33  # blue at (y=31, x=31)
    folder = tmp_path / "pix" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for n in range(1, 6):
        batch = {"batch_label": "b", "labels": [3], "data": row[None, :], "filenames": ["a.png"]}
        cifar_pickle.write_py2_pickle(folder / f"data_batch_{n}", batch)
    cifar_pickle.write_py2_pickle(folder / "test_batch", batch)
    cifar_pickle.write_py2_pickle(folder / "batches.meta", {"label_names": CIFAR10_LABEL_NAMES})

    images, labels = data.load_split(tmp_path / "pix", "cifar10", "test")

    expected = np.zeros((1, 32, 32, 3), dtype=np.uint8)
    expected[0, 0, 1, 0], expected[0, 2, 0, 1], expected[0, 31, 31, 2] = 11, 22, 33
    np.testing.assert_array_equal(images, expected)
    assert labels.tolist() == [3]


# --------------------------------------------------------------------------------------
# Failures leave nothing behind
# --------------------------------------------------------------------------------------


def test_wrong_md5_is_one_line_and_leaves_nothing(tmp_path):
    archive, md5, _, _ = build_cifar10_archive(tmp_path / "src")
    wrong = "0" * 32
    root = tmp_path / "data" / "cifar10"
    with pytest.raises(NnperfError) as info:
        prepare("cifar10", root, source=archive.as_uri(), md5=wrong)
    assert str(info.value) == (
        f"{archive.as_uri()}: md5 {md5} does not match the expected {wrong} (dataset.md5); "
        "the archive is corrupt, incomplete or not cifar10"
    )
    assert not root.exists()
    assert listing(root.parent) == []


def test_custom_source_without_md5_is_checked_against_the_official_one(tmp_path):
    archive, md5, _, _ = build_cifar10_archive(tmp_path / "src")
    with pytest.raises(NnperfError) as info:
        prepare("cifar10", tmp_path / "out", source=str(archive))
    assert str(info.value) == (
        f"{archive}: md5 {md5} does not match the expected c58f30108f718f92721af3b95e74349a "
        "(official); the archive is corrupt, incomplete or not cifar10; for an archive other "
        "than the official one, set dataset.md5 to its MD5"
    )
    assert listing(tmp_path) == ["src"]


def test_partial_download_fails_its_checksum(tmp_path):
    archive, md5, _, _ = build_cifar10_archive(tmp_path / "src")
    partial = tmp_path / "partial.tar.gz"
    partial.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    actual = hashlib.md5(partial.read_bytes()).hexdigest()
    with pytest.raises(NnperfError) as info:
        prepare("cifar10", tmp_path / "out", source=str(partial), md5=md5)
    assert str(info.value).startswith(f"{partial}: md5 {actual} does not match the expected {md5}")
    assert listing(tmp_path) == ["partial.tar.gz", "src"]


def test_truncated_archive_with_matching_md5_fails_to_extract(tmp_path):
    archive, _, _, _ = build_cifar10_archive(tmp_path / "src")
    truncated = tmp_path / "truncated.tar.gz"
    truncated.write_bytes(archive.read_bytes()[:-200])
    md5 = hashlib.md5(truncated.read_bytes()).hexdigest()
    with pytest.raises(NnperfError) as info:
        prepare("cifar10", tmp_path / "out", source=truncated.as_uri(), md5=md5)
    message = str(info.value)
    assert message.startswith(
        f"{truncated.as_uri()}: not a complete tar archive, cannot extract it ("
    )
    assert "\n" not in message
    assert listing(tmp_path) == ["src", "truncated.tar.gz"]


def test_archive_of_the_other_dataset_is_refused(tmp_path):
    archive, md5, _, _ = build_cifar100_archive(tmp_path / "src")
    with pytest.raises(NnperfError) as info:
        prepare("cifar10", tmp_path / "out", source=str(archive), md5=md5)
    assert str(info.value) == (
        f"{archive}: archive has no cifar-10-batches-py/ folder (found: cifar-100-python); "
        "expected the CIFAR python version, like "
        "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
    )
    assert listing(tmp_path) == ["src"]


def test_archive_missing_a_batch_is_refused(tmp_path):
    archive, md5, _, _ = build_cifar10_archive(tmp_path / "src", skip=("data_batch_3",))
    with pytest.raises(NnperfError) as info:
        prepare("cifar10", tmp_path / "out", source=str(archive), md5=md5)
    assert str(info.value) == (
        f"{archive} (cifar-10-batches-py/): incomplete cifar10 dataset, a batch or meta "
        "file is missing"
    )
    assert listing(tmp_path) == ["src"]


def test_damaged_batch_on_disk_is_reported_by_load_split(tmp_path):
    root = tmp_path / "synthetic"
    prepare("synthetic", root, synthetic=SyntheticData(10, 5, 0))
    batch = root / "cifar-10-batches-py" / "test_batch"
    batch.write_bytes(batch.read_bytes()[:100])
    with pytest.raises(NnperfError) as info:
        data.load_split(root, "synthetic", "test")
    message = str(info.value)
    assert message.startswith(f"{root / 'cifar-10-batches-py'}: cannot read the test split (")
    assert message.endswith("); prepare it again") and "\n" not in message


def test_existing_dataset_survives_a_failed_reprepare(tmp_path):
    archive, md5, train, _ = build_cifar10_archive(tmp_path / "src")
    root = tmp_path / "data" / "cifar10"
    prepare("cifar10", root, source=str(archive), md5=md5)
    before = {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}

    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(archive.read_bytes()[:-200])
    for source, checksum in ((str(archive), "f" * 32), (str(broken), None)):
        with pytest.raises(NnperfError):
            prepare("cifar10", root, source=source, md5=checksum)

    after = {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert after == before
    assert listing(root.parent) == ["cifar10"]
    images, labels = data.load_split(root, "cifar10", "train")
    np.testing.assert_array_equal(images, train[0])
    np.testing.assert_array_equal(labels, train[1])


def test_successful_reprepare_replaces_the_dataset(tmp_path):
    root = tmp_path / "data" / "synthetic"
    prepare("synthetic", root, synthetic=SyntheticData(20, 10, seed=0))
    first, _ = data.load_split(root, "synthetic", "train")
    prepare("synthetic", root, synthetic=SyntheticData(30, 10, seed=1))
    second, _ = data.load_split(root, "synthetic", "train")
    assert len(first) == 20 and len(second) == 30
    assert read_json(root / "manifest.json")["synthetic"] == {
        "train_images": 30, "test_images": 10, "seed": 1,
    }  # fmt: skip
    assert listing(root.parent) == ["synthetic"]


# --------------------------------------------------------------------------------------
# Synthetic data
# --------------------------------------------------------------------------------------


def batch_bytes(root: Path) -> dict[str, bytes]:
    folder = root / "cifar-10-batches-py"
    return {name: (folder / name).read_bytes() for name in listing(folder)}


def test_synthetic_is_deterministic_per_seed(tmp_path):
    small = dict(train_images=23, test_images=7)
    prepare("synthetic", tmp_path / "a", synthetic=SyntheticData(**small, seed=5))
    prepare("synthetic", tmp_path / "b", synthetic=SyntheticData(**small, seed=5))
    prepare("synthetic", tmp_path / "c", synthetic=SyntheticData(**small, seed=6))
    a, b, c = (batch_bytes(tmp_path / x) for x in "abc")
    assert list(a) == [
        "batches.meta", "data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4",
        "data_batch_5", "test_batch",
    ]  # fmt: skip
    assert a == b
    assert all(a[name] != c[name] for name in a if name != "batches.meta")


def test_synthetic_shapes_labels_and_manifest(tmp_path):
    root = tmp_path / "synthetic"
    manifest = prepare("synthetic", root, synthetic=SyntheticData(53, 21, 3))
    for split, count in (("train", 53), ("test", 21)):
        images, labels = data.load_split(root, "synthetic", split)
        assert images.shape == (count, 32, 32, 3) and images.dtype == np.uint8
        assert labels.shape == (count,) and labels.dtype == np.int64
        assert labels.min() >= 0 and labels.max() <= 9
        counts = np.bincount(labels, minlength=10)
        assert counts.max() - counts.min() <= 1  # balanced
    assert manifest["source"] == "synthetic" and manifest["md5"] is None
    assert manifest["synthetic"] == {"train_images": 53, "test_images": 21, "seed": 3}
    assert manifest["images"] == {"train": 53, "test": 21}
    assert manifest["class_names"] == [f"pattern_{k}" for k in range(10)]
    # Training images are spread over the five batches like the original 10000 x 5.
    per_batch = [
        len(pickle.loads((root / "cifar-10-batches-py" / f"data_batch_{n}").read_bytes(), encoding="latin1")["labels"])
        for n in range(1, 6)
    ]  # fmt: skip
    assert per_batch == [11, 11, 11, 10, 10]


def test_synthetic_test_split_does_not_depend_on_the_train_size():
    small = data.synthetic_split(SyntheticData(10, 12, 4), "test")
    large = data.synthetic_split(SyntheticData(5000, 12, 4), "test")
    np.testing.assert_array_equal(small[0], large[0])
    np.testing.assert_array_equal(small[1], large[1])


@settings(max_examples=25, deadline=None)
@given(
    train_images=st.integers(1, 40),
    test_images=st.integers(1, 40),
    seed=st.integers(0, 2**32 - 1),
)
def test_synthetic_split_properties(train_images, test_images, seed):
    config = SyntheticData(train_images, test_images, seed)
    for split, count in (("train", train_images), ("test", test_images)):
        images, labels = data.synthetic_split(config, split)
        assert images.shape == (count, 32, 32, 3) and images.dtype == np.uint8
        assert labels.dtype == np.int64 and set(labels.tolist()) <= set(range(10))
        counts = np.bincount(labels, minlength=10)
        assert counts.max() - counts.min() <= 1
        again = data.synthetic_split(config, split)
        assert np.array_equal(images, again[0]) and np.array_equal(labels, again[1])


def official_snippet_read(path: Path):
    """Read a batch as the dataset page shows (encoding='bytes', b'data', b'labels')."""
    with open(path, "rb") as handle:
        batch = pickle.load(handle, encoding="bytes")
    images = batch[b"data"].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return images, np.array(batch[b"labels"], dtype=np.int64)


def test_synthetic_reads_identically_with_torchvision_the_official_snippet_and_the_generator(
    tmp_path,
):
    from torchvision.datasets import CIFAR10

    class TorchvisionCIFAR10(CIFAR10):
        # torchvision pins the official files' MD5s; synthetic files are other bytes.
        train_list = [[name, None] for name, _ in CIFAR10.train_list]
        test_list = [[name, None] for name, _ in CIFAR10.test_list]
        meta = {**CIFAR10.meta, "md5": None}

    config = SyntheticData(train_images=17, test_images=6, seed=11)
    root = tmp_path / "synthetic"
    prepare("synthetic", root, synthetic=config)
    folder = root / "cifar-10-batches-py"
    for split in ("train", "test"):
        images, labels = data.load_split(root, "synthetic", split)
        reference = TorchvisionCIFAR10(root=root, train=split == "train")
        np.testing.assert_array_equal(images, reference.data)
        np.testing.assert_array_equal(labels, np.array(reference.targets))
        names = [f"data_batch_{n}" for n in range(1, 6)] if split == "train" else ["test_batch"]
        snippet = [official_snippet_read(folder / name) for name in names]
        np.testing.assert_array_equal(images, np.concatenate([s[0] for s in snippet]))
        np.testing.assert_array_equal(labels, np.concatenate([s[1] for s in snippet]))
        generated = data.synthetic_split(config, split)
        np.testing.assert_array_equal(images, generated[0])
        np.testing.assert_array_equal(labels, generated[1])
    assert reference.classes == [f"pattern_{k}" for k in range(10)]


def test_synthetic_is_learnable_a_real_training_loss_goes_down():
    """A tiny CNN, trained for real on CPU, lowers its loss and generalises to the test split."""
    import torch

    spec = data.DATASETS["synthetic"]
    config = SyntheticData(train_images=400, test_images=200, seed=0)

    def tensors(split):
        images, labels = data.synthetic_split(config, split)
        x = torch.from_numpy(images).permute(0, 3, 1, 2).float().div(255)
        mean, std = torch.tensor(spec.mean).view(1, 3, 1, 1), torch.tensor(spec.std).view(
            1, 3, 1, 1
        )
        return (x - mean) / std, torch.from_numpy(labels)

    (x, y), (x_test, y_test) = tensors("train"), tensors("test")
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 5, stride=2), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(4), torch.nn.Flatten(), torch.nn.Linear(128, 10),
    )  # fmt: skip
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[0] > 2.0  # chance level is ln(10) = 2.30
    assert losses[-1] < 0.5 * losses[0]
    with torch.no_grad():
        accuracy = (model(x_test).argmax(dim=1) == y_test).float().mean().item()
    assert accuracy > 0.8  # chance is 0.1: the labels follow the images, not memorised noise


# --------------------------------------------------------------------------------------
# The pickle writer: the genuine (Python 2) format
# --------------------------------------------------------------------------------------


def test_pickles_have_python2_string_keys_like_the_genuine_files(tmp_path):
    root = tmp_path / "synthetic"
    prepare("synthetic", root, synthetic=SyntheticData(5, 5, 0))
    raw = (root / "cifar-10-batches-py" / "data_batch_1").read_bytes()
    opcodes = [(op.name, arg) for op, arg, _ in pickletools.genops(raw)]
    assert opcodes[0] == ("PROTO", 2)
    strings = {arg for name, arg in opcodes if name in ("SHORT_BINSTRING", "BINSTRING")}
    assert {"batch_label", "labels", "data", "filenames"} <= strings
    assert not any(
        name in ("BINUNICODE", "SHORT_BINUNICODE") and arg == "data" for name, arg in opcodes
    )
    as_bytes = pickle.loads(raw, encoding="bytes")
    as_latin1 = pickle.loads(raw, encoding="latin1")
    assert set(as_bytes) == {b"batch_label", b"labels", b"data", b"filenames"}
    assert set(as_latin1) == {"batch_label", "labels", "data", "filenames"}
    assert as_bytes[b"data"].dtype == np.uint8 and as_bytes[b"data"].shape == (1, 3072)
    meta = pickle.loads(
        (root / "cifar-10-batches-py" / "batches.meta").read_bytes(), encoding="bytes"
    )
    assert meta[b"label_names"][0] == b"pattern_0" and meta[b"num_vis"] == 3072


latin1_text = st.text(alphabet=st.characters(max_codepoint=255), max_size=300)


@settings(max_examples=40, deadline=None)
@given(
    rows=hnp.arrays(np.uint8, st.tuples(st.integers(0, 4), st.just(3072))),
    labels=st.lists(st.integers(0, 2**31 - 1), max_size=5),
    names=st.lists(latin1_text, max_size=4),
)
def test_py2_pickle_round_trips(tmp_path_factory, rows, labels, names):
    path = tmp_path_factory.mktemp("pickle") / "batch"
    cifar_pickle.write_py2_pickle(path, {"data": rows, "labels": labels, "filenames": names})
    latin1 = pickle.loads(path.read_bytes(), encoding="latin1")
    assert latin1["labels"] == labels and latin1["filenames"] == names
    np.testing.assert_array_equal(latin1["data"], rows)
    assert latin1["data"].dtype == np.uint8
    as_bytes = pickle.loads(path.read_bytes(), encoding="bytes")
    assert as_bytes[b"filenames"] == [name.encode("latin-1") for name in names]
    np.testing.assert_array_equal(as_bytes[b"data"], rows)


# --------------------------------------------------------------------------------------
# The request rule prepare_dataset hands over (plain data, as Snakemake params carry it)
# --------------------------------------------------------------------------------------


def test_request_from_plain_data_prepares_synthetic_end_to_end(tmp_path):
    out = tmp_path / "resources" / "data" / "synthetic"
    plain = {
        "root": str(out),
        "dataset": {"name": "synthetic", "synthetic": {"train_images": 12, "test_images": 4, "seed": 9}},
    }  # fmt: skip
    manifest = data.prepare(from_dict(DatasetRequest, plain))
    assert data.summary(manifest) == "synthetic: 12 train and 4 test images (generated with seed 9)"
    assert read_json(out / "manifest.json")["synthetic"] == {
        "train_images": 12,
        "test_images": 4,
        "seed": 9,
    }
    images, _ = data.load_split(out, "synthetic", "train")
    np.testing.assert_array_equal(images, data.synthetic_split(SyntheticData(12, 4, 9), "train")[0])


def test_request_defaults_are_the_contract_defaults(tmp_path):
    """A request naming only the root prepares the schema's default dataset."""
    manifest = data.prepare(from_dict(DatasetRequest, {"root": str(tmp_path / "d")}))
    defaults = SyntheticData()
    assert manifest["dataset"] == DatasetSettings().name == "synthetic"
    assert manifest["images"] == {"train": defaults.train_images, "test": defaults.test_images}
    assert manifest["synthetic"]["seed"] == defaults.seed


def test_cifar100_from_a_path_with_an_upper_case_md5(tmp_path):
    archive, md5, _, test = build_cifar100_archive(tmp_path / "src")
    out = tmp_path / "cifar100"
    manifest = prepare("cifar100", out, source=str(archive), md5=md5.upper())
    assert data.summary(manifest) == f"cifar100: 6 train and 4 test images (md5 {md5} verified)"
    np.testing.assert_array_equal(data.load_split(out, "cifar100", "test")[1], test[1])
