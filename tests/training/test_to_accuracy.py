"""Training to accuracy: a tiny study learns the synthetic set, schedules, stops, statuses,
exact resume after a kill (simulated and a real SIGKILL), and the files the stage writes.

Everything trains for real on the CPU with one thread, on a few hundred synthetic images and
a toy CNN (or a registry model at toy size for the file edge): each test takes seconds.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from nnperf.core import contract, vocab
from nnperf.core.contract import (
    ConvergenceSettings,
    DatasetRequest,
    DatasetSettings,
    SyntheticData,
    TrainingRunRequest,
    VariantSettings,
)
from nnperf.core.errors import NnperfError
from nnperf.core.wording import training_budget_sentence
from nnperf.training import checkpoints
from nnperf.training import to_accuracy as convergence
from nnperf.workload import datasets as data_mod

# One thread: the machine is shared, and a fixed thread count keeps CPU float sums in the
# same order from process to process (the kill -9 test compares across processes).
ONE_THREAD = VariantSettings(cpu_threads=1)


@pytest.fixture(autouse=True, scope="module")
def restore_threads():
    """Give the session back torch's thread count (a run applies `cpu_threads`, process-wide)."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def synthetic(train_images: int, test_images: int, seed: int = 0) -> convergence.TrainingData:
    config = SyntheticData(train_images=train_images, test_images=test_images, seed=seed)
    spec = data_mod.DATASETS["synthetic"]
    return convergence.TrainingData(
        *data_mod.synthetic_split(config, "train"),
        *data_mod.synthetic_split(config, "test"),
        mean=spec.mean,
        std=spec.std,
        num_classes=spec.num_classes,
        input_size=32,
    )


def two_conv_cnn() -> torch.nn.Module:
    """Two conv-BN-ReLU layers, global pooling and a linear layer: 5.5k parameters."""
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1, bias=False),
        torch.nn.BatchNorm2d(16),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1, bias=False),
        torch.nn.BatchNorm2d(32),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(32, 10),
    )


def toy_cnn() -> torch.nn.Module:
    """Smaller still, with dropout: resuming must restore the RNG that dropout draws from."""
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=False),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.Dropout(0.2),
        torch.nn.AdaptiveAvgPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(32, 10),
    )


def request(
    precision: str = "fp32",
    batch_size: int = 16,
    settings: VariantSettings = ONE_THREAD,
    model: str = "toy",
    **convergence_settings,
) -> TrainingRunRequest:
    values = {"epochs": 3, "lr": 0.05, "target_accuracy": None, **convergence_settings}
    return TrainingRunRequest(
        device="cpu",
        model=model,
        precision=precision,
        batch_size=batch_size,
        settings=settings,
        convergence=ConvergenceSettings(**values),
    )


@pytest.fixture(scope="module")
def small() -> convergence.TrainingData:
    return synthetic(96, 40)


# --- learning ---------------------------------------------------------------------------------


