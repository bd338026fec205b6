"""Checkpoints: weights-only loading, the one-line errors for bad files, RNG states, latest().

The checkpoints are real: written by a two-epoch training run of a toy CNN.
"""

from __future__ import annotations

import pickle
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from nnperf.core.errors import NnperfError
from nnperf.training import checkpoints
from nnperf.training import to_accuracy as convergence

from test_to_accuracy import request, restore_threads, synthetic, toy_cnn  # noqa: F401


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory) -> Path:
    """last.pt (epoch 2), best.pt and final.pt of a two-epoch run (checkpoint_every 2)."""
    folder = tmp_path_factory.mktemp("checkpoints")
    convergence.train_to_accuracy(
        request(epochs=2, checkpoint_every=2), toy_cnn, synthetic(96, 40), checkpoint_dir=folder
    )
    return folder


def one_line_error(path, expected_start: str | None = None) -> str:
    with pytest.raises(NnperfError) as info:
        checkpoints.load(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: " if expected_start is None else expected_start)
    return message


def test_a_checkpoint_is_plain_data_that_weights_only_loading_accepts(run_folder):
    raw = torch.load(run_folder / "final.pt", map_location="cpu", weights_only=True)
    assert raw["format"] == checkpoints.FORMAT and raw["epoch"] == 2
    assert raw["model_name"] == "toy" and raw["num_classes"] == 10
    assert set(raw) >= {"model", "optimizer", "scheduler", "scaler", "rng", "rows", "fingerprint"}
    assert set(raw["rng"]) == {"python", "numpy", "torch_cpu", "torch_cuda", "data"}
    assert isinstance(raw["rng"]["data"], torch.Tensor)  # the feeder's generator state
    assert [row["epoch"] for row in raw["rows"]] == [0, 1, 2]
    assert raw["optimizer"]["state"]  # momentum buffers are there


def test_a_pickled_python_object_is_refused_by_weights_only_loading(tmp_path):
    path = tmp_path / "last.pt"
    # Anything but tensors and plain data: weights-only unpickling must not build it (a
    # checkpoint that could run code when loaded is exactly what it protects against).
    torch.save({"format": checkpoints.FORMAT, "payload": Path("/etc/passwd")}, path)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path, weights_only=True)
    message = one_line_error(path)
    assert "refused by weights-only loading (it holds a pathlib.PosixPath object" in message
    assert message.endswith(f"allowed: {checkpoints.ALLOWED}")


def test_a_truncated_checkpoint_is_one_line(run_folder, tmp_path):
    whole = (run_folder / "last.pt").read_bytes()
    path = tmp_path / "last.pt"
    path.write_bytes(whole[: len(whole) // 2])
    message = one_line_error(path)
    assert "not a readable checkpoint, truncated or corrupt" in message
    assert "delete it to start the run over" in message


def test_random_bytes_are_one_line(tmp_path):
    path = tmp_path / "best.pt"
    path.write_bytes(np.random.default_rng(0).bytes(4096))
    assert "truncated or corrupt" in one_line_error(path)


@pytest.mark.parametrize(
    ("content", "what"),
    [
        (lambda: toy_cnn().state_dict(), "a dict without format"),
        (lambda: torch.zeros(3), "a Tensor"),
        (lambda: [1, 2, 3], "a list"),
    ],
)
def test_a_file_that_is_not_a_checkpoint_is_one_line(tmp_path, content, what):
    path = tmp_path / "final.pt"
    torch.save(content(), path)
    message = one_line_error(path)
    assert f"not an nnperf training checkpoint ({what}" in message


def test_a_missing_checkpoint_and_an_unknown_version_are_one_line(run_folder, tmp_path):
    assert "checkpoint not found" in one_line_error(tmp_path / "last.pt")
    checkpoint = checkpoints.load(run_folder / "final.pt")
    future = tmp_path / "future.pt"
    torch.save({**checkpoint, "format_version": 99}, future)
    assert "format version 99 is not supported" in one_line_error(future)


def test_a_checkpoint_of_another_model_or_class_count_is_refused(run_folder):
    path = run_folder / "final.pt"
    checkpoint = checkpoints.load(path)
    run = {
        "model": "resnet18_cifar",
        "num_classes": 100,
        "fingerprint": checkpoint["fingerprint"],
        "definition": checkpoint["definition"],
    }
    with pytest.raises(NnperfError) as info:
        checkpoints.check_identity(path, checkpoint, run)
    assert str(info.value) == (
        f"{path}: checkpoint of model toy with 10 classes, but this run trains resnet18_cifar "
        "with 100 classes; allowed: a checkpoint of the same model and classes"
    )


def test_a_settings_mismatch_names_the_settings(run_folder):
    path = run_folder / "final.pt"
    checkpoint = checkpoints.load(path)
    definition = checkpoint["definition"]
    changed = {
        **definition,
        "batch_size": 32,
        "convergence": {**definition["convergence"], "seed": 7, "lr": 0.1, "momentum": 0.8},
    }
    run = {"model": "toy", "num_classes": 10, "fingerprint": "other", "definition": changed}
    with pytest.raises(NnperfError) as info:
        checkpoints.check_identity(path, checkpoint, run)
    message = str(info.value)
    assert message.startswith(f"{path}: checkpoint was written with other settings: ")
    assert "batch_size 16 there, 32 here" in message
    assert "convergence.lr 0.05 there, 0.1 here" in message
    assert "(and 1 more)" in message and "\n" not in message


def test_rng_states_round_trip_through_a_weights_only_file(tmp_path):
    generator = torch.Generator().manual_seed(3)
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(4)
    path = tmp_path / "rng.pt"
    torch.save(checkpoints.rng_states(generator, cuda=False), path)
    expected = (
        random.random(),
        np.random.standard_normal(3).tolist(),
        torch.rand(3).tolist(),
        torch.rand(3, generator=generator).tolist(),
    )
    checkpoints.restore_rng_states(torch.load(path, weights_only=True), generator)
    again = (
        random.random(),
        np.random.standard_normal(3).tolist(),
        torch.rand(3).tolist(),
        torch.rand(3, generator=generator).tolist(),
    )
    assert again == expected


def test_latest_picks_the_most_epochs_and_never_skips_a_corrupt_file(run_folder, tmp_path):
    assert checkpoints.latest(tmp_path) is None
    folder = tmp_path / "run"
    shutil.copytree(run_folder, folder)
    best = checkpoints.load(folder / "best.pt")
    torch.save({**best, "epoch": 5}, folder / "best.pt")
    assert checkpoints.latest(folder) == folder / "best.pt"
    (folder / "last.pt").write_bytes(b"PK\x03\x04 cut short")
    with pytest.raises(NnperfError, match="last.pt: not a readable checkpoint"):
        checkpoints.latest(folder)


def test_checkpoints_are_written_atomically(run_folder, tmp_path, monkeypatch):
    """A save that fails half way leaves the previous file as it was, and no temporary."""
    path = tmp_path / "last.pt"
    shutil.copy(run_folder / "last.pt", path)
    before = path.read_bytes()

    def dies(obj, target):
        Path(target).write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", dies)
    with pytest.raises(KeyboardInterrupt):
        checkpoints.save(path, {"epoch": 3})
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]
