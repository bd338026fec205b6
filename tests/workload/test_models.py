"""The model registry: every name builds from torchvision, runs, and has the stated shape."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from nnperf.core.errors import NnperfError
from nnperf.workload import models

REQUIRED = {
    "resnet18",
    "resnet34",
    "resnet50",
    "vgg16",
    "vgg16_bn",
    "mobilenet_v2",
    "resnet18_cifar",
    "resnet34_cifar",
    "resnet50_cifar",
    "vgg16_cifar",
    "vgg16_bn_cifar",
    "mobilenet_v2_cifar",
}


def test_model_names_is_a_sorted_tuple_with_every_required_name():
    assert isinstance(models.MODEL_NAMES, tuple)
    assert list(models.MODEL_NAMES) == sorted(models.MODEL_NAMES)
    assert REQUIRED <= set(models.MODEL_NAMES)


@pytest.mark.parametrize("name", models.MODEL_NAMES)
def test_every_model_builds_and_runs_a_cifar_sized_batch(name):
    torch.manual_seed(0)
    model = models.build_model(name, num_classes=7)
    assert model.training
    with torch.no_grad():
        logits = model(torch.randn(2, 3, 32, 32))
    assert logits.shape == (2, 7)
    assert torch.isfinite(logits).all()


def test_unknown_model_lists_what_exists():
    with pytest.raises(NnperfError) as info:
        models.build_model("resnet19", 10)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("model 'resnet19' is unknown (closest: resnet18, ")
    assert message.endswith(
        "allowed: an nnperf registry name, a torchvision classification model, "
        "timm_<timm name>, or a mapping with factory:"
    )


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_bad_num_classes_is_refused(bad):
    with pytest.raises(NnperfError, match=r"num_classes .* is invalid; allowed: an integer >= 1"):
        models.build_model("resnet18_cifar", bad)


def test_input_size_is_native_for_imagenet_models_and_the_dataset_size_for_cifar_ones():
    assert models.input_size("resnet50") == 224
    assert models.input_size("vgg16_bn", dataset_image_size=32) == 224
    assert models.input_size("resnet18_cifar") == 32
    assert models.input_size("mobilenet_v2_cifar", dataset_image_size=40) == 40
    with pytest.raises(NnperfError, match="model 'nope' is unknown"):
        models.input_size("nope")


def test_imagenet_models_are_torchvision_unchanged_but_for_the_classes():
    import torchvision

    ours = models.build_model("resnet50", 10)
    theirs = torchvision.models.resnet50(weights=None, num_classes=10)
    assert [(n, p.shape) for n, p in ours.named_parameters()] == [
        (n, p.shape) for n, p in theirs.named_parameters()
    ]


def _feature_shape(module: nn.Module, x: torch.Tensor) -> tuple[int, ...]:
    with torch.no_grad():
        return tuple(module(x).shape)


def test_resnet_cifar_has_a_3x3_stride_1_stem_and_no_max_pool():
    with torch.device("meta"):
        model = models.build_model("resnet18_cifar", 10)
    assert model.conv1.kernel_size == (3, 3)
    assert model.conv1.stride == (1, 1)
    assert model.conv1.bias is None
    assert isinstance(model.maxpool, nn.Identity)
    x = torch.empty(2, 3, 32, 32, device="meta")
    stem = nn.Sequential(model.conv1, model.bn1, model.relu, model.maxpool)
    trunk = nn.Sequential(stem, model.layer1, model.layer2, model.layer3, model.layer4)
    assert _feature_shape(trunk, x) == (2, 512, 4, 4)


def test_resnet_cifar_parameter_counts_match_the_literature():
    # He et al.'s ResNet-18 with a 3x3 stem on CIFAR-10: 11,173,962 parameters (the number
    # the widely used kuangliu/pytorch-cifar ResNet18 prints).
    model = models.build_model("resnet18_cifar", 10)
    assert models.count_parameters(model) == (11_173_962, 11_173_962)


def test_vgg_cifar_has_a_512_wide_head_without_the_7x7_pool():
    with torch.device("meta"):
        model = models.build_model("vgg16_bn_cifar", 100)
    linears = [m for m in model.classifier if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [
        (512, 512),
        (512, 512),
        (512, 100),
    ]
    x = torch.empty(2, 3, 32, 32, device="meta")
    assert _feature_shape(model.features, x) == (2, 512, 1, 1)
    assert model.avgpool.output_size == (1, 1)
    # VGG-16 conv layers (14.71M) + 512*512 + 512*512 + 512*100 weights and biases
    with torch.device("meta"):
        plain = models.build_model("vgg16_cifar", 10)
    conv = sum(p.numel() for p in plain.features.parameters())
    assert conv == 14_714_688
    assert models.count_parameters(plain)[0] == conv + 2 * (512 * 512 + 512) + 512 * 10 + 10


def test_mobilenet_v2_cifar_has_overall_stride_8():
    with torch.device("meta"):
        model = models.build_model("mobilenet_v2_cifar", 10)
        reference = models.build_model("mobilenet_v2", 10)
    assert model.features[0][0].stride == (1, 1)
    x = torch.empty(2, 3, 32, 32, device="meta")
    assert _feature_shape(model.features, x) == (2, 1280, 4, 4)
    # Only strides change: the parameters are torchvision's MobileNetV2's.
    assert models.count_parameters(model) == models.count_parameters(reference)