def test_a_tiny_study_on_the_learnable_synthetic_set_rises_well_above_chance():
    """SGD (Nesterov), warm-up then cosine, flip-and-crop augmentation: 512 training images.

    Observed on a shared 2-core CPU (one thread, torch 2.14): test top-1 by epoch
    0: 1.6%, 1: 37.6%, 2: 71.6%, 3: 86.0%, 4: 91.0%, 5: 90.0%, in 1.0 s of training
    (0.2 s per epoch) plus 0.07 s of evaluation per epoch; the test takes 1.6 s. Chance is
    10%. (resnet18_cifar on the same data: 10%, 21%, 29%, 78%, 97% in 74 s of training.)
    """
    data = synthetic(512, 500)
    run = request(
        batch_size=32,
        epochs=5,
        nesterov=True,
        warmup_epochs=1.0,
        target_accuracy=0.6,
        stop_at_target=False,
    )
    result = convergence.train_to_accuracy(run, two_conv_cnn, data)
    top1 = [row["test_top1"] for row in result.epochs]
    losses = [row["train_loss"] for row in result.epochs[1:]]
    assert [row["epoch"] for row in result.epochs] == [0, 1, 2, 3, 4, 5]
    assert top1[0] < 0.25  # the untrained model: about chance
    assert top1[1] < 0.9  # not learnt in a few batches: there is a curve to measure
    assert max(top1) >= 0.75  # well above chance (observed 0.91)
    assert losses[-1] < 0.6 * losses[0]
    summary = result.summary
    assert summary["status"] == "ok" and summary["stop_reason"] == "epochs"
    assert summary["reached"] is True and summary["epochs_to_target"] <= 4
    hit = result.epochs[summary["epochs_to_target"]]
    assert summary["time_to_target_s"] == hit["train_time_s"] > 0
    assert summary["best_test_top1"] == max(top1)
    assert summary["images_seen"] == 5 * (512 // 32) * 32


def test_a_horizontal_flip_keeps_every_synthetic_label():
    """Half of each class is mirrored, so flip augmentation shows a class's own images: every
    class's mean image is (nearly) its own mirror image, and far from every other class's."""
    images, labels = data_mod.synthetic_split(SyntheticData(4000, 1), "train")
    means = np.stack([images[labels == k].astype(np.float64).mean(axis=0) for k in range(10)])
    mirrored = means[:, :, ::-1]
    own = np.sqrt(((means - mirrored) ** 2).mean(axis=(1, 2, 3)))
    others = [
        np.sqrt(((means[j] - mirrored[k]) ** 2).mean())
        for j in range(10)
        for k in range(10)
        if j != k
    ]
    assert own.max() < 5  # grey levels: the noise left in a mean of 400 images
    assert min(others) > 3 * own.max()


def test_rows_add_up(small):
    result = convergence.train_to_accuracy(request(epochs=2), toy_cnn, small)
    rows = result.epochs
    assert all(set(row) == set(vocab.EPOCH_CSV_COLUMNS) for row in rows)
    first, second = rows[1], rows[2]
    assert rows[0]["train_loss"] is None and rows[0]["epoch_time_s"] == 0.0
    assert second["train_time_s"] == pytest.approx(first["epoch_time_s"] + second["epoch_time_s"])
    assert first["throughput_img_s"] == pytest.approx(96 / first["epoch_time_s"])
    assert second["images_seen"] == 2 * 96
    assert all(row["eval_time_s"] > 0 for row in rows)
    assert result.summary["train_time_s"] == second["train_time_s"]
    assert result.summary["eval_time_s"] == pytest.approx(sum(r["eval_time_s"] for r in rows))
    # Two epochs of 6 steps, one of warm-up: the last step's lr is near the end of the cosine.
    assert rows[0]["lr"] == pytest.approx(0.05 / 6)
    assert second["lr"] == pytest.approx(0.05 * (1 + math.cos(math.pi * 5 / 6)) / 2)


# --- the recipe ---------------------------------------------------------------------------------


def _lrs(settings: ConvergenceSettings, steps_per_epoch: int) -> list[float]:
    """The learning rate of every iteration, and the one after the last."""
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = convergence.make_optimizer([parameter], settings)
    scheduler = convergence.make_lr_scheduler(optimizer, settings, steps_per_epoch)
    lrs = []
    for _ in range(settings.epochs * steps_per_epoch):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return lrs + [optimizer.param_groups[0]["lr"]]


def test_warmup_then_cosine_at_hand_computed_iterations():
    # 5 epochs of 2 steps, 2 warm-up epochs: W = 4, T = 10.
    lrs = _lrs(ConvergenceSettings(epochs=5, lr=0.1, warmup_epochs=2.0), 2)
    assert lrs[:4] == pytest.approx([0.025, 0.05, 0.075, 0.1])  # lr * (i + 1) / W
    assert lrs[4] == pytest.approx(0.1)  # cosine starts at the peak
    assert lrs[7] == pytest.approx(0.05)  # half way through the 6 cosine iterations
    assert lrs[9] == pytest.approx(0.05 * (1 + math.cos(math.pi * 5 / 6)))
    assert lrs[10] == pytest.approx(0.0, abs=1e-12)  # after the last step


def test_warmup_in_fractional_epochs_is_rounded_to_iterations():
    # Seed 000's 500 warm-up steps at 390 steps per epoch.
    settings = ConvergenceSettings(epochs=5, warmup_epochs=1.282)
    assert convergence.warmup_iterations(settings, 390) == 500


def test_cosine_without_warmup_and_constant_schedule():
    cosine = _lrs(ConvergenceSettings(epochs=2, lr=0.2, warmup_epochs=0.0), 2)
    # lr * (1 + cos(pi * i / 4)) / 2 with cos(pi / 4) = sqrt(2) / 2.
    half_root2 = math.sqrt(2) / 2
    assert cosine == pytest.approx([0.2, 0.1 * (1 + half_root2), 0.1, 0.1 * (1 - half_root2), 0])
    constant = _lrs(ConvergenceSettings(epochs=2, lr=0.2, schedule="constant", warmup_epochs=1), 2)
    assert constant == pytest.approx([0.1, 0.2, 0.2, 0.2, 0.2])


def test_one_cycle_is_torchs_with_the_warmup_as_its_rising_part():
    lrs = _lrs(ConvergenceSettings(epochs=4, lr=0.4, schedule="one_cycle", warmup_epochs=1), 5)
    assert lrs[0] == pytest.approx(0.4 / 25)  # OneCycleLR's div_factor
    assert max(lrs) == pytest.approx(0.4) and lrs.index(max(lrs)) == 4  # pct_start 5/20
    assert lrs[19] == pytest.approx(0.4 / 25 / 1e4)  # final_div_factor, at the last step


def test_optimizers_and_loss_follow_the_recipe():
    parameter = [torch.nn.Parameter(torch.zeros(2))]
    sgd = convergence.make_optimizer(
        parameter, ConvergenceSettings(nesterov=True, momentum=0.8, weight_decay=1e-4)
    )
    assert isinstance(sgd, torch.optim.SGD)
    assert sgd.defaults["nesterov"] and sgd.defaults["momentum"] == 0.8
    assert sgd.defaults["weight_decay"] == 1e-4
    adamw = convergence.make_optimizer(
        parameter, ConvergenceSettings(optimizer="adamw", lr=1e-3, weight_decay=0.0)
    )
    assert isinstance(adamw, torch.optim.AdamW) and adamw.defaults["lr"] == 1e-3
    loss = convergence.make_criterion(ConvergenceSettings(label_smoothing=0.1))
    assert isinstance(loss, torch.nn.CrossEntropyLoss) and loss.label_smoothing == 0.1


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"epochs": 0}, "recipe setting epochs = 0 is not allowed; allowed: an integer >= 1"),
        ({"target_accuracy": 90}, "recipe setting target_accuracy = 90 is not allowed"),
        ({"optimizer": "adam"}, "allowed: sgd, adamw"),
        ({"schedule": "step"}, "allowed: cosine, one_cycle, constant"),
        ({"optimizer": "adamw", "nesterov": True}, "true only with optimizer sgd"),
        ({"warmup_epochs": 6.0}, "a number between 0 and epochs (5)"),
        ({"schedule": "one_cycle", "warmup_epochs": 0.0}, "with schedule one_cycle"),
        ({"label_smoothing": 1.0}, "a number in [0, 1)"),
        ({"freeze_backbone": True}, "true only with the recipe's pretrained weights"),
        ({"pretrained_path": "/w.pth"}, "null unless the recipe's pretrained names the weights"),
        ({"input_size": 8}, "recipe setting input_size = 8 is not allowed"),
    ],
)
def test_bad_settings_are_one_line(values, message):
    with pytest.raises(NnperfError) as info:
        ConvergenceSettings(**values)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_request_round_trips_and_its_identity_leaves_out_when_to_stop():
    run = TrainingRunRequest(
        device="cuda",
        model="resnet50",
        precision="bf16",
        batch_size=128,
        variant="tuned",
        settings=VariantSettings(channels_last=True),
        recipe="finetune",
        convergence=ConvergenceSettings(
            optimizer="adamw",
            lr=1e-3,
            weight_decay=0.0,
            pretrained="IMAGENET1K_V1",
            pretrained_path="/weights/resnet50.pth",
            target_accuracy=0.5,
            max_seconds=600.0,
        ),
        dataset="cifar100",
        input_size=32,
    )
    data = contract.to_dict(run)
    json.dumps(data)
    assert contract.from_dict(TrainingRunRequest, data) == run
    assert list(run.keys()) == list(vocab.TRAINING_KEYS)
    definition = run.definition()
    assert "recipe" not in definition and "variant" not in definition
    assert definition["variant_settings"]["channels_last"] is True
    assert definition["convergence"]["pretrained"] == "IMAGENET1K_V1"
    for key in ConvergenceSettings.OUTSIDE_IDENTITY:
        assert key not in definition["convergence"]
    stops_elsewhere = dataclasses.replace(
        run.convergence, target_accuracy=0.6, checkpoint_every=5, pretrained_path=None
    )
    assert dataclasses.replace(run, convergence=stops_elsewhere).definition() == definition
    longer = dataclasses.replace(run.convergence, epochs=10)
    assert dataclasses.replace(run, convergence=longer).definition() != definition


