"""Building the models that are not nnperf's own: torchvision's, timm's and the user's.

`nnperf.workload.models.build_model` dispatches here by the model's kind
(`nnperf.core.model_names.kind_of`); every builder returns a train-mode `nn.Module` whose
output is `(batch, num_classes)` logits, and `native_input_size` says at what side it is
meant to run. What each source needs:

* torchvision: `torchvision.models.get_model(name, weights=None, num_classes=...)`; its size
  is the crop of its default weights' evaluation transforms (`efficientnet_b3` 300,
  `vit_b_16` 224), 224 without. GoogLeNet and Inception v3 are built without their
  auxiliary classifiers (in train mode those return a tuple of logits, which no training
  step here takes). ViT and MaxViT fix their input size at build time: another size is
  passed to them (`image_size`, `input_size`).
* timm: `timm.create_model(name, pretrained=False, num_classes=...)`, nothing downloaded; the
  size is its pretrained config's `input_size`, and a model with a fixed input size (timm's
  ViTs) is built for the size it is fed (`img_size`).
* the user's factory: the file is loaded as a module (or the module imported), the callable
  called with `num_classes=`. A factory that raises is one line with its last line; one that
  returns no `nn.Module`, or a model whose output is not `(batch, num_classes)`, is one line
  too: the output is checked by one forward pass on the `meta` device (shapes only, no
  arithmetic), skipped where the model has an op with no meta kernel.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import importlib.util
import sys
import traceback
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from nnperf.core import model_names
from nnperf.core.errors import NnperfError
from nnperf.core.settings import ModelSource

# torchvision's native classification resolution (the crop its reference recipes train at).
DEFAULT_INPUT_SIZE = 224

# torchvision models whose builder fixes the image side, and the keyword that sets it.
_TORCHVISION_SIZE_KEYWORD = {"vit_": "image_size", "maxvit_": "input_size"}
# torchvision models with auxiliary classifiers (a tuple of logits in train mode).
_TORCHVISION_AUX = ("googlenet", "inception_v3")
# Batch of the meta forward pass that checks a factory's output (2: batch norm in train mode
# refuses a batch of one at 1x1).
_CHECK_BATCH = 2


def _last_line(exc: BaseException, path: Path | None = None) -> str:
    """`Type: message` of an exception, with the line of `path` (the user's file) that it
    came through last, or the innermost frame's."""
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if path is not None and Path(f.filename) == path.resolve()]
    frame = (mine or frames or [None])[-1]
    message = " ".join(str(exc).split())[:200]
    where = f" ({Path(frame.filename).name}, line {frame.lineno})" if frame else ""
    return f"{type(exc).__name__}: {message}{where}".replace(": (", " (")


# --- torchvision -----------------------------------------------------------------------------


def torchvision_input_size(name: str) -> int:
    """The side torchvision evaluates `name`'s default weights at (its crop), or 224."""
    import torchvision

    try:
        weights = torchvision.models.get_model_weights(name).DEFAULT
    except (ValueError, KeyError, AttributeError):
        return DEFAULT_INPUT_SIZE
    crop = getattr(weights.transforms, "keywords", {}).get("crop_size")
    if isinstance(crop, (list, tuple)):
        crop = crop[0]
    return int(crop) if crop else DEFAULT_INPUT_SIZE


def torchvision_kwargs(name: str, input_size: int | None) -> dict:
    """What `name`'s builder needs beyond `num_classes` to train at `input_size`."""
    kwargs: dict = {}
    if name in _TORCHVISION_AUX:
        kwargs.update(aux_logits=False, init_weights=True)
    for prefix, keyword in _TORCHVISION_SIZE_KEYWORD.items():
        if name.startswith(prefix) and input_size and input_size != torchvision_input_size(name):
            kwargs[keyword] = input_size
    return kwargs


def build_torchvision(name: str, num_classes: int, input_size: int | None = None) -> nn.Module:
    import torchvision

    if name not in model_names.torchvision_names():
        raise model_names.unknown_model(name)
    kwargs = torchvision_kwargs(name, input_size)
    return torchvision.models.get_model(name, weights=None, num_classes=num_classes, **kwargs)


# --- timm ------------------------------------------------------------------------------------


def _timm():
    try:
        import timm
    except ImportError:
        raise NnperfError(
            f"timm is not installed here, and a timm model needs it; {model_names.TIMM_INSTALL}"
        ) from None
    return timm


