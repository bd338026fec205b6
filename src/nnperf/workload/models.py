"""The networks nnperf can time, by name: its registry, torchvision's, timm's and the user's.

A name resolves to one of four sources (`nnperf.core.model_names` says which, without torch):
nnperf's registry (below), any torchvision classification model, a timm model
(`timm_<name>` or a `models:` mapping with `timm:`) and the user's own code (a mapping with
`factory:`). `build_model(name, num_classes, source)` and `input_size(name, ..., source)` are
the one entry point for all four: every later stage sees an `nn.Module` and its input size.
Building the non-registry ones is `nnperf.workload.model_sources`'.

Every registry model is built from torchvision's own builders with `weights=None` (random init;
pretrained weights are `build_pretrained`'s, below). Two families:

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

Transfer learning (`build_pretrained`): an ImageNet-style model starts from torchvision's
pretrained weights, read from a local file (`pretrained_path`, never downloaded) or torch
hub's cache, where a missing file is downloaded from torchvision's URL and refused unless its
SHA-256 starts with the hash its name carries, as `torch.hub.load_state_dict_from_url(...,
check_hash=True)` does (`ensure_weights_file`; the workflow does it in rule
`download_weights`, where Snakemake runs, since compute nodes are often offline); its
classifier head is then replaced by a freshly initialised one for the dataset's classes
(`replace_head`), and the rest can be frozen (`freeze_backbone`).

What this module is not: it does not train, count FLOPs (see `nnperf.workload.complexity`) or know
about datasets; `num_classes` is passed in.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import urllib.error
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torchvision
from torch import nn

from nnperf.core import model_names
from nnperf.core.errors import NnperfError
from nnperf.core.settings import ModelSource
from nnperf.workload import model_sources

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
    # The classifier layer (an nn.Linear, as a `get_submodule` path) that transfer learning
    # replaces: the last layer of torchvision's architecture.
    head: str


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


# torchvision's classifier layer per architecture family.
_HEADS = {"resnet": "fc", "vgg": "classifier.6", "mobilenet_v2": "classifier.1"}


def _head_of(arch: str) -> str:
    return next(head for prefix, head in _HEADS.items() if arch.startswith(prefix))


def _imagenet_spec(arch: str) -> ModelSpec:
    return ModelSpec(
        name=arch,
        family="imagenet",
        build=lambda num_classes: _torchvision(arch, num_classes),
        description=f"torchvision {arch}, unchanged",
        head=_head_of(arch),
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
            head=_head_of(arch),
        )
        for arch in ("resnet18", "resnet34", "resnet50")
    ),
    *(
        ModelSpec(
            name=f"{arch}_cifar",
            family="cifar",
            build=lambda num_classes, arch=arch: _vgg_cifar(arch, num_classes),
            description=f"torchvision {arch} features with a 512-512-classes head",
            head=_head_of(arch),
        )
        for arch in ("vgg16", "vgg16_bn")
    ),
    ModelSpec(
        name="mobilenet_v2_cifar",
        family="cifar",
        build=_mobilenet_v2_cifar,
        description="torchvision mobilenet_v2 with overall stride 8 (stem and stage 2 at stride 1)",
        head=_head_of("mobilenet_v2"),
    ),
]

MODELS: dict[str, ModelSpec] = {spec.name: spec for spec in _SPECS}
MODEL_NAMES: tuple[str, ...] = tuple(sorted(MODELS))


def get_spec(name: str) -> ModelSpec:
    """The registry entry for `name`; NnperfError listing the known names otherwise."""
    try:
        return MODELS[name]
    except KeyError:
        raise model_names.unknown_model(name) from None


def check_model(name: str, source: ModelSource | None = None) -> str:
    """The kind of model `name` (`model_names.KINDS`), or one NnperfError line for a name no
    source knows, a missing factory, timm absent: what fails before any data is read."""
    return model_names.check_model(name, source, where="model")


def build_model(
    name: str,
    num_classes: int,
    source: ModelSource | None = None,
    input_size: int | None = None,
) -> nn.Module:
    """A freshly initialised model (train mode, random weights, on the current default device).

    `source`: the study's `models:` mapping of `name`, where it has one. `input_size`: the
    side it will be fed, for the models that fix it when built (ViTs) and to check a user
    factory's output on; None: the model's own.
    Build under `with torch.device("meta"):` to get shapes without allocating weights.
    """
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise NnperfError(f"num_classes {num_classes!r} is invalid; allowed: an integer >= 1")
    try:
        model = _build(name, num_classes, source, input_size)
    except NotImplementedError:
        # A builder that computes its layout with torch ops (torchvision's RegNets) cannot
        # run under the meta device: build on the CPU, then move to meta.
        if torch.empty(0).device.type != "meta":
            raise
        with torch.device("cpu"):
            model = _build(name, num_classes, source, input_size).to("meta")
    model.train()
    return model


def _build(
    name: str, num_classes: int, source: ModelSource | None, input_size: int | None
) -> nn.Module:
    kind = model_names.kind_of(name, source)
    size = input_size or (source.input_size if source else None)
    if kind == "registry":
        model = get_spec(name).build(num_classes)
    elif kind == "torchvision":
        model = model_sources.build_torchvision(name, num_classes, size)
    elif kind == "timm":
        model = model_sources.build_timm(model_names.timm_name(name, source), num_classes, size)
    else:
        model = model_sources.build_factory(source, num_classes)
        if size:
            model_sources.check_output(source, num_classes, size)
    return model


def input_size(name: str, dataset_image_size: int = 32, source: ModelSource | None = None) -> int:
    """Side length of the square images `name` is meant to train on.

    The `models:` entry's `input_size` where it gives one. Otherwise: CIFAR-style models take
    the dataset's images as they are (32 for CIFAR); ImageNet-style registry models run at
    torchvision's native 224, other torchvision models at their weights' crop (`vit_b_16` 224,
    `efficientnet_b3` 300), timm models at their pretrained config's size (the timed runs
    resize to it); a user's factory at the dataset's image size.
    """
    if source is not None and source.input_size:
        return source.input_size
    kind = model_names.kind_of(name, source)
    if kind == "registry":
        return dataset_image_size if get_spec(name).family == "cifar" else IMAGENET_INPUT_SIZE
    if kind == "torchvision":
        if name not in model_names.torchvision_names():
            raise model_names.unknown_model(name)
        return model_sources.torchvision_input_size(name)
    if kind == "timm":
        return model_sources.timm_input_size(model_names.timm_name(name, source))
    return dataset_image_size


def count_parameters(model: nn.Module) -> tuple[int, int]:
    """(all parameters, trainable parameters) of `model`, counted once each."""
    params = list(model.parameters())
    return sum(p.numel() for p in params), sum(p.numel() for p in params if p.requires_grad)


# --------------------------------------------------------------------------------------
# Transfer learning
# --------------------------------------------------------------------------------------

# torch.hub's pattern for the hash prefix in a weights file name (`resnet50-11ad3fa6.pth`):
# the first hex digits of the file's SHA-256 (torch.hub.HASH_REGEX).
_HASH_IN_NAME = re.compile(r"-([a-f0-9]*)\.")


def pretrained_weights(name: str, weights: str) -> torchvision.models.WeightsEnum:
    """torchvision's weights entry for model `name`: `weights` is one of its names
    (`IMAGENET1K_V1`, `DEFAULT`, ...) or the qualified `ResNet50_Weights.IMAGENET1K_V2`.

    Only torchvision's own models have pretrained weights here: the ImageNet-style registry
    models and every other torchvision classifier (the CIFAR forms change the layers the
    weights were learnt for; timm's and the user's models are not torchvision's).
    """
    spec = MODELS.get(name)
    kind = model_names.kind_of(name)
    if (spec is not None and spec.family != "imagenet") or kind not in ("registry", "torchvision"):
        usable = ", ".join(n for n in MODEL_NAMES if MODELS[n].family == "imagenet")
        raise NnperfError(
            f"model {name!r} has no pretrained weights (its layers differ from torchvision's);"
            f" allowed with convergence.pretrained: {usable} or another torchvision classifier"
        )
    if spec is None and name not in model_names.torchvision_names():
        raise model_names.unknown_model(name)
    enum = torchvision.models.get_model_weights(name)
    prefix, _, member = weights.rpartition(".")
    if prefix not in ("", enum.__name__) or member not in enum.__members__:
        raise NnperfError(
            f"convergence.pretrained = {weights!r} is not a weights name of {name}; "
            f"allowed: {', '.join(enum.__members__)}"
        )
    return enum[member]


def weights_file_name(weights: torchvision.models.WeightsEnum) -> str:
    """The file name torch hub stores `weights` under: the last part of its URL."""
    return os.path.basename(urllib.parse.urlparse(weights.url).path)


def hub_cache_dir() -> Path:
    """torch hub's folder (`torch.hub.get_dir()`: $TORCH_HOME/hub, by default
    ~/.cache/torch/hub); its weights files are under checkpoints/."""
    return Path(torch.hub.get_dir())


def hub_weights_path(weights: torchvision.models.WeightsEnum) -> Path:
    """Where torch hub caches `weights` (what `torchvision` would download them to):
    `torch.hub.get_dir()/checkpoints/<file name>`, i.e. under $TORCH_HOME/hub."""
    return hub_cache_dir() / "checkpoints" / weights_file_name(weights)


def _qualified(weights: torchvision.models.WeightsEnum) -> str:
    return f"{type(weights).__name__}.{weights.name}"


def find_weights_file(
    weights: torchvision.models.WeightsEnum, path: str | None = None, download: bool = True
) -> Path:
    """The local file holding `weights`: `path` when given (never downloaded: it is the
    user's copy, e.g. on an offline machine), else torch hub's cached copy, downloaded
    there when absent and `download` (`ensure_weights_file`).

    A missing file is one line naming the path looked at and the URL to fetch it from.
    """
    if path is not None:
        expected = Path(path).expanduser()
        if expected.is_file():
            return expected
        raise NnperfError(
            f"{expected}: pretrained weights {_qualified(weights)} not found "
            f"(convergence.pretrained_path); put the file there (it is {weights.url}) or set "
            "pretrained_path to null to use torch hub's cache"
        )
    expected = hub_weights_path(weights)
    if expected.is_file():
        return expected
    if not download:
        raise NnperfError(
            f"{expected}: pretrained weights {_qualified(weights)} not found (torch hub's "
            f"cache); rule download_weights fetches {weights.url} there, or copy it there"
        )
    return ensure_weights_file(weights.url, expected)


def published_hash_prefix(url_or_name: str) -> str | None:
    """The hex digits after the last `-` of a weights file's name (`resnet50-0676ba61.pth`:
    `0676ba61`), the start of the file's SHA-256 (torch.hub.HASH_REGEX); None without."""
    match = _HASH_IN_NAME.search(os.path.basename(urllib.parse.urlparse(url_or_name).path))
    return match[1] if match and match[1] else None


