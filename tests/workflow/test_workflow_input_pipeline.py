"""config/input-pipeline.yaml in a real Snakemake run, shrunk to tiny budgets, on a
generated ImageFolder: every variant measured with its loader's own rate, summary.csv's
verdict, and a report that states it for every configuration. And config/seed001.yaml's
DAG on a generated folder."""

from __future__ import annotations

import re

import pandas as pd
import pytest
import yaml
from conftest import run_snakemake
from imagefolder_data import make_imagefolder

from nnperf.core.vocab import INPUT_VERDICTS

# The study file's own matrix, made small enough for a CPU test: a CIFAR-stem network at 32
# pixels, two processes of one or two windows each, tiny operator profiles and ceilings.
SHRINK = {
    "models": ["resnet18_cifar"],
    "devices": ["cpu"],
    "batch_sizes": [4],
    "training": {"warmup_steps": 2, "timed_steps": 2},
    "timing": {
        "min_seconds": 0,
        "max_seconds": 20,
        "min_processes": 2,
        "max_processes": 2,
        "min_windows": 1,
        "max_windows": 2,
        "disturbed_windows": "keep",  # a test runner is never quiet (tests/configs/tiny.yaml)
    },
    "operator_profile": {"warmup_steps": 1, "steps": 2, "max_seconds": 10},
    "ceilings": {
        "gemm_sizes": [64, 128],
        "trials": 2,
        "bandwidth_bytes": 16777216,
        "sweep_min_bytes": 16384,
        "sweep_max_bytes": 4194304,
    },
}
ONE_KEY = "dataset={name: imagefolder, path: imgs, image_size: 32}"


def section(md: str, title: str) -> str:
    return md.split(f"\n## {title}", 1)[1].split("\n## ", 1)[0]


@pytest.mark.workflow
def test_the_input_pipeline_study_states_a_verdict_for_every_variant(workdir):
    make_imagefolder(workdir / "imgs")
    (workdir / "shrink.yaml").write_text(yaml.safe_dump(SHRINK))
    result = run_snakemake(
        workdir,
        "--configfile",
        "config/input-pipeline.yaml",
        "shrink.yaml",
        "--config",
        ONE_KEY,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    variants = set(yaml.safe_load((workdir / "config/input-pipeline.yaml").read_text())["variants"])
    assert len(variants) == 7

    summary = pd.read_csv(workdir / "results/tables/imgs/summary.csv")
    assert set(summary["variant"]) == variants
    assert (summary["status"] == "ok").all()
    assert set(summary["input_bound"]) <= set(INPUT_VERDICTS)
    # Every configuration's loader was timed alone, in both processes, beside its training.
    assert (summary["loader_rate_img_s"] > 0).all()
    assert (summary["loader_n_processes"] == 2).all()
    assert summary["data_wait_share"].between(0, 1).all()
    headroom = summary["loader_rate_img_s"] / summary["throughput_img_s_mean"]
    assert summary["loader_headroom"].tolist() == pytest.approx(headroom.tolist())

    md = (workdir / "reports/imgs/summary.md").read_text(encoding="utf-8")
    table = section(md, "Input pipeline")
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    header, body = rows[0], rows[1:]
    assert "Loader alone" in header and "Input-bound" in header and "Data wait" in header
    words = {"input_bound": "yes", "not_input_bound": "no", "undetermined": "undetermined"}
    for variant, verdict in zip(summary["variant"], summary["input_bound"]):
        (line,) = [r for r in body if f"| {variant} " in r]
        assert line.rstrip(" |").endswith(words[verdict]), line
    key = md.split("## Key findings", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"Data loading (limits|does not limit)", key), key
    # The settings table has a column for each DataLoader toggle the variants vary.
    environment = section(md, "Environment")
    settings = next(l for l in environment.splitlines() if l.startswith("| Variant"))
    for column in ("Num workers", "Pin memory", "Data path"):
        assert column in settings, settings


def test_seed001_plans_its_matrix_on_an_imagefolder(workdir):
    # Batch sizes up to 128 need 128 training images: 43 per class.
    make_imagefolder(workdir / "mini", train_per_class=43, val_per_class=1)
    result = run_snakemake(
        workdir,
        "-n",
        "--configfile",
        "config/seed001.yaml",
        "--config",
        "dataset={name: imagefolder, path: mini}",
    )
    assert result.returncode == 0, result.stderr[-4000:]
    counts = {}
    for line in result.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            counts[parts[0]] = int(parts[1])
    # 3 models x 4 batch sizes on this CPU (fp16 left out here), one timed job each.
    assert counts["timed_run"] == 3 * 4 and counts["complexity"] == 3
    assert "train_to_accuracy" not in counts
    for model in ("resnet50", "vgg16", "mobilenet_v2"):
        assert f"results/runs/mini/cpu/{model}/fp32/bs128/baseline.json" in result.stdout
    assert "precision fp16 is left out on cpu" in result.stderr
