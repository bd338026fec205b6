"""Transfer learning: pretrained weights from a local file or torch hub's cache (the
download is tests/workload/test_pretrained_weights.py's), the missing-file error, head replacement, a frozen backbone, and a fine-tuning
run that resumes without the weights file.

The "pretrained" weights are real torchvision state_dicts of randomly initialised models,
saved by the tests under the file names torchvision publishes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import torchvision
from torch import nn

from nnperf.core.contract import ConvergenceSettings, TrainingRunRequest
from nnperf.core.errors import NnperfError
from nnperf.training import checkpoints
from nnperf.training import to_accuracy as convergence
from nnperf.workload import models

from test_to_accuracy import (  # noqa: F401 (fixtures)
    ONE_THREAD,
    Killed,
    _kill_after,
    prepared,
    restore_threads,
)

RESNET18_FILE = "resnet18-f37072fd.pth"  # ResNet18_Weights.IMAGENET1K_V1's published name


@pytest.fixture(scope="module")
def resnet18_weights(tmp_path_factory) -> Path:
    """A torchvision resnet18 state_dict (1000 classes, random init) as a weights file."""
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("weights") / "resnet18-random.pth"
    torch.save(torchvision.models.resnet18(weights=None).state_dict(), path)
    return path


@pytest.fixture
def torch_home(tmp_path, monkeypatch) -> Path:
    """An empty torch home: torch.hub.get_dir() is <it>/hub."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    return tmp_path / "torch"


def test_weights_names_come_from_torchvisions_enums():
    assert models.pretrained_weights("resnet50", "IMAGENET1K_V2").url.endswith(
        "resnet50-11ad3fa6.pth"
    )
    assert models.pretrained_weights("resnet50", "DEFAULT").name == "IMAGENET1K_V2"
    assert models.pretrained_weights("resnet50", "ResNet50_Weights.IMAGENET1K_V1").name == (
        "IMAGENET1K_V1"
    )
    weights = models.pretrained_weights("resnet18", "IMAGENET1K_V1")
    assert models.weights_file_name(weights) == RESNET18_FILE
    with pytest.raises(NnperfError) as info:
        models.pretrained_weights("resnet50", "IMAGENET22K")
    assert str(info.value) == (
        "convergence.pretrained = 'IMAGENET22K' is not a weights name of resnet50; "
        "allowed: IMAGENET1K_V1, IMAGENET1K_V2, DEFAULT"
    )
    with pytest.raises(NnperfError, match="model 'resnet18_cifar' has no pretrained weights"):
        models.pretrained_weights("resnet18_cifar", "DEFAULT")


def test_pretrained_from_a_local_file_keeps_the_backbone_and_replaces_the_head(
    resnet18_weights,
):
    saved = torch.load(resnet18_weights, weights_only=True)
    model, record = models.build_pretrained(
        "resnet18", 100, "IMAGENET1K_V1", path=str(resnet18_weights)
    )
    state = model.state_dict()
    backbone = [key for key in saved if not key.startswith("fc.")]
    assert all(torch.equal(state[key], saved[key]) for key in backbone)
    assert isinstance(model.fc, nn.Linear)
    assert (model.fc.in_features, model.fc.out_features) == (512, 100)
    assert model.training
    assert record["weights"] == "ResNet18_Weights.IMAGENET1K_V1"
    assert record["file"] == str(resnet18_weights) and record["head"] == "fc"
    # A re-saved random model is not the published file, and the record says so.
    assert record["sha256_matches_published_name"] is False
    assert len(record["sha256"]) == 64
    with torch.no_grad():
        assert model(torch.randn(2, 3, 32, 32)).shape == (2, 100)


def test_pretrained_from_torch_hubs_cache(resnet18_weights, torch_home):
    cached = torch_home / "hub" / "checkpoints" / RESNET18_FILE
    cached.parent.mkdir(parents=True)
    shutil.copy(resnet18_weights, cached)
    assert models.hub_weights_path(models.pretrained_weights("resnet18", "DEFAULT")) == cached
    model, record = models.build_pretrained("resnet18", 10, "DEFAULT")
    assert record["file"] == str(cached) and model.fc.out_features == 10


def test_absent_weights_name_the_expected_file_and_how_to_get_it(torch_home, tmp_path):
    expected = torch_home / "hub" / "checkpoints" / "resnet50-11ad3fa6.pth"
    with pytest.raises(NnperfError) as info:
        models.build_pretrained("resnet50", 100, "IMAGENET1K_V2", download=False)
    assert str(info.value) == (
        f"{expected}: pretrained weights ResNet50_Weights.IMAGENET1K_V2 not found (torch hub's "
        "cache); rule download_weights fetches "
        "https://download.pytorch.org/models/resnet50-11ad3fa6.pth there, or copy it there"
    )
    local = tmp_path / "nowhere.pth"
    with pytest.raises(NnperfError) as info:
        models.build_pretrained("resnet50", 100, "IMAGENET1K_V2", path=str(local))
    assert str(info.value).startswith(f"{local}: pretrained weights ")
    assert "(convergence.pretrained_path)" in str(info.value)
    assert not expected.parent.exists()  # nothing was downloaded


