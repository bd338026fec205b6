"""`nnperf train`: one configuration trained to accuracy by hand, as rule train_to_accuracy
does it from the config; then resumed from its checkpoints, or started over."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from nnperf.cli import main
from nnperf.core.contract import DatasetRequest, DatasetSettings, SyntheticData
from nnperf.workload import datasets as data


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("data") / "synthetic"
    settings = DatasetSettings(synthetic=SyntheticData(train_images=32, test_images=16))
    data.prepare(DatasetRequest(root=str(root), dataset=settings))
    return root


def _train(prepared, tmp_path, *extra) -> int:
    return main(
        [
            "train",
            "--device", "cpu",
            "--model", "resnet18_cifar",
            "--precision", "fp32",
            "--batch-size", "16",
            "--recipe", "by_hand",
            "--data-root", str(prepared),
            "--epochs", "1",
            "--no-stop-at-target",
            "--warmup-epochs", "0.5",
            "--lr", "0.05",
            "--nesterov",
            "--variant-settings", '{"cpu_threads": 1}',
            "--out-json", str(tmp_path / "run.json"),
            "--out-epochs-csv", str(tmp_path / "run_epochs.csv"),
            "--checkpoints", str(tmp_path / "checkpoints"),
            *extra,
        ]
    )  # fmt: skip


def test_train_by_hand_writes_the_run_and_resumes_or_restarts(prepared, tmp_path, capsys):
    torch_threads = torch.get_num_threads()
    try:
        assert _train(prepared, tmp_path) == 0
        summary = json.loads((tmp_path / "run.json").read_text())
        assert summary["status"] == "ok" and summary["recipe"] == "by_hand"
        assert summary["convergence"]["nesterov"] is True and summary["convergence"]["lr"] == 0.05
        assert summary["variant_settings"]["cpu_threads"] == 1
        epochs = pd.read_csv(tmp_path / "run_epochs.csv")
        assert epochs["epoch"].tolist() == [0, 1]
        # Again: resumed from final.pt, nothing more trained.
        assert _train(prepared, tmp_path) == 0
        assert "resuming from" in capsys.readouterr().out
        again = json.loads((tmp_path / "run.json").read_text())
        assert again["resumed_from"]["epoch"] == 1
        assert again["final_train_loss"] == summary["final_train_loss"]
        # --restart trains anew; other settings on a resume are one line.
        assert _train(prepared, tmp_path, "--restart") == 0
        assert json.loads((tmp_path / "run.json").read_text())["resumed_from"] is None
        assert _train(prepared, tmp_path, "--lr", "0.1") == 2
        error = capsys.readouterr().err.strip().splitlines()[-1]
        assert error.startswith("nnperf train: error: ") and "lr 0.05 there, 0.1 here" in error
    finally:
        torch.set_num_threads(torch_threads)