# --- stopping and statuses ------------------------------------------------------------------


def test_stop_at_target_ends_the_run_at_the_first_epoch_at_target(small, tmp_path):
    run = request(epochs=6, target_accuracy=0.2, stop_at_target=True)
    result = convergence.train_to_accuracy(run, toy_cnn, small, checkpoint_dir=tmp_path)
    summary = result.summary
    assert summary["stop_reason"] == "target" and summary["status"] == "ok"
    assert summary["reached"] is True
    assert result.epochs[-1]["epoch"] == summary["epochs_to_target"] == summary["epochs_run"]
    assert all(row["test_top1"] < 0.2 for row in result.epochs[:-1])
    assert (tmp_path / "final.pt").is_file()


def test_an_unreached_target_is_null_not_zero(small):
    result = convergence.train_to_accuracy(request(epochs=1, target_accuracy=1.0), toy_cnn, small)
    summary = result.summary
    assert summary["reached"] is False and summary["time_to_target_s"] is None
    assert summary["epochs_to_target"] is None and summary["stop_reason"] == "epochs"


def test_a_time_budget_stops_the_run_as_over_budget(small):
    result = convergence.train_to_accuracy(request(epochs=3, max_seconds=1e-6), toy_cnn, small)
    summary = result.summary
    assert summary["status"] == "over_budget" and summary["stop_reason"] == "budget"
    assert summary["epochs_run"] == 1 and summary["stop_numbers"]["next_epoch"] == 2


