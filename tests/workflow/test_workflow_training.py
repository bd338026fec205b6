"""The training stage on the tiny config (the session's real `tiny_study` run): a real
training run on the learnable synthetic set rises well above chance, keeps weights-only
checkpoints, and the table, the figure and the summary put time to accuracy beside
throughput."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from nnperf.core import files, layout, vocab

pytestmark = pytest.mark.workflow

RUN = {
    "dataset": "synthetic",
    "device": "cpu",
    "model": "resnet18_cifar",
    "batch_size": 8,
    "variant": "baseline",
    "recipe": "default",
}


def _path(study, kind, precision):
    return study / layout.path(kind, precision=precision, **RUN)


def test_fp32_rises_well_above_chance_and_reaches_its_target(tiny_study):
    summary = files.read_json(_path(tiny_study, "training_run", "fp32"))
    assert summary["kind"] == vocab.TRAINING_RUN_KIND and summary["status"] == "ok"
    # 10 balanced classes: chance is 10%. 256 images, 4 epochs at most, target 40%.
    assert summary["initial_test_top1"] < 0.25
    assert summary["best_test_top1"] >= 0.4 and summary["reached"] is True
    assert summary["stop_reason"] == "target"
    assert 0 < summary["time_to_target_s"] <= summary["train_time_s"] + 1e-9
    epochs = pd.read_csv(_path(tiny_study, "training_epochs", "fp32"))
    assert list(epochs.columns) == list(vocab.EPOCH_CSV_COLUMNS)
    assert epochs["epoch"].tolist() == list(range(summary["epochs_run"] + 1))
    assert epochs["train_time_s"].iloc[-1] == pytest.approx(summary["train_time_s"])
    at_target = epochs[epochs["test_top1"] >= 0.4].iloc[0]
    assert at_target["train_time_s"] == pytest.approx(summary["time_to_target_s"])


def test_checkpoints_load_weights_only(tiny_study):
    folder = _path(tiny_study, "training_checkpoints", "fp32")
    names = sorted(path.name for path in folder.iterdir())
    assert names == ["best.pt", "final.pt", "last.pt"]
    checkpoint = torch.load(folder / "final.pt", weights_only=True)
    summary = files.read_json(_path(tiny_study, "training_run", "fp32"))
    assert checkpoint["epoch"] == summary["epochs_run"] and checkpoint["model_name"] == RUN["model"]
    assert {"model", "optimizer", "scheduler", "rng", "rows"} <= set(checkpoint)


def test_bf16_trains_or_ends_over_budget_before_its_first_epoch(tiny_study):
    """On a CPU without bf16 arithmetic a bf16 step takes seconds: its timed run says so and
    no epoch is started."""
    summary = files.read_json(_path(tiny_study, "training_run", "bf16"))
    assert summary["status"] in ("ok", "over_budget")
    if summary["status"] == "over_budget":
        assert summary["stop_numbers"]["budget_s"] > 0 and summary["error"] is None


def test_the_table_figure_and_summary_put_time_to_accuracy_beside_throughput(tiny_study):
    table = pd.read_csv(tiny_study / "results/tables/synthetic/training.csv")
    assert sorted(table["precision"]) == ["bf16", "fp32"]
    fp32 = table[table["precision"] == "fp32"].iloc[0]
    timed = pd.read_csv(tiny_study / "results/tables/synthetic/summary.csv")
    match = timed[(timed["precision"] == "fp32") & (timed["batch_size"] == 8)]
    match = match[match["variant"] == "baseline"].iloc[0]
    assert fp32["timed_throughput_img_s"] == pytest.approx(match["throughput_img_s_mean"])
    figure = tiny_study / "results/figures/accuracy/synthetic/cpu/resnet18_cifar.png"
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (tiny_study / "reports/synthetic/summary.md").read_text(encoding="utf-8")
    section = md.split("\n## Time to accuracy\n", 1)[1].split("\n## ", 1)[0]
    row = next(
        line for line in section.splitlines() if line.startswith("| cpu ") and " fp32 " in line
    )
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[:8] == [
        "cpu",
        "resnet18_cifar",
        "fp32",
        "8",
        "baseline",
        "default",
        fp32["status"],
        "40%",
    ]
    assert "Training runs" in section and "accuracy/synthetic/cpu/resnet18_cifar" in section
    assert "`results/tables/synthetic/training.csv`" in section
