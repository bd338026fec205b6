"""A real Snakemake run of models from outside nnperf's registry on a generated ImageFolder
(tests/configs/own_models.yaml on the tiny study): a torchvision classifier, a user's factory
file and a timm model, each timed, counted, profiled, trained for an epoch and in the report;
and editing the factory file makes Snakemake want to re-measure its model, and only it."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from nnperf.core import layout

from conftest import REPO, TINY_CONFIG, run_snakemake
from imagefolder_data import make_imagefolder

OWN_MODELS = REPO / "tests" / "configs" / "own_models.yaml"
MYNET = """\
from torch import nn


def build(num_classes):
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, num_classes),
    )
"""
MODELS = {"mobilenet_v3_small": "torchvision", "mynet": "factory", "timm_resnet10t": "timm"}

pytestmark = pytest.mark.workflow


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("own_models")
    shutil.copytree(REPO / "config", workdir / "config")
    (workdir / "models").mkdir()
    (workdir / "models" / "mynet.py").write_text(MYNET)
    make_imagefolder(workdir / "pets")
    args = ("--configfile", str(TINY_CONFIG), str(OWN_MODELS))
    result = run_snakemake(workdir, *args, timeout=1500)
    assert result.returncode == 0, result.stderr[-4000:]
    return workdir, args


def test_every_model_is_measured_counted_profiled_trained_and_reported(study):
    workdir, _ = study
    summary = pd.read_csv(workdir / "results/tables/pets/summary.csv")
    assert sorted(summary["model"]) == sorted(MODELS)
    assert set(summary["status"]) == {"ok"}
    for model, kind in MODELS.items():
        path = workdir / layout.path("complexity", dataset="pets", model=model)
        document = json.loads(path.read_text())
        assert document["model_kind"] == kind
        assert document["input_shape"] == [3, 32, 32]
        assert document["train_step_flops_per_image"] > document["forward_flops_per_image"] > 0
        assert document["flop_coverage"]["uncounted_calls"] == 0
        keys = dict(device="cpu", model=model, precision="fp32", batch_size=4, variant="baseline")
        profile = json.loads((workdir / layout.path("opprofile", dataset="pets", **keys)).read_text())
        assert profile["model"] == model
        run = json.loads((workdir / layout.path("run", dataset="pets", **keys)).read_text())
        assert (run["num_classes"], run["input_size"]) == (3, 32)
    training = pd.read_csv(workdir / "results/tables/pets/training.csv")
    assert sorted(training["model"]) == sorted(MODELS)
    assert (training["epochs_run"] >= 1).all()
    report = (workdir / layout.path("summary_md", dataset="pets")).read_text()
    for model in MODELS:
        assert model in report
    points = pd.read_csv(workdir / "results/tables/pets/roofline_points.csv")
    assert set(MODELS) <= set(points["model"])


def test_editing_the_factory_file_re_measures_its_model_only(study):
    workdir, args = study
    factory = workdir / "models" / "mynet.py"
    factory.write_text(MYNET.replace("16", "24"))
    result = run_snakemake(workdir, "-n", *args)
    assert result.returncode == 0, result.stderr[-4000:]
    # Each planned job: its rule and its wildcards line.
    jobs, rule = [], None
    for line in (result.stdout + result.stderr).splitlines():
        if line.startswith(("rule ", "localrule ")):
            rule = line.split()[1].rstrip(":")
        elif rule and line.strip().startswith("wildcards:"):
            jobs.append((rule, line.strip()))
    builders = ("complexity", "timed_group", "operator_profile", "train_to_accuracy")
    rebuilt = {rule: wildcards for rule, wildcards in jobs if rule in builders}
    assert set(rebuilt) == set(builders), jobs
    assert all("model=mynet" in wildcards for wildcards in rebuilt.values()), rebuilt
    assert not [job for job in jobs if job[0] in builders and "model=mynet" not in job[1]]