def test_a_loss_that_becomes_nan_is_diverged(small):
    result = convergence.train_to_accuracy(request(epochs=3, lr=1e30), toy_cnn, small)
    summary = result.summary
    assert summary["status"] == "diverged" and summary["epochs_run"] == 1
    assert "training loss became nan" in summary["error"]


class RunsOutOfMemory(torch.nn.Module):
    """A toy CNN whose forward pass fails like the CUDA allocator from its 13th call on:
    in epoch 2's first step (3 evaluation batches, 6 steps, 3 evaluation batches before)."""

    def __init__(self):
        super().__init__()
        self.net = toy_cnn()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls >= 13:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return self.net(x)


def test_out_of_memory_is_a_result_with_the_rows_so_far(small):
    result = convergence.train_to_accuracy(request(epochs=3), RunsOutOfMemory, small)
    summary = result.summary
    assert summary["status"] == "oom" and summary["stop_reason"] == "oom"
    assert "out of memory" in summary["error"]
    assert [row["epoch"] for row in result.epochs] == [0, 1]


# --- exact resume ---------------------------------------------------------------------------


class Killed(Exception):
    """Stands for the process dying after an epoch's checkpoint was written."""


def _kill_after(epoch: int):
    def on_epoch(row):
        if row["epoch"] == epoch:
            raise Killed

    return on_epoch


