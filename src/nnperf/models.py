"""The networks nnperf can time, by name: torchvision classifiers and their CIFAR forms.

Every model is built from torchvision's own builders with `weights=None` (random init; this
project never downloads weights). Two families:

* ImageNet-style (`resnet18`, `resnet34`, `resnet50`, `vgg16`, `vgg16_bn`, `mobilenet_v2`):
  torchvision's architecture unchanged except for `num_classes`. Their native input size is
  224x224; they also accept 32x32 images (the adaptive pools make that legal) but then the
  deep stages run at 1x1 and the numbers say little about the ImageNet training people know.
* CIFAR-style (`*_cifar`): the same torchvision modules, adapted for 32x32 inputs the way the
  CIFAR literature does it. What changes, and nothing else:

  - `resnet*_cifar`: the 7x7 stride-2 stem conv becomes a 3x3 stride-1 conv (64 channels,
    no bias, torchvision's Kaiming init) and the stem max-pool is removed, so the four stages
    run at 32, 16, 8 and 4 pixels (He et al. 2016, and the common CIFAR ResNet-18 recipe).
  - `vgg16_cifar`, `vgg16_bn_cifar`: torchvision's `features` unchanged (five max-pools take
    32x32 to 512x1x1). The 7x7 adaptive pool, which would copy that one pixel 49 times and feed
    a 25088x4096 layer, becomes a 1x1 adaptive pool, and the classifier becomes
    512-512-num_classes with ReLU and dropout, torchvision's layout at width 512 (as in the
    CIFAR VGG of Liu & Deng 2015 / pytorch-vgg-cifar10), with torchvision's linear init.
  - `mobilenet_v2_cifar`: the first conv has stride 1 instead of 2, and the second
    inverted-residual stage (t=6, c=24, n=2) has stride 1 instead of 2, so the overall
    stride is 8 and the last feature map is 4x4 at 32x32 input rather than 1x1 (the usual
    CIFAR adaptation). Width, expansion factors and the classifier are torchvision's.

What this module is not: it does not train, count FLOPs (see `nnperf.complexity`) or know
about datasets; `num_classes` is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torchvision
from torch import nn

from nnperf.errors import NnperfError

# torchvision's native classification resolution (the crop its reference recipes train at).
IMAGENET_INPUT_SIZE = 224

# torchvision's MobileNetV2 setting (t, c, n, s) from the paper's Table 2, with the second
# stage's stride 2 -> 1 for 32x32 inputs (see the module docstring).
_MOBILENET_V2_CIFAR_SETTING = [
    [1, 16, 1, 1],
    [6, 24, 2, 1],
    [6, 32, 3, 2],
    [6, 64, 4, 2],
    [6, 96, 3, 1],
    [6, 160, 3, 2],
    [6, 320, 1, 1],
]

# Hidden width of the CIFAR VGG classifier: the 512 channels the features end with.
_VGG_CIFAR_HIDDEN = 512


@dataclass(frozen=True)
class ModelSpec:
    """How to build one named model and at what input size it is meant to run."""

    name: str
    family: str  # "imagenet" or "cifar"
    build: Callable[[int], nn.Module]
    description: str


def _torchvision(arch: str, num_classes: int, **kwargs) -> nn.Module:
    return torchvision.models.get_model(arch, weights=None, num_classes=num_classes, **kwargs)


def _resnet_cifar(arch: str, num_classes: int) -> nn.Module:
    model = _torchvision(arch, num_classes)
    stem = nn.Conv2d(3, model.conv1.out_channels, kernel_size=3, stride=1, padding=1, bias=False)
    # The same init torchvision's ResNet.__init__ gives every conv.
    nn.init.kaiming_normal_(stem.weight, mode="fan_out", nonlinearity="relu")
    model.conv1 = stem
    model.maxpool = nn.Identity()
    return model


def _vgg_cifar(arch: str, num_classes: int) -> nn.Module:
    model = _torchvision(arch, num_classes)
    model.avgpool = nn.AdaptiveAvgPool2d((1, 1))
    hidden = _VGG_CIFAR_HIDDEN
    model.classifier = nn.Sequential(
        nn.Linear(512, hidden),
        nn.ReLU(True),
        nn.Dropout(),
        nn.Linear(hidden, hidden),
        nn.ReLU(True),
        nn.Dropout(),
        nn.Linear(hidden, num_classes),
    )
    # torchvision's VGG init for linear layers.
    for layer in model.classifier:
        if isinstance(layer, nn.Linear):
            nn.init.normal_(layer.weight, 0, 0.01)
            nn.init.constant_(layer.bias, 0)
    return model


def _mobilenet_v2_cifar(num_classes: int) -> nn.Module:
    model = _torchvision(
        "mobilenet_v2", num_classes, inverted_residual_setting=_MOBILENET_V2_CIFAR_SETTING
    )
    # features[0] is Conv2dNormActivation(3, 32, stride=2); its conv reads `stride` at call
    # time, so setting it keeps torchvision's module (and its init) intact.
    model.features[0][0].stride = (1, 1)
    return model


def _imagenet_spec(arch: str) -> ModelSpec:
    return ModelSpec(
        name=arch,
        family="imagenet",
        build=lambda num_classes: _torchvision(arch, num_classes),
        description=f"torchvision {arch}, unchanged",
    )


_SPECS = [
    *(_imagenet_spec(a) for a in ("resnet18", "resnet34", "resnet50")),
    *(_imagenet_spec(a) for a in ("vgg16", "vgg16_bn", "mobilenet_v2")),
    *(
        ModelSpec(
            name=f"{arch}_cifar",
            family="cifar",
            build=lambda num_classes, arch=arch: _resnet_cifar(arch, num_classes),
            description=f"torchvision {arch} with a 3x3 stride-1 stem and no max-pool",
        )
        for arch in ("resnet18", "resnet34", "resnet50")
    ),
    *(
        ModelSpec(
            name=f"{arch}_cifar",
            family="cifar",
            build=lambda num_classes, arch=arch: _vgg_cifar(arch, num_classes),
            description=f"torchvision {arch} features with a 512-512-classes head",
        )
        for arch in ("vgg16", "vgg16_bn")
    ),
    ModelSpec(
        name="mobilenet_v2_cifar",
        family="cifar",
        build=_mobilenet_v2_cifar,
        description="torchvision mobilenet_v2 with overall stride 8 (stem and stage 2 at stride 1)",
    ),
]

MODELS: dict[str, ModelSpec] = {spec.name: spec for spec in _SPECS}
MODEL_NAMES: tuple[str, ...] = tuple(sorted(MODELS))


def get_spec(name: str) -> ModelSpec:
    """The registry entry for `name`; NnperfError listing the known names otherwise."""
    try:
        return MODELS[name]
    except KeyError:
        raise NnperfError(f"model {name!r} is unknown; allowed: {', '.join(MODEL_NAMES)}") from None


def build_model(name: str, num_classes: int) -> nn.Module:
    """A freshly initialised model (train mode, random weights, on the current default device).

    Build under `with torch.device("meta"):` to get shapes without allocating weights.
    """
    spec = get_spec(name)
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise NnperfError(f"num_classes {num_classes!r} is invalid; allowed: an integer >= 1")
    model = spec.build(num_classes)
    model.train()
    return model


def input_size(name: str, dataset_image_size: int = 32) -> int:
    """Side length of the square images `name` is meant to train on.

    CIFAR-style models take the dataset's images as they are (32 for CIFAR); ImageNet-style
    models run at torchvision's native 224 (the timed runs resize to it).
    """
    spec = get_spec(name)
    return dataset_image_size if spec.family == "cifar" else IMAGENET_INPUT_SIZE


def count_parameters(model: nn.Module) -> tuple[int, int]:
    """(all parameters, trainable parameters) of `model`, counted once each."""
    params = list(model.parameters())
    return sum(p.numel() for p in params), sum(p.numel() for p in params if p.requires_grad)


__all__ = [
    "IMAGENET_INPUT_SIZE",
    "MODELS",
    "MODEL_NAMES",
    "ModelSpec",
    "build_model",
    "count_parameters",
    "get_spec",
    "input_size",
]
