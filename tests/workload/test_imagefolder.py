"""The user's ImageFolder: listing and its bad inputs, the manifest and its hash, the
DataLoader that decodes on its workers, the decoded-once device-resident path and its
memory check, training and the operator profile on it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from imagefolder_data import CLASSES, make_imagefolder
from nnperf.core import contract, layout
from nnperf.core import config as study_config
from nnperf.core.errors import NnperfError
from nnperf.core.keys import RunKey
from nnperf.core.variant import parse_variant_settings
from nnperf.engine import feeders
from nnperf.study import job_requests
from nnperf.workload import datasets, image_decoding, imagefolder

CPU = torch.device("cpu")


@pytest.fixture
def folder(tmp_path):
    return make_imagefolder(tmp_path / "pets")


def prepare(folder: Path, out: Path, **settings) -> dict:
    dataset = contract.DatasetSettings(name="imagefolder", path=os.fspath(folder), **settings)
    root = out / "resources/data" / dataset.key
    return datasets.prepare(contract.DatasetRequest(root=os.fspath(root), dataset=dataset))


# --- settings and the key in results paths ------------------------------------------------


def test_key_is_the_folder_name_or_the_label():
    settings = contract.DatasetSettings(name="imagefolder", path="data/imagenet-mini/")
    assert settings.key == "imagenet-mini" and settings.side == 224
    assert contract.DatasetSettings(name="imagefolder", path="x", label="mini_2").key == "mini_2"
    assert (
        layout.parse("run", f"results/runs/imagenet-mini/cpu/m/fp32/bs8/baseline.json")["dataset"]
        == "imagenet-mini"
    )


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"path": "data/my images"}, "the folder name of dataset.path 'my images' cannot name"),
        ({"path": "x", "label": "a/b"}, "dataset.label 'a/b' cannot name results"),
        ({"path": "data/cifar10"}, "'cifar10' is the name of a built-in dataset"),
        ({}, "dataset.path is missing"),
        ({"path": "x", "source": "y"}, "dataset.source is for cifar10 and cifar100"),
    ],
)
def test_bad_settings_are_one_line(settings, message):
    with pytest.raises(NnperfError, match=message.replace("(", r"\(")):
        contract.DatasetSettings(name="imagefolder", **settings)


def test_imagefolder_keys_are_refused_for_other_datasets():
    with pytest.raises(NnperfError, match="dataset.path is for dataset.name imagefolder"):
        contract.DatasetSettings(name="cifar10", path="x")


def test_schema_takes_the_imagefolder_keys(folder):
    validated = study_config.validate(
        {"dataset": {"name": "imagefolder", "path": os.fspath(folder), "image_size": 32}}
    )
    study = contract.from_dict(contract.StudyConfig, validated)
    assert study.dataset.key == "pets" and study.dataset.side == 32
    with pytest.raises(NnperfError, match="dataset.label"):
        study_config.validate({"dataset": {"name": "imagefolder", "path": "x", "label": "a b"}})


# --- listing: the checks made while the DAG is built ---------------------------------------


def test_scan_lists_classes_and_images_like_torchvision(folder):
    from torchvision.datasets import ImageFolder

    found = imagefolder.scan(folder)
    assert found.classes == CLASSES and found.num_classes == 3
    assert found.count("train") == 24 and found.count("val") == 6
    reference = ImageFolder(os.fspath(folder / "train"))
    assert [(Path(p).relative_to(folder).as_posix(), c) for p, c in reference.samples] == list(
        found.samples["train"]
    )


def test_scan_errors_are_one_line_each(tmp_path, folder):
    with pytest.raises(NnperfError, match="no such folder"):
        imagefolder.scan(tmp_path / "nowhere")
    odd = tmp_path / "odd"
    (odd / "training").mkdir(parents=True)
    (odd / "README.txt").write_text("x")
    with pytest.raises(NnperfError, match=r"has no train/ folder \(found: README.txt, training\)"):
        imagefolder.scan(odd)
    empty = tmp_path / "empty"
    (empty / "train" / "cat").mkdir(parents=True)
    (empty / "train" / "cat" / "notes.txt").write_text("x")
    with pytest.raises(NnperfError, match=r"train/ holds no image \(1 class folders, none"):
        imagefolder.scan(empty)
    (folder / "val" / "owl").mkdir()
    with pytest.raises(NnperfError, match="val/owl/ is a class train/ does not have"):
        imagefolder.scan(folder)


def test_fingerprint_follows_a_changed_image(folder):
    before = imagefolder.scan(folder).fingerprint
    target = folder / "train/cat/cat_000.jpg"
    stat = target.stat()
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert imagefolder.scan(folder).fingerprint != before


# --- the data stage: manifest and content hash ---------------------------------------------


def test_manifest_counts_and_hash(tmp_path, folder):
    document = prepare(folder, tmp_path, image_size=32)
    written = json.loads((tmp_path / "resources/data/pets/manifest.json").read_text())
    assert written == {"schema_version": 1, **document}
    assert document["dataset"] == "pets" and document["num_classes"] == 3
    assert document["images"] == {"train": 24, "val": 6}
    assert document["images_per_class"]["train"] == {"cat": 8, "dog": 8, "fox": 8}
    assert document["formats"] == {"JPEG": 24, "PNG": 6}  # i % 3 == 2 of 8 per class
    assert document["mean"] == list(imagefolder.IMAGENET_MEAN)
    assert len(os.listdir(tmp_path / "resources/data/pets")) == 1  # the images stay put
    # The hash is over bytes: the same bytes with a new mtime hash the same; one changed
    # byte does not.
    target = folder / "train/dog/dog_001.jpg"
    os.utime(target, ns=(1, 1))
    assert prepare(folder, tmp_path)["sha256"] == document["sha256"]
    data = bytearray(target.read_bytes())
    data[-3] ^= 0x01  # inside the entropy-coded data, before the end marker
    target.write_bytes(bytes(data))
    assert prepare(folder, tmp_path)["sha256"] != document["sha256"]


def test_corrupt_image_names_the_first_file_and_leaves_nothing(tmp_path, folder):
    for name in ("dog/dog_004.jpg", "fox/fox_000.jpg"):
        path = folder / "train" / name
        path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    with pytest.raises(NnperfError) as error:
        prepare(folder, tmp_path)
    assert str(error.value).startswith(f"{folder / 'train/dog/dog_004.jpg'}: unreadable image")
    assert "\n" not in str(error.value)
    assert not (tmp_path / "resources/data/pets").exists()


def test_source_folder_for_cifar_is_not_an_archive(tmp_path, folder):
    settings = contract.DatasetSettings(name="cifar10", source=os.fspath(folder))
    request = contract.DatasetRequest(root=os.fspath(tmp_path / "c10"), dataset=settings)
    with pytest.raises(NnperfError, match="is a folder, not an archive"):
        datasets.prepare(request)


def test_jobs_refuse_a_folder_changed_since_it_was_prepared(tmp_path, folder):
    prepare(folder, tmp_path)
    root = tmp_path / "resources/data/pets"
    assert len(imagefolder.open_split(root, "train", 32)) == 24
    (folder / "train/cat/cat_000.jpg").unlink()
    with pytest.raises(NnperfError, match="changed since it was prepared"):
        imagefolder.open_split(root, "train", 32)


# --- requests: the key, the decode size and the classes reach the jobs ----------------------


def test_requests_carry_image_size_classes_and_fingerprint(folder):
    validated = study_config.validate(
        {"dataset": {"name": "imagefolder", "path": os.fspath(folder), "image_size": 48}}
    )
    study = contract.from_dict(contract.StudyConfig, validated)
    key = RunKey("cpu", "resnet18_cifar", "fp32", 8, "baseline")
    run = job_requests.run_request(study, key, "pets")
    assert (run.image_size, run.input_size, run.root) == (48, 48, "resources/data/pets")
    complexity = job_requests.complexity_request(study, "resnet18_cifar", "pets")
    assert (complexity.num_classes, complexity.input_size) == (3, 48)
    data = job_requests.dataset_request(study, "pets")
    assert data.fingerprint == imagefolder.scan(folder).fingerprint
    with pytest.raises(NnperfError, match="neither a built-in dataset nor this study's"):
        job_requests.run_request(study, key, "other")


# --- the data paths ------------------------------------------------------------------------


@pytest.fixture
def split(tmp_path, folder):
    prepare(folder, tmp_path)
    return imagefolder.open_split(tmp_path / "resources/data/pets", "train", 32)


def test_dataloader_decodes_and_augments_on_two_workers(split, monkeypatch):
    settings = parse_variant_settings({"num_workers": 2})
    feeder = feeders.make_feeder(
        split, np.asarray(split.labels), 6, settings, True, seed=0, device=CPU
    )
    # The decoding runs in the workers: this process's loader is never called.
    calls = []
    monkeypatch.setattr(image_decoding, "_load_rgb", lambda path: calls.append(path))
    images, labels = feeder.next_batch()
    assert images.shape == (6, 3, 32, 32) and images.dtype == torch.uint8
    assert labels.dtype == torch.int64 and set(labels.tolist()) <= {0, 1, 2}
    assert calls == []
    again = [feeder.next_batch()[0] for _ in range(3)]
    assert all(batch.shape == (6, 3, 32, 32) for batch in again)


def test_train_crops_are_random_and_eval_crops_are_fixed(split):
    train = image_decoding.ImageFiles(split, augment=True)
    evaluation = image_decoding.ImageFiles(split, augment=False)
    torch.manual_seed(0)
    crops = [train[3][0] for _ in range(4)]
    assert any(not torch.equal(crops[0], other) for other in crops[1:])
    assert torch.equal(evaluation[3][0], evaluation[3][0])
    assert evaluation[3][0].shape == (3, 32, 32)


def test_device_resident_decodes_once_eval_style(split, monkeypatch):
    decoded = []
    real = image_decoding.decode_all
    monkeypatch.setattr(
        image_decoding, "decode_all", lambda s, threads=None: decoded.append(1) or real(s)
    )
    settings = parse_variant_settings({"data_path": "device_resident"})
    feeder = feeders.make_feeder(split, np.asarray(split.labels), 8, settings, False, 0, CPU)
    assert decoded == [1] and feeder.images.shape == (24, 3, 32, 32)
    evaluation = image_decoding.ImageFiles(split, augment=False)
    assert torch.equal(feeder.images[5], evaluation[5][0])
    for _ in range(5):  # three epochs' worth: nothing is decoded again
        images, _ = feeder.next_batch()
    assert decoded == [1] and images.dtype == torch.uint8


def test_device_resident_that_does_not_fit_names_the_bytes(split, monkeypatch):
    monkeypatch.setattr(
        image_decoding, "available_bytes", lambda device: (1000, "50% of available host memory")
    )
    settings = parse_variant_settings({"data_path": "device_resident"})
    with pytest.raises(NnperfError) as error:
        feeders.make_feeder(split, np.asarray(split.labels), 8, settings, False, 0, CPU)
    assert str(error.value) == (
        "the device_resident data path needs 73,728 bytes for 24 images decoded at 32x32, "
        "more than the 1,000 bytes 50% of available host memory; use data_path dataloader or "
        "a smaller dataset.image_size"
    )
    assert image_decoding.resident_bytes(split) == 24 * 3 * 32 * 32


# --- the stages that read the data: timed step, training, operator profile ------------------


def _run_request(tmp_path, variant=None, model="resnet18_cifar"):
    return contract.RunRequest(
        device="cpu",
        model=model,
        precision="fp32",
        batch_size=4,
        settings=parse_variant_settings(variant or {}),
        dataset="pets",
        data_root=os.fspath(tmp_path / "resources/data/pets"),
        training=contract.TrainingSettings(warmup_steps=1, timed_steps=1),
        image_size=32,
        input_size=32,
    )


def test_run_data_has_the_folders_classes_and_steps(tmp_path, folder):
    from nnperf.engine.build import build, load_run_data

    prepare(folder, tmp_path)
    request = _run_request(tmp_path, {"num_workers": 2})
    data, factory = load_run_data(request)
    assert data.num_classes == 3 and data.input_size == 32
    assert data.mean == imagefolder.IMAGENET_MEAN
    training = build(request, factory, data, seed=0)
    assert training.model(torch.zeros(2, 3, 32, 32)).shape == (2, 3)
    assert torch.isfinite(training.step())


def test_one_training_epoch_on_the_folder(tmp_path, folder):
    import pandas as pd

    from nnperf.training.to_accuracy import train_to_files

    prepare(folder, tmp_path)
    request = contract.TrainingRunRequest(
        device="cpu",
        model="resnet18_cifar",
        precision="fp32",
        batch_size=8,
        settings=parse_variant_settings({"num_workers": 2}),
        convergence=contract.ConvergenceSettings(
            epochs=1, warmup_epochs=0, target_accuracy=None, checkpoint_every=0
        ),
        dataset="pets",
        data_root=os.fspath(tmp_path / "resources/data/pets"),
        image_size=32,
        input_size=32,
    )
    summary = train_to_files(
        request, tmp_path / "run.json", tmp_path / "epochs.csv", None, resume=False
    )
    epochs = pd.read_csv(tmp_path / "epochs.csv")
    assert epochs["epoch"].max() == 1 and epochs["test_top1"].between(0, 1).all()
    assert summary["num_classes"] == 3 and summary["test_images"] == 6


def test_operator_profile_on_the_folder(tmp_path, folder):
    from nnperf.torchprof.profile import operator_profile_to_files

    prepare(folder, tmp_path)
    request = contract.OperatorProfileRequest(
        run=_run_request(tmp_path, {"data_path": "device_resident"}),
        settings=contract.OperatorProfileSettings(warmup_steps=1, steps=1, max_seconds=30),
    )
    out = {
        f"out_{name}": tmp_path / f"profile_{name}"
        for name in ("json", "trace", "operators", "layers", "steps", "memory")
    }
    document = operator_profile_to_files(request, **out)
    assert document["status"] == "ok"


def test_a_moved_folder_is_copied_not_shared(tmp_path, folder):
    """The key names the folder; the same images under another name are another dataset."""
    copy = tmp_path / "pets_copy"
    shutil.copytree(folder, copy)
    assert prepare(copy, tmp_path)["dataset"] == "pets_copy"
    assert prepare(folder, tmp_path)["sha256"] != ""
