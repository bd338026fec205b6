"""Models from four sources: one name each resolves to an nn.Module and its input size, and
each bad input is one line (nnperf.core.model_names, nnperf.workload.models)."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch

from nnperf.core import config as study_config
from nnperf.core import contract, model_names
from nnperf.core.errors import NnperfError
from nnperf.report.format import cells
from nnperf.report.sections import complexity as complexity_section
from nnperf.workload import complexity, model_sources, models

MYNET = """\
import torch
from torch import nn


def build(num_classes):
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(8, num_classes),
    )


class Spectral(nn.Module):
    # A model whose FFT the FLOP counter has no formula for.
    def __init__(self, num_classes):
        super().__init__()
        self.head = nn.Linear(3 * 8 * 5, num_classes)

    def forward(self, x):
        return self.head(torch.fft.rfft2(x[:, :, :8, :8]).abs().flatten(1))


def broken(num_classes):
    raise ValueError(f"no layout for {num_classes} classes")


def wrong_output(num_classes):
    return nn.Sequential(nn.Flatten(), nn.LazyLinear(num_classes + 1))
"""


@pytest.fixture
def mynet(tmp_path, monkeypatch):
    """A user's model file in the working directory, as a study folder holds it."""
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "mynet.py").write_text(MYNET)
    monkeypatch.chdir(tmp_path)
    model_sources._load_factory.cache_clear()
    model_sources.check_output.cache_clear()
    return tmp_path / "models" / "mynet.py"


def source(name="mynet", factory="models/mynet.py:build", **kwargs):
    return contract.ModelSource(name=name, factory=factory, **kwargs)


# --- each source ------------------------------------------------------------------------------