def test_weights_of_another_architecture_or_not_weights_are_one_line(resnet18_weights, tmp_path):
    with pytest.raises(NnperfError) as info:
        models.build_pretrained("resnet34", 10, "IMAGENET1K_V1", path=str(resnet18_weights))
    message = str(info.value)
    assert message.startswith(f"{resnet18_weights}: not the weights of torchvision's resnet34 (")
    assert "missing layer1.2.conv1.weight" in message and "\n" not in message
    pickled = tmp_path / "object.pth"
    torch.save({"weights": Path("/")}, pickled)
    with pytest.raises(NnperfError, match="object.pth: not a readable weights file"):
        models.build_pretrained("resnet18", 10, "IMAGENET1K_V1", path=str(pickled))


@pytest.mark.parametrize("name", models.MODEL_NAMES)
def test_every_models_head_is_its_last_linear_layer_and_can_be_replaced(name):
    with torch.device("meta"):
        model = models.build_model(name, 1000)
        spec = models.get_spec(name)
        linears = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
        assert linears[-1] == spec.head
        head = models.replace_head(model, spec.head, 7)
    assert model.get_submodule(spec.head) is head and head.out_features == 7


def test_a_frozen_backbone_leaves_all_but_the_head_unchanged_by_a_step(resnet18_weights):
    model, record = models.build_pretrained(
        "resnet18", 10, "IMAGENET1K_V1", path=str(resnet18_weights), freeze=True
    )
    trainable = [name for name, p in model.named_parameters() if p.requires_grad]
    assert trainable == ["fc.weight", "fc.bias"]
    assert record["frozen_backbone"] is True and record["trainable_parameter_tensors"] == 2
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer = convergence.make_optimizer(
        [p for p in model.parameters() if p.requires_grad], ConvergenceSettings(lr=0.5)
    )
    loss = nn.functional.cross_entropy(model(torch.randn(4, 3, 32, 32)), torch.arange(4))
    loss.backward()
    optimizer.step()
    changed = [name for name, p in model.named_parameters() if not torch.equal(p, before[name])]
    assert changed == ["fc.weight", "fc.bias"]


def test_a_fine_tuning_run_resumes_without_its_weights_file(
    resnet18_weights, torch_home, prepared, tmp_path  # noqa: F811
):
    cached = torch_home / "hub" / "checkpoints" / RESNET18_FILE
    cached.parent.mkdir(parents=True)
    shutil.copy(resnet18_weights, cached)
    run = TrainingRunRequest(
        device="cpu",
        model="resnet18",
        precision="fp32",
        batch_size=16,
        settings=ONE_THREAD,
        recipe="finetune",
        convergence=ConvergenceSettings(
            epochs=2,
            optimizer="adamw",
            lr=1e-3,
            weight_decay=0.0,
            warmup_epochs=0.0,
            schedule="constant",
            target_accuracy=None,
            pretrained="IMAGENET1K_V1",
            freeze_backbone=True,
        ),
        data_root=str(prepared),
        input_size=32,  # seed 004 fed ResNet-50 CIFAR's 32x32 images as they are
    )
    folder = tmp_path / "checkpoints"
    with pytest.raises(Killed):
        data = convergence.load_training_data(run)
        factory, record = convergence.model_factory(run, data.num_classes, resuming=False)
        convergence.train_to_accuracy(
            run, factory, data, checkpoint_dir=folder, on_epoch=_kill_after(1), pretrained=record
        )
    cached.unlink()  # the checkpoint holds the weights now
    summary = convergence.train_to_files(
        run, tmp_path / "run.json", tmp_path / "run_epochs.csv", folder
    )
    assert summary["status"] == "ok" and summary["epochs_run"] == 2
    assert summary["resumed_from"]["epoch"] == 1
    assert summary["pretrained"]["weights"] == "ResNet18_Weights.IMAGENET1K_V1"
    assert summary["pretrained"]["file"] == str(cached)
    assert summary["trainable_parameters"] == 512 * 10 + 10
    assert summary["input_size"] == 32
    final = checkpoints.load(folder / "final.pt")["model"]
    saved = torch.load(resnet18_weights, weights_only=True)
    assert torch.equal(final["layer4.1.conv2.weight"], saved["layer4.1.conv2.weight"])
    assert final["fc.weight"].shape == (10, 512)