def _trajectory(rows: list[dict]) -> list[tuple]:
    return [(r["epoch"], r["train_loss"], r["test_loss"], r["test_top1"], r["lr"]) for r in rows]


@pytest.mark.parametrize(
    ("precision", "variant", "schedule"),
    [
        ("fp32", ONE_THREAD, "cosine"),
        ("bf16", VariantSettings(cpu_threads=1, data_path="device_resident"), "one_cycle"),
    ],
)
def test_a_killed_run_resumes_and_reproduces_the_uninterrupted_losses_exactly(
    small, tmp_path, precision, variant, schedule
):
    run = request(
        precision,
        settings=variant,
        epochs=3,
        schedule=schedule,
        label_smoothing=0.1,
        nesterov=True,
    )
    straight = convergence.train_to_accuracy(run, toy_cnn, small)
    with pytest.raises(Killed):
        convergence.train_to_accuracy(
            run, toy_cnn, small, checkpoint_dir=tmp_path, on_epoch=_kill_after(2)
        )
    latest = checkpoints.latest(tmp_path)
    assert latest is not None and checkpoints.load(latest)["epoch"] == 2
    resumed = convergence.train_to_accuracy(
        run, toy_cnn, small, checkpoint_dir=tmp_path, resume_from=latest
    )
    assert _trajectory(resumed.epochs) == _trajectory(straight.epochs)  # exact, not approx
    assert resumed.summary["resumed_from"] == {"path": str(latest), "epoch": 2}
    final = checkpoints.load(tmp_path / "final.pt")["model"]
    again = convergence.train_to_accuracy(run, toy_cnn, small, checkpoint_dir=tmp_path / "again")
    reference = checkpoints.load(tmp_path / "again" / "final.pt")["model"]
    assert all(torch.equal(final[key], reference[key]) for key in reference)
    assert again.summary["resumed_from"] is None


def test_resuming_a_finished_run_trains_nothing_more(small, tmp_path):
    run = request(epochs=2)
    first = convergence.train_to_accuracy(run, toy_cnn, small, checkpoint_dir=tmp_path)
    again = convergence.train_to_accuracy(
        run, toy_cnn, small, checkpoint_dir=tmp_path, resume_from=tmp_path / "final.pt"
    )
    assert _trajectory(again.epochs) == _trajectory(first.epochs)
    assert again.summary["train_time_s"] == first.summary["train_time_s"]


def test_a_checkpoint_of_other_settings_is_refused_on_resume(small, tmp_path):
    convergence.train_to_accuracy(request(epochs=1), toy_cnn, small, checkpoint_dir=tmp_path)
    with pytest.raises(NnperfError) as info:
        convergence.train_to_accuracy(
            request(epochs=1, lr=0.1), toy_cnn, small, resume_from=tmp_path / "last.pt"
        )
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'last.pt'}: checkpoint was written with other")
    assert "convergence.lr 0.05 there, 0.1 here" in message and "\n" not in message
    # When to stop is not part of the identity: a new target resumes fine.
    convergence.train_to_accuracy(
        request(epochs=1, target_accuracy=0.5), toy_cnn, small, resume_from=tmp_path / "last.pt"
    )


KILLED_SCRIPT = """
import sys, time
sys.path[:0] = [{src!r}, {tests!r}]
import test_to_accuracy as t
from nnperf.training import to_accuracy as convergence

def on_epoch(row):
    print("EPOCH", row["epoch"], flush=True)
    if row["epoch"] == 2:
        time.sleep(120)  # killed here, between epochs

convergence.train_to_accuracy(
    t.request(epochs=3, nesterov=True), t.toy_cnn, t.synthetic(96, 40),
    checkpoint_dir={folder!r}, on_epoch=on_epoch,
)
print("NOT KILLED", flush=True)
"""