def test_registry_names_are_spelt_out_without_torch_and_resolve_as_before():
    assert model_names.REGISTRY_NAMES == models.MODEL_NAMES
    assert model_names.kind_of("resnet18_cifar") == "registry"
    assert models.input_size("resnet18_cifar", 40) == 40
    assert models.build_model("resnet18_cifar", 10)(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


def test_any_torchvision_classifier_builds_at_its_weights_crop():
    assert model_names.kind_of("regnet_y_400mf") == "torchvision"
    assert models.input_size("efficientnet_b3") == 300
    assert models.input_size("vit_b_16") == 224
    assert models.input_size("regnet_y_400mf") == 224
    model = models.build_model("mobilenet_v3_small", 7)
    assert model.training
    assert model(torch.zeros(2, 3, 64, 64)).shape == (2, 7)
    # GoogLeNet without its auxiliary heads: plain logits in train mode.
    googlenet = models.build_model("googlenet", 5)
    assert isinstance(googlenet(torch.zeros(2, 3, 64, 64)), torch.Tensor)


def test_a_torchvision_vit_is_built_for_the_size_it_is_fed():
    entry = contract.ModelSource(name="vit_b_16", input_size=32)
    assert models.input_size("vit_b_16", 32, entry) == 32
    with torch.device("meta"):
        model = models.build_model("vit_b_16", 10, entry)
        assert model(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


def test_timm_models_by_prefix_or_mapping():
    assert model_names.kind_of("timm_resnet10t") == "timm"
    assert models.input_size("timm_resnet10t") == 176  # timm's pretrained config
    model = models.build_model("timm_resnet10t", 10)
    assert model(torch.zeros(2, 3, 32, 32)).shape == (2, 10)
    # A name that is not a path key (a pretrained tag) through a mapping.
    tagged = contract.ModelSource(name="r50a1", timm="resnet50.a1_in1k")
    study_config.validate({"models": [{"name": "r50a1", "timm": "resnet50.a1_in1k"}]})
    assert models.input_size("r50a1", 32, tagged) == 224
    with torch.device("meta"):
        assert models.build_model("r50a1", 3, tagged)(torch.zeros(2, 3, 64, 64)).shape == (2, 3)
    # A fixed-size timm ViT is built for the size it is fed.
    vit = contract.ModelSource(name="timm_vit_tiny_patch16_224", input_size=32)
    assert models.build_model("timm_vit_tiny_patch16_224", 4, vit)(
        torch.zeros(2, 3, 32, 32)
    ).shape == (2, 4)


def test_user_factory_from_a_file_or_a_module(mynet, monkeypatch):
    entry = source(input_size=48)
    assert model_names.kind_of("mynet", entry) == "factory"
    assert models.input_size("mynet", 32, entry) == 48
    assert models.input_size("mynet", 32, source()) == 32  # the dataset's size by default
    model = models.build_model("mynet", 6, entry)
    assert model.training and model(torch.zeros(2, 3, 48, 48)).shape == (2, 6)
    assert model_names.source_files("mynet", entry) == ["models/mynet.py"]
    monkeypatch.syspath_prepend(str(mynet.parent))
    by_module = source(factory="mynet:Spectral")
    study_config.validate({"models": [{"name": "mynet", "factory": "mynet:Spectral"}]})
    assert model_names.source_files("mynet", by_module) == [str(mynet)]
    assert models.build_model("mynet", 3, by_module, 32)(torch.zeros(2, 3, 32, 32)).shape == (2, 3)


def test_nnperf_models_lists_every_source_with_sizes_and_parameters_on_demand():
    from nnperf.commands import models as command

    rows = command.rows("resnet10t", params=True)
    assert rows == [("timm_resnet10t", "timm", 176, 5_435_488)]
    listed = {name: (kind, size) for name, kind, size, _ in command.rows("vit_b_16")}
    assert listed["vit_b_16"] == ("torchvision", 224)
    assert ("resnet18_cifar", "registry", 32, None) in command.rows("resnet18_cifar")


# --- complexity of every model ----------------------------------------------------------------


def test_vit_attention_flops_are_counted():
    """torchvision ViT-B/16 at 224: every matrix product by hand, attention included."""
    document, _ = complexity.complexity_document(
        contract.ComplexityRequest(model="vit_b_16", dataset="synthetic")
    )
    n, d, layers, classes = 197, 768, 12, 10
    patch_embedding = 2 * 196 * d * (3 * 16 * 16)
    per_layer = (
        2 * n * d * 3 * d  # q, k, v projections
        + 2 * n * n * d  # q @ k^T over all heads
        + 2 * n * n * d  # attention @ v
        + 2 * n * d * d  # output projection
        + 2 * 2 * n * d * 4 * d  # MLP
    )
    assert (
        document["forward_flops_per_image"]
        == patch_embedding + layers * per_layer + 2 * d * classes
    )
    assert document["model_kind"] == "torchvision"
    assert document["flop_coverage"]["uncounted_calls"] == 0
    assert document["flop_coverage"]["counted_calls"] > 0


def test_timm_model_complexity():
    entry = contract.ModelSource(name="timm_vit_tiny_patch16_224", input_size=32)
    document, layers = complexity.complexity_document(
        contract.ComplexityRequest(model=entry.name, model_source=entry)
    )
    assert document["input_shape"] == [3, 32, 32]
    assert document["model_kind"] == "timm"
    # Leaf layers' parameters plus the class token and the position embedding of its 2x2
    # patches and the token (width 192), which belong to no leaf.
    assert document["params"] == layers["params"].sum() + 192 * (1 + 5)
    # 4 patches + the class token: attention is a small share, and counted.
    assert document["forward_flops_per_image"] > 2 * document["params"] * 0.9
    assert document["flop_coverage"]["uncounted_share"] == 0.0


def test_uncounted_ops_are_named_and_stated_beside_the_flops(mynet):
    entry = source(factory="models/mynet.py:Spectral")
    document, _ = complexity.complexity_document(
        contract.ComplexityRequest(model="mynet", model_source=entry)
    )
    coverage = document["flop_coverage"]
    assert "aten._fft_r2c" in coverage["uncounted_ops"]
    # Counted: the head's addmm and its mm in backward; uncounted: the FFT.
    assert coverage["uncounted_calls"] == coverage["uncounted_ops"]["aten._fft_r2c"]
    assert 0 < coverage["uncounted_share"] < 1
    assert "of compute ops uncounted (aten._fft_r2c x" in complexity.summary(document)
    shown = cells(
        complexity_section.complexity_table([document]), complexity_section.COMPLEXITY_COLUMNS
    )
    share = f"{coverage['uncounted_share']:.0%}"
    assert shown["Train step FLOP/image"][0].endswith(f"({share} of compute ops uncounted)")
    plain = {**document, "flop_coverage": {"uncounted_share": 0.0}}
    shown = cells(
        complexity_section.complexity_table([plain]), complexity_section.COMPLEXITY_COLUMNS
    )
    assert "uncounted" not in shown["Train step FLOP/image"][0]


# --- bad input: one line each ---------------------------------------------------------------------


def one_line(call) -> str:
    with pytest.raises(NnperfError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    return message


def test_unknown_name_names_the_closest_known_ones():
    message = one_line(lambda: study_config.validate({"models": ["efficientnet_bx"]}))
    assert message.startswith("config models entry 'efficientnet_bx' is unknown (closest: ")
    assert "efficientnet_b" in message.split("closest: ")[1]
    message = one_line(lambda: study_config.validate({"models": ["timm_resnet10x"]}))
    assert "timm has no model 'resnet10x' (closest: resnet10t" in message
    message = one_line(lambda: study_config.validate({"models": ["vit_b16"]}))
    assert "(closest: vit_b_16" in message


def test_missing_factory_file_or_callable(mynet):
    message = one_line(
        lambda: study_config.validate(
            {"models": [{"name": "x", "factory": "models/nope.py:build"}]}
        )
    )
    assert message.startswith("config models entry 'x': factory file models/nope.py does not exist")
    message = one_line(
        lambda: study_config.validate(
            {"models": [{"name": "x", "factory": "models/mynet.py:biuld"}]}
        )
    )
    assert message == (
        "config models entry 'x': models/mynet.py defines no 'biuld'; allowed: build, Spectral, "
        "broken, wrong_output"
    )
    message = one_line(
        lambda: study_config.validate({"models": [{"name": "x", "factory": "nosuch.module:build"}]})
    )
    assert "factory module nosuch.module cannot be found" in message


def test_factory_that_raises_is_its_last_line(mynet):
    message = one_line(
        lambda: complexity.complexity_document(
            contract.ComplexityRequest(
                model="mynet", model_source=source(factory="models/mynet.py:broken")
            )
        )
    )
    assert message == (
        "model 'mynet': factory models/mynet.py:broken raised ValueError: no layout for 10 "
        "classes (mynet.py, line 23)"
    )


def test_model_whose_output_is_not_batch_by_classes(mynet):
    entry = source(factory="models/mynet.py:wrong_output", input_size=8)
    message = one_line(lambda: models.build_model("mynet", 10, entry))
    assert message == (
        "model 'mynet': its output on a batch of 2 images is shape (2, 11); allowed: logits of "
        "shape (batch, num_classes) = (2, 10)"
    )


def test_timm_not_installed(monkeypatch):
    """timm faked away: found by no import, importable by none."""
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "timm" else real_find_spec(name, *a),
    )
    monkeypatch.setitem(sys.modules, "timm", None)
    model_names.timm_names.cache_clear()
    try:
        message = one_line(lambda: study_config.validate({"models": ["timm_resnet10t"]}))
        assert message == (
            "config models entry 'timm_resnet10t' is a timm model (resnet10t) and timm is not "
            "installed here; pip install 'nnperf[timm]', or leave the model out"
        )
        message = one_line(lambda: models.build_model("timm_resnet10t", 10))
        assert message.startswith("timm is not installed here, and a timm model needs it")
        assert "need pip install 'nnperf[timm]'" in one_line(
            lambda: models.build_model("resnet19", 1)
        )
    finally:
        model_names.timm_names.cache_clear()


def test_mapping_with_both_sources_or_a_name_that_is_no_path_key():
    message = one_line(
        lambda: study_config.validate({"models": [{"name": "x", "factory": "a.py:b", "timm": "c"}]})
    )
    assert message == "config models entry 'x' gives both factory and timm; allowed: one"
    message = one_line(lambda: study_config.validate({"models": ["ResNet"]}))
    assert message.startswith("config models[0] = 'ResNet' is not allowed; allowed: text matching")
    message = one_line(lambda: study_config.validate({"models": ["resnet18", "resnet18"]}))
    assert message == "config models names 'resnet18' twice; allowed: each name once"


def test_typed_study_carries_the_mapping_to_every_request(mynet):
    from nnperf.core.keys import RunKey
    from nnperf.study import job_requests

    config = study_config.validate(
        {"models": ["resnet18_cifar", {"name": "mynet", "factory": "models/mynet.py:build"}]}
    )
    study = contract.from_dict(contract.StudyConfig, config)
    assert study.model_names == ("resnet18_cifar", "mynet")
    # The mapping, but for min_seconds: null there, resolved to its share of max_seconds.
    resolved = {**config, "timing": {**config["timing"], "min_seconds": study.timing.min_seconds}}
    assert config["timing"]["min_seconds"] is None and study.timing.min_seconds > 0
    assert contract.to_dict(study) == resolved
    key = RunKey("cpu", "mynet", "fp32", 4, "baseline")
    run = job_requests.run_request(study, key, "synthetic")
    assert run.model_source == source()
    assert contract.from_dict(contract.RunRequest, contract.to_dict(run)) == run
    assert job_requests.complexity_request(study, "mynet", "synthetic").model_source == source()
    assert (
        job_requests.training_request(study, key, "default", "synthetic").model_source == source()
    )
    assert job_requests.model_code(study, "mynet") == ["models/mynet.py"]
    assert job_requests.model_code(study, "resnet18_cifar") == []
    assert run.key.model == "mynet"


def test_pretrained_weights_for_any_torchvision_model_replace_its_last_linear():
    assert models.pretrained_weights("mobilenet_v3_small", "DEFAULT").name == "IMAGENET1K_V1"
    with torch.device("meta"):
        model = models.build_model("mobilenet_v3_small", 10)
    assert models.head_of("mobilenet_v3_small", model) == "classifier.3"
    assert models.head_of("resnet18", model) == "fc"  # the registry names its own
    message = one_line(lambda: models.pretrained_weights("timm_resnet10t", "DEFAULT"))
    assert message.startswith("model 'timm_resnet10t' has no pretrained weights")