def ensure_weights_file(url: str, destination: str | os.PathLike) -> Path:
    """`destination`, downloaded from `url` when absent, with torch hub's check: the file's
    SHA-256 must start with the hash prefix in its name (`published_hash_prefix`).

    `torch.hub.download_url_to_file` writes a temporary file beside `destination` and
    moves it into place only once checked, so a failed or refused download leaves nothing.
    Offline, or with a corrupt download, it is one line naming where to put the file and the
    URL to fetch it from.
    """
    destination = Path(destination)
    if destination.is_file():
        return destination
    prefix = published_hash_prefix(url)
    destination.parent.mkdir(parents=True, exist_ok=True)
    try:
        torch.hub.download_url_to_file(url, str(destination), hash_prefix=prefix, progress=False)
    except RuntimeError as exc:
        # torch.hub: 'invalid hash value (expected "0676ba61", got "<sha256>")'.
        got = re.search(r'got "([0-9a-f]+)"', str(exc))
        raise NnperfError(
            f"{url}: downloaded file refused, its SHA-256 "
            f"{got[1][:16] if got else '?'}... does not start with {prefix}, the hash in its "
            f"name (a corrupt or replaced file); nothing was written to {destination}"
        ) from None
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
        reason = " ".join(str(getattr(exc, "reason", None) or exc).split())[:160]
        if isinstance(exc, urllib.error.HTTPError):
            reason = f"HTTP {exc.code} {reason}"
        raise NnperfError(
            f"{destination}: weights file not found and its download failed ({reason}); "
            f"fetch {url} on a machine with network access and put it there"
        ) from None
    return destination