def test_a_process_killed_with_sigkill_resumes_exactly(small, tmp_path):
    here = Path(__file__).resolve()
    script = KILLED_SCRIPT.format(
        src=str(here.parents[2] / "src"), tests=str(here.parent), folder=str(tmp_path)
    )
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        seen = []
        for line in process.stdout:
            seen.append(line.strip())
            if line.strip() == "EPOCH 2":
                os.kill(process.pid, signal.SIGKILL)
                break
    finally:
        process.kill()
        process.wait(timeout=60)
    assert seen[-2:] == ["EPOCH 1", "EPOCH 2"], process.stderr.read()[-2000:]
    assert process.returncode == -signal.SIGKILL
    run = request(epochs=3, nesterov=True)
    latest = checkpoints.latest(tmp_path)
    assert latest is not None and latest.name in ("last.pt", "best.pt")
    resumed = convergence.train_to_accuracy(
        run, toy_cnn, small, checkpoint_dir=tmp_path, resume_from=latest
    )
    straight = convergence.train_to_accuracy(run, toy_cnn, small)
    assert _trajectory(resumed.epochs) == _trajectory(straight.epochs)


# --- the file edge -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data") / "synthetic"
    data_mod.prepare(
        DatasetRequest(
            root=str(root),
            dataset=DatasetSettings(synthetic=SyntheticData(train_images=32, test_images=20)),
        )
    )
    return root


def test_train_to_files_writes_the_epochs_csv_and_the_summary_json(prepared, tmp_path, capsys):
    run = TrainingRunRequest(
        device="cpu",
        model="resnet18_cifar",
        precision="fp32",
        batch_size=16,
        settings=ONE_THREAD,
        recipe="smoke",
        convergence=ConvergenceSettings(epochs=1, target_accuracy=0.99, warmup_epochs=0.5),
        data_root=str(prepared),
    )
    summary_path, epochs_path = tmp_path / "run.json", tmp_path / "run_epochs.csv"
    folder = tmp_path / "checkpoints"
    summary = convergence.train_to_files(run, summary_path, epochs_path, folder)
    on_disk = json.loads(summary_path.read_text())
    assert on_disk["schema_version"] == 1 and on_disk["kind"] == "training_run"
    assert on_disk["status"] == summary["status"] == "ok"
    assert on_disk["model"] == "resnet18_cifar" and on_disk["recipe"] == "smoke"
    assert on_disk["convergence"]["epochs"] == 1 and on_disk["train_images"] == 32
    assert on_disk["reached"] is False and on_disk["time_to_target_s"] is None
    assert on_disk["environment"]["torch"] == torch.__version__
    assert on_disk["parameters"] == on_disk["trainable_parameters"] == 11_173_962
    assert set(on_disk["checkpoints"]) == {"last", "best", "final"}
    epochs = pd.read_csv(epochs_path)
    assert list(epochs.columns) == list(vocab.EPOCH_CSV_COLUMNS)
    assert epochs["epoch"].tolist() == [0, 1]
    assert (epochs["recipe"] == "smoke").all() and (epochs["batch_size"] == 16).all()
    assert np.isnan(epochs["train_loss"].iloc[0]) and epochs["train_loss"].iloc[1] > 0
    assert epochs["images_seen"].tolist() == [0, 32]
    out = capsys.readouterr().out
    assert "resnet18_cifar cpu fp32 bs16 baseline recipe smoke: epoch 1: train loss" in out
    assert "99% not reached in 1 epoch" in out
    # A second call resumes from the finished run's checkpoint instead of training again.
    again = convergence.train_to_files(run, summary_path, epochs_path, folder)
    assert again["resumed_from"]["epoch"] == 1
    assert again["final_train_loss"] == summary["final_train_loss"]


