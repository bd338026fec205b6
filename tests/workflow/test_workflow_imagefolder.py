"""A real Snakemake run on a generated ImageFolder: every stage on JPEGs and PNGs decoded
per step on DataLoader workers (baseline) or once on the device (decoded_once), and a
changed image that makes Snakemake want to measure again."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from conftest import REPO, TINY_CONFIG, run_snakemake
from imagefolder_data import make_imagefolder
from PIL import Image

pytestmark = pytest.mark.workflow

IMAGEFOLDER_CONFIG = REPO / "tests" / "configs" / "imagefolder.yaml"
CONFIGS = ("--configfile", str(TINY_CONFIG), str(IMAGEFOLDER_CONFIG))
RUNS = "results/runs/pets/cpu/resnet18_cifar/fp32/bs4"


def test_a_study_of_an_imagefolder_runs_every_stage(workdir):
    make_imagefolder(workdir / "pets")
    result = run_snakemake(workdir, *CONFIGS)
    assert result.returncode == 0, result.stderr[-4000:]

    manifest = json.loads((workdir / "resources/data/pets/manifest.json").read_text())
    assert manifest["images"] == {"train": 24, "val": 6} and manifest["num_classes"] == 3

    summary = pd.read_csv(workdir / "results/tables/pets/summary.csv")
    assert sorted(summary["variant"]) == ["baseline", "decoded_once"]
    assert (summary["status"] == "ok").all() and (summary["dataset"] == "pets").all()
    for variant, data_path in (("baseline", "dataloader"), ("decoded_once", "device_resident")):
        run = json.loads((workdir / f"{RUNS}/{variant}.json").read_text())
        assert run["variant_settings"]["data_path"] == data_path
        assert (run["num_classes"], run["input_size"], run["image_size"]) == (3, 32, 32)
        profile = json.loads(
            (
                workdir / f"results/opprofiles/pets/cpu/resnet18_cifar/fp32/bs4/{variant}.json"
            ).read_text()
        )
        assert profile["status"] == "ok"

    complexity = json.loads((workdir / "results/complexity/pets/resnet18_cifar.json").read_text())
    assert complexity["num_classes"] == 3 and complexity["input_shape"] == [3, 32, 32]

    training = "results/training/pets/cpu/resnet18_cifar/fp32/bs4/baseline/default"
    epochs = pd.read_csv(workdir / f"{training}_epochs.csv")
    assert epochs["epoch"].max() == 1 and epochs["images_seen"].max() == 24
    assert "pets" in (workdir / "reports/pets/summary.html").read_text()

    # One image changed: the data stage runs again (its listing changed), and so does every
    # job that reads the images; the model's count does not depend on them.
    Image.fromarray(np.full((30, 40, 3), 200, np.uint8)).save(
        workdir / "pets/train/dog/dog_001.jpg"
    )
    again = run_snakemake(workdir, *CONFIGS, "-n")
    assert again.returncode == 0, again.stderr[-4000:]
    for rule in ("prepare_dataset", "timed_group", "operator_profile", "train_to_accuracy"):
        assert f"rule {rule}:" in again.stdout
    assert "rule complexity:" not in again.stdout


def _broken(kind: str, folder):
    """A folder with one thing wrong, and the line Snakemake must stop with."""
    if kind == "missing":
        return "dataset.path pets: no such folder"
    if kind == "no_train":
        (folder / "training" / "cat").mkdir(parents=True)
        return "dataset.path pets: has no train/ folder (found: training)"
    (folder / "train" / "cat").mkdir(parents=True)
    (folder / "train" / "cat" / "cat.gif").write_bytes(b"GIF89a")
    return "dataset.path pets: train/ holds no image (1 class folders, none holding a .jpg"


@pytest.mark.parametrize("kind", ["missing", "no_train", "no_images"])
def test_a_folder_that_is_no_imagefolder_stops_the_dag(workdir, kind):
    line = _broken(kind, workdir / "pets")
    result = run_snakemake(workdir, *CONFIGS, "-n")
    assert result.returncode != 0
    assert f"nnperf: {line}" in result.stderr
    assert "Traceback" not in result.stderr and "rule " not in result.stdout


def test_an_unreadable_image_fails_the_data_stage_naming_it(workdir):
    folder = make_imagefolder(workdir / "pets", train_per_class=2, val_per_class=1)
    broken = folder / "train/dog/dog_001.jpg"
    broken.write_bytes(broken.read_bytes()[:200])
    result = run_snakemake(workdir, "resources/data/pets", *CONFIGS)
    assert result.returncode != 0
    log = (workdir / "logs/data/pets.log").read_text()
    assert f"{broken}: unreadable image (" in log
    assert f"{broken}: unreadable image" in result.stderr
    assert not (workdir / "resources/data/pets").exists()


def test_a_folder_as_cifar_source_is_not_an_archive(workdir):
    make_imagefolder(workdir / "pets", train_per_class=1, val_per_class=1)
    result = run_snakemake(
        workdir,
        "resources/data/cifar10",
        "--configfile",
        str(TINY_CONFIG),
        "--config",
        "dataset={name: cifar10, source: pets}",
    )
    assert result.returncode != 0
    assert (
        "dataset.source pets: is a folder, not an archive"
        in (workdir / "logs/data/cifar10.log").read_text()
    )