def weights_input(name: str, weights: str, path: str | None = None) -> Path:
    """The file a training run of model `name` with `weights` reads, as the workflow asks
    for it while the DAG is built: `path` (it must exist; nothing makes it) or torch hub's
    cache path (rule `download_weights` makes it when absent)."""
    entry = pretrained_weights(name, weights)
    if path is not None:
        return find_weights_file(entry, path, download=False)
    return hub_weights_path(entry)


def weights_urls(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """URL by weights file name of every (model, weights name) in `pairs`: what rule
    `download_weights` fetches for a file torch hub's cache lacks."""
    entries = [pretrained_weights(name, weights) for name, weights in pairs]
    return {weights_file_name(entry): entry.url for entry in entries}


def load_state_dict_file(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """A state dict from a weights file, read with `torch.load(weights_only=True)` on the
    CPU, or one NnperfError line naming the file."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any failure to unpickle means a bad file
        detail = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
        raise NnperfError(
            f"{path}: not a readable weights file ({detail}); allowed: a state_dict saved with "
            "torch.save, like torchvision's downloads"
        ) from None
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise NnperfError(
            f"{path}: holds a {type(state).__name__}, not a state_dict; allowed: a mapping of "
            "parameter names to tensors, like torchvision's weights files"
        )
    return state


def file_sha256(path: str | os.PathLike) -> str:
    """The SHA-256 of a file, read in 1 MiB blocks (weights files are hundreds of MB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def state_dict_mismatches(
    expected: dict[str, torch.Tensor], given: dict[str, torch.Tensor]
) -> list[str]:
    """What keeps `given` from loading where `expected` is: missing and unexpected names,
    and tensors of another shape (which `load_state_dict` refuses even when not strict)."""
    problems = [f"missing {key}" for key in expected if key not in given]
    problems += [f"unexpected {key}" for key in given if key not in expected]
    problems += [
        f"{key} is {tuple(given[key].shape)}, expected {tuple(value.shape)}"
        for key, value in expected.items()
        if key in given and given[key].shape != value.shape
    ]
    return problems


def head_of(name: str, model: nn.Module) -> str:
    """The classifier layer transfer learning replaces: the registry's named head, else the
    last `nn.Linear` of `model` (torchvision's classifiers end in one, except SqueezeNet)."""
    if name in MODELS:
        return MODELS[name].head
    linears = [n for n, module in model.named_modules() if isinstance(module, nn.Linear)]
    if not linears:
        raise NnperfError(
            f"model {name!r} ends in no Linear classifier; allowed with pretrained weights: a "
            "model whose last layer is an nn.Linear"
        )
    return linears[-1]


def replace_head(model: nn.Module, head: str, num_classes: int) -> nn.Linear:
    """Put a fresh `nn.Linear(in_features, num_classes)` (PyTorch's default init, as
    torchvision's ResNet head has) at `head` in `model`; returns it."""
    old = model.get_submodule(head)
    if not isinstance(old, nn.Linear):
        raise NnperfError(f"layer {head!r} is a {type(old).__name__}, not the Linear classifier")
    new = nn.Linear(old.in_features, num_classes, bias=old.bias is not None)
    model.set_submodule(head, new)
    return new


def freeze_backbone(model: nn.Module, head: str) -> list[str]:
    """Stop gradients for every parameter outside `head`; returns the trainable names.

    Only `requires_grad` changes: batch-norm layers keep updating their running statistics
    in train mode, as in torchvision's fine-tuning tutorial (the new data's statistics),
    and an optimizer built from the trainable parameters leaves the rest untouched.
    """
    trainable = []
    for name, parameter in model.named_parameters():
        in_head = name.startswith(head + ".")
        parameter.requires_grad_(in_head)
        if in_head:
            trainable.append(name)
    return trainable


def build_pretrained(
    name: str,
    num_classes: int,
    weights: str,
    path: str | None = None,
    freeze: bool = False,
    download: bool = True,
) -> tuple[nn.Module, dict[str, Any]]:
    """Model `name` with torchvision's pretrained `weights` (read from `path`, or torch hub's
    cache, downloaded there when absent and `download`) and a fresh `num_classes` head,
    backbone frozen when `freeze`; and a record of where the weights came from (for the
    run's summary).

    The record says whether the file's SHA-256 starts with the hash its published name
    carries (`resnet50-11ad3fa6.pth`), as torch hub checks on download; a file that does not
    still loads (a local copy may be renamed or re-saved), and the record says so.
    """
    entry = pretrained_weights(name, weights)
    file = find_weights_file(entry, path, download)
    state = load_state_dict_file(file)
    # The registry names its head; for another torchvision model it is found in the model
    # built for the weights' own classes.
    classes = len(entry.meta.get("categories") or ()) or 1000
    spec = MODELS.get(name)
    if spec is not None:
        head_weight = state.get(f"{spec.head}.weight")
        if head_weight is None or head_weight.ndim != 2:
            raise NnperfError(
                f"{file}: no classifier weight {spec.head}.weight in it; allowed: the "
                f"state_dict of torchvision's {name}"
            )
        classes = int(head_weight.shape[0])
    model = _torchvision(name, classes, **model_sources.torchvision_kwargs(name, None))
    head = head_of(name, model)
    problems = state_dict_mismatches(model.state_dict(), state)
    if problems:
        raise NnperfError(
            f"{file}: not the weights of torchvision's {name} ({'; '.join(problems[:3])}"
            f"{f'; {len(problems) - 3} more' if len(problems) > 3 else ''})"
        )
    model.load_state_dict(state)
    replace_head(model, head, num_classes)
    trainable = freeze_backbone(model, head) if freeze else None
    model.train()
    digest = file_sha256(file)
    published = published_hash_prefix(weights_file_name(entry))
    record = {
        "weights": f"{type(entry).__name__}.{entry.name}",
        "file": str(file),
        "sha256": digest,
        "sha256_matches_published_name": bool(published and digest.startswith(published)),
        "url": entry.url,
        "head": head,
        "frozen_backbone": bool(freeze),
        "trainable_parameter_tensors": len(trainable) if trainable is not None else None,
    }
    return model, record


__all__ = [
    "IMAGENET_INPUT_SIZE",
    "MODELS",
    "MODEL_NAMES",
    "ModelSpec",
    "build_model",
    "build_pretrained",
    "check_model",
    "head_of",
    "count_parameters",
    "ensure_weights_file",
    "file_sha256",
    "find_weights_file",
    "freeze_backbone",
    "get_spec",
    "hub_cache_dir",
    "hub_weights_path",
    "input_size",
    "load_state_dict_file",
    "pretrained_weights",
    "published_hash_prefix",
    "replace_head",
    "state_dict_mismatches",
    "weights_file_name",
    "weights_input",
    "weights_urls",
]