def test_an_epoch_that_cannot_fit_the_budget_is_not_started(small):
    """bf16 on a CPU without bf16 arithmetic: the timed runs' 13 s step says the first epoch
    (6 steps) would take 78 s of a 10 s budget, so no epoch runs."""
    run = request(epochs=3, max_seconds=10.0)
    result = convergence.train_to_accuracy(run, toy_cnn, small, expected_step_time_s=13.0)
    summary = result.summary
    assert summary["status"] == "over_budget" and summary["epochs_run"] == 0
    assert [row["epoch"] for row in result.epochs] == [0]
    assert summary["error"] is None and summary["stop_reason"] == "budget"
    assert summary["stop_numbers"] == {
        "train_time_s": 0.0,
        "next_epoch": 1,
        "projected_epoch_s": pytest.approx(78.0),
        "budget_s": 10.0,
    }
    assert training_budget_sentence(summary["stop_numbers"]) == (
        "stopped after 0 s of training: epoch 1 would take ~78 s more, past "
        "the recipe's max_seconds = 10"
    )
    assert convergence.epoch_time_projection(result.epochs, None, 6) is None
    rows = [{"epoch": 0, "epoch_time_s": 0.0}, {"epoch": 1, "epoch_time_s": 2.5}]
    assert convergence.epoch_time_projection(rows, 13.0, 6) == 2.5  # the last epoch rules


@pytest.mark.parametrize(
    ("one_time_s", "one_time_steps", "expected_s", "projected"),
    [
        # A first epoch of 6 steps, 20.5 s of it compiling: 1.5 s for 5 steady steps.
        (20.5, 1, None, 1.5 * 6 / 5),
        # reduce-overhead on CUDA: compilation and CUDA-graph recording, 2 one-time steps.
        (20.9, 2, None, 1.1 * 6 / 4),
        # An epoch without one-time steps (not a process's first) is its own projection.
        (0.0, 1, 0.5, 22.0),
    ],
)
def test_one_time_costs_are_not_projected_onto_later_epochs(
    one_time_s, one_time_steps, expected_s, projected
):
    rows = [
        {"epoch": 0, "epoch_time_s": 0.0, "one_time_s": 0.0},
        {"epoch": 1, "epoch_time_s": 22.0, "one_time_s": one_time_s},
    ]
    got = convergence.epoch_time_projection(rows, expected_s, 6, one_time_steps)
    assert got == pytest.approx(projected)


def test_an_epoch_of_one_time_steps_only_projects_from_the_timed_runs():
    """One step an epoch, two one-time steps: no steady step to go by in the epoch."""
    rows = [
        {"epoch": 0, "epoch_time_s": 0.0},
        {"epoch": 1, "epoch_time_s": 21.0, "one_time_s": 21.0},
    ]
    assert convergence.epoch_time_projection(rows, 0.015, 1, 2) == 0.015
    assert convergence.epoch_time_projection(rows, None, 1, 2) == 21.0  # all that is known


class SlowFirstTrainingStep(torch.nn.Module):
    """The toy CNN, whose first forward call in train mode sleeps: a first step carrying a
    one-time cost, as compilation or cuDNN autotuning does (evaluation does not sleep)."""

    def __init__(self, seconds: float = 2.0):
        super().__init__()
        self.net = toy_cnn()
        self.seconds = seconds
        self.slept = False

    def forward(self, x):
        if self.training and not self.slept:
            self.slept = True
            time.sleep(self.seconds)
        return self.net(x)


def test_a_slow_first_step_does_not_stop_the_run_at_the_budget(small):
    """A 2 s first step and a 3 s budget: projected from the first epoch's whole time
    (> 2 s), the second epoch would not fit; at its steady pace every epoch does."""
    run = request(epochs=3, max_seconds=3.0)
    result = convergence.train_to_accuracy(run, SlowFirstTrainingStep, small)
    summary = result.summary
    first, second, third = result.epochs[1:]
    assert summary["status"] == "ok", summary["error"]
    assert summary["epochs_run"] == 3
    assert first["one_time_s"] >= 2.0 and first["epoch_time_s"] > first["one_time_s"]
    assert second["one_time_s"] == third["one_time_s"] == 0.0
    assert summary["one_time_s"] == first["one_time_s"]
    steady = convergence.steady_epoch_time(first, 6, 1)
    assert steady == pytest.approx((first["epoch_time_s"] - first["one_time_s"]) * 6 / 5)
    assert steady < first["epoch_time_s"] / 2