def _timm_config(name: str):
    timm = _timm()
    config = timm.models.get_pretrained_cfg(name)
    if config is None and name.split(".", 1)[0] not in timm.list_models():
        close = difflib.get_close_matches(name, model_names.timm_names(), n=4, cutoff=0.6)
        hint = f"closest: {', '.join(close)}" if close else "see `nnperf models --timm`"
        raise NnperfError(f"timm has no model {name!r} ({hint})")
    return config


def timm_input_size(name: str) -> int:
    """The side of timm's pretrained config's `input_size` for `name`, or 224."""
    config = _timm_config(name)
    size = getattr(config, "input_size", None)
    return int(size[-1]) if size else DEFAULT_INPUT_SIZE


def build_timm(name: str, num_classes: int, input_size: int | None = None) -> nn.Module:
    timm = _timm()
    config = _timm_config(name)
    kwargs = {}
    if input_size and getattr(config, "fixed_input_size", False):
        kwargs["img_size"] = input_size
    try:
        return timm.create_model(name, pretrained=False, num_classes=num_classes, **kwargs)
    except RuntimeError as exc:
        raise NnperfError(f"timm model {name!r} cannot be built: {_last_line(exc)}") from None


# --- the user's factory -------------------------------------------------------------------------


@functools.cache
def _load_factory(spec: str, name: str) -> tuple[Callable, Path]:
    """The factory callable of `spec` and its source file; the file is loaded once per
    process (a module of its own name, so two factories' files never collide)."""
    target, attribute = model_names.split_factory(spec, name)
    path = model_names.factory_file(spec, name)
    try:
        if model_names.is_file_target(target):
            module_name = f"nnperf_user_model_{name}"
            loader = importlib.util.spec_from_file_location(module_name, path)
            module = importlib.util.module_from_spec(loader)
            sys.modules[module_name] = module
            loader.loader.exec_module(module)
        else:
            module = importlib.import_module(target)
    except Exception as exc:  # noqa: BLE001 - the user's module: any failure is one line
        raise NnperfError(
            f"model {name!r}: loading factory {spec} failed: {_last_line(exc, path)}"
        ) from None
    factory = getattr(module, attribute, None)
    if not callable(factory):
        raise NnperfError(
            f"model {name!r}: {path} defines no callable {attribute!r}; allowed: a function or "
            "class taking num_classes="
        )
    return factory, path


def build_factory(source: ModelSource, num_classes: int) -> nn.Module:
    """The user's model: `factory(num_classes=num_classes)`, one line when it raises or
    returns something other than an `nn.Module`."""
    factory, path = _load_factory(source.factory, source.name)
    try:
        model = factory(num_classes=num_classes)
    except Exception as exc:  # noqa: BLE001 - the user's code: any failure is one line
        raise NnperfError(
            f"model {source.name!r}: factory {source.factory} raised {_last_line(exc, path)}"
        ) from None
    if not isinstance(model, nn.Module):
        raise NnperfError(
            f"model {source.name!r}: factory {source.factory} returned a "
            f"{type(model).__name__}; allowed: a torch.nn.Module"
        )
    return model


@functools.cache
def check_output(source: ModelSource, num_classes: int, input_size: int) -> None:
    """Refuse, with one line, a factory model whose output on a batch of 3 x `input_size`^2
    images is not `(batch, num_classes)` logits; checked once per process on the meta
    device. A model with an op that has no meta kernel is not checked here (its first real
    step fails instead, with torch's message)."""
    with torch.device("meta"):
        model = build_factory(source, num_classes).train()
        images = torch.zeros(_CHECK_BATCH, 3, input_size, input_size)
        try:
            output = model(images)
        except NotImplementedError:
            return
        except Exception as exc:  # noqa: BLE001 - the user's forward: any failure is one line
            _, path = _load_factory(source.factory, source.name)
            raise NnperfError(
                f"model {source.name!r} cannot run on 3x{input_size}x{input_size} images: "
                f"{_last_line(exc, path)} (set input_size in its models entry)"
            ) from None
    shape = tuple(output.shape) if isinstance(output, torch.Tensor) else None
    if shape != (_CHECK_BATCH, num_classes):
        got = f"shape {shape}" if shape is not None else f"a {type(output).__name__}"
        raise NnperfError(
            f"model {source.name!r}: its output on a batch of {_CHECK_BATCH} images is {got}; "
            f"allowed: logits of shape (batch, num_classes) = ({_CHECK_BATCH}, {num_classes})"
        )
