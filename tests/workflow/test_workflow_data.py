"""The prepare_dataset and complexity rules in a real Snakemake run of the tiny config."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import TINY_CONFIG, run_snakemake

pytestmark = pytest.mark.workflow

TARGETS = ("resources/data/synthetic", "results/complexity/synthetic/resnet18_cifar.json")


def test_dataset_and_complexity_rules_get_the_study_s_settings(workdir):
    plain_sgd = ("--config", 'training={"optimizer": "sgd", "momentum": 0.0}')
    result = run_snakemake(workdir, *TARGETS, "--configfile", str(TINY_CONFIG), *plain_sgd)
    assert result.returncode == 0, result.stderr

    # dataset.synthetic of the tiny config reached the generator.
    manifest = json.loads((workdir / "resources/data/synthetic/manifest.json").read_text())
    assert manifest["dataset"] == "synthetic"
    assert manifest["images"] == {"train": 256, "test": 64}
    assert manifest["synthetic"] == {"train_images": 256, "test_images": 64, "seed": 0}
    assert (workdir / "logs/data/synthetic.log").read_text() == (
        "synthetic: 256 train and 64 test images (generated with seed 0)\n"
    )

    # training.momentum 0: plain SGD keeps no state, and the document says what it assumed.
    document = json.loads((workdir / "results/complexity/synthetic/resnet18_cifar.json").read_text())
    assert document["model"] == "resnet18_cifar" and document["dataset"] == "synthetic"
    assert document["training"] == {"optimizer": "sgd", "momentum": 0.0}
    assert document["optimizer_state_bytes"] == 0
    layers = pd.read_csv(workdir / "results/complexity/synthetic/resnet18_cifar_layers.csv")
    assert layers["params"].sum() == document["params"]
    log = (workdir / "logs/complexity/synthetic/resnet18_cifar.log").read_text()
    assert log.startswith("resnet18_cifar: ") and "sgd state 0.0 MiB" in log

    # The request travels as params: a changed optimiser setting re-runs the count only.
    again = run_snakemake(workdir, *TARGETS, "--configfile", str(TINY_CONFIG), "-n")
    assert again.returncode == 0, again.stderr
    assert "rule complexity:" in again.stdout and "Params have changed" in again.stdout
    assert "prepare_dataset:" not in again.stdout