def test_a_timed_run_over_budget_without_a_steady_step_gives_no_projection(prepared, tmp_path):
    """The timed run stopped before a steady step (single_step_time_s null): nothing to
    project from, so the first epoch runs (and is measured) instead of being refused."""
    run = TrainingRunRequest(
        device="cpu",
        model="resnet18_cifar",
        precision="fp32",
        batch_size=16,
        settings=ONE_THREAD,
        convergence=ConvergenceSettings(
            epochs=1, target_accuracy=None, warmup_epochs=0.0, max_seconds=600.0
        ),
        data_root=str(prepared),
    )
    timed = tmp_path / "run.json"
    timed.write_text(
        json.dumps({**run.keys(), "status": "over_budget", "single_step_time_s": None})
    )
    summary = convergence.train_to_files(
        run, tmp_path / "s.json", tmp_path / "e.csv", None, run_json=timed
    )
    assert summary["status"] == "ok" and summary["epochs_run"] == 1


# --- compiled training ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def inductor():
    """torch.compile's default backend, or a skip saying why it cannot run here (it needs a
    C++ compiler on a CPU)."""
    try:
        torch.compile(lambda x: x + 1)(torch.ones(2))
    except Exception as exc:  # noqa: BLE001 - any failure means: cannot compile here
        pytest.skip(f"torch.compile cannot run here: {type(exc).__name__}: {exc}")


def test_compiled_training_evaluates_without_compiling_again(small, inductor):
    """torch.compile on the CPU (inductor): the training graph is the only graph compiled.
    Evaluating through the compiled model would compile an eval-mode graph and another
    for the test split's last batch (40 images at batch 16 leave 8)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    variant = dataclasses.replace(ONE_THREAD, compile="default")
    result = convergence.train_to_accuracy(request(epochs=2, settings=variant), toy_cnn, small)
    assert result.summary["status"] == "ok"
    assert counters["stats"]["unique_graphs"] == 1
    first, second = result.epochs[1:]
    assert first["one_time_s"] > 0 and second["one_time_s"] == 0.0
    assert all(0 <= row["test_top1"] <= 1 for row in result.epochs)


def test_the_workflow_resumes_only_its_own_checkpoints(prepared, tmp_path, capsys):
    """RESUME_MATCHING (the rule's mode): a killed job carries on, but checkpoints of other
    code or settings are another run's: they are removed and the run starts over."""
    run = TrainingRunRequest(
        device="cpu",
        model="resnet18_cifar",
        precision="fp32",
        batch_size=16,
        settings=ONE_THREAD,
        convergence=ConvergenceSettings(epochs=1, target_accuracy=None, warmup_epochs=0.0),
        data_root=str(prepared),
    )
    folder = tmp_path / "checkpoints"
    files = (tmp_path / "s.json", tmp_path / "e.csv", folder)
    matching = convergence.RESUME_MATCHING
    first = convergence.train_to_files(run, *files, resume=matching, engine="code-1")
    assert first["resumed_from"] is None
    same = convergence.train_to_files(run, *files, resume=matching, engine="code-1")
    assert same["resumed_from"]["epoch"] == 1
    capsys.readouterr()
    changed = convergence.train_to_files(run, *files, resume=matching, engine="code-2")
    assert changed["resumed_from"] is None
    out = capsys.readouterr().out
    assert "starting over: " in out and "engine 'code-1' there, 'code-2' here" in out
    # Plain resume (by hand) refuses the other run's checkpoint instead.
    with pytest.raises(NnperfError, match="checkpoint was written with other settings"):
        convergence.train_to_files(run, *files, resume=True, engine="code-3")
