"""What the FLOP counter counts, and what in a training step it could not.

`flop_counter()` is `torch.utils.flop_counter.FlopCounterMode` with two additions:

* Correction: torch's `conv_backward_flop` counts the weight gradient of a grouped
  convolution as if it were dense. It computes that term as `conv_flop_count(t(x),
  t(grad_out), ...)`, which multiplies the full input channels by the full output channels
  and never divides by `groups` (the docstring there says it "skips" groups), so the
  weight-gradient FLOPs of a depthwise conv come out `groups` times too high (torch 2.14.1,
  pinned by a test; MobileNetV2's training step counts 20x its forward instead of ~3x). The
  input-gradient term is right. `conv_backward_flops` replaces the formula through
  `custom_mapping`: both gradients of a convolution cost exactly its forward FLOPs, each
  counted only when autograd asks for it (`output_mask`).
* Attention on the CPU: scaled-dot-product attention on a real CPU runs
  `aten._scaled_dot_product_flash_attention_for_cpu` (and its backward), which torch's
  registry has no formula for; they get the formulas of the CUDA flash kernels, which take
  the same shapes. (On the `meta` device, where nnperf counts, SDPA runs its math form:
  `bmm`s that the registry counts.)

The census (`flop_coverage`) says how much of a step the count could have missed: every
aten op of one forward and backward pass is classed as

* `counted`: the counter has a formula for it (convolutions, matrix products, attention);
* `elementwise`: left at zero on purpose, its arithmetic is a few operations per element it
  reads or writes (torch's `pointwise` and `reduction` tags; views, whose outputs alias their
  inputs; and the families in `ELEMENTWISE_FAMILIES`: normalisation, pooling, softmax, losses,
  dropout, copies, creation, indexing, padding, resampling). The module docstring of
  `nnperf.workload.complexity` says why these are not counted: memory-bound, a few percent;
* `uncounted`: everything else, ops that may do arithmetic the count misses (an FFT, an RNN
  kernel, a custom op, an attention kernel without a formula).

`uncounted_share` is uncounted calls / (counted + uncounted) calls: of the step's ops that
do more than per-element arithmetic, the share the FLOPs leave out, by count of calls (the
census runs on the `meta` device, where nothing has a time; a call of an uncounted op can
weigh more or less than a convolution's, so the share says that something is missing and
roughly how much, and `uncounted_ops` names what).
"""

from __future__ import annotations

import collections
import math
from typing import Any

import torch
from torch import nn
from torch.utils import flop_counter as torch_flop_counter
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

_ATEN = torch.ops.aten

# Substrings of aten op names whose arithmetic is a few operations per element (see the
# module docstring); matched against the op's name without its `aten.` prefix.
ELEMENTWISE_FAMILIES = (
    "norm",
    "pool",
    "softmax",
    "dropout",
    "bernoulli",
    "rand",
    "loss",
    "embedding",
    "upsample",
    "grid_sampler",
    "pad",
    "copy",
    "clone",
    "cat",
    "stack",
    "fill",
    "zero",
    "empty",
    "ones",
    "full",
    "arange",
    "scalar",
    "index",
    "gather",
    "scatter",
    "select",
    "slice",
    "split",
    "where",
    "masked",
    "expand",
    "repeat",
    "roll",
    "flip",
    "view",
    "detach",
    "alias",
    "lift",
    "unbind",
    "resize",
    "contiguous",
    # Activations torch does not tag pointwise, and their gradients.
    "relu",
    "elu",
    "silu",
    "mish",
    "sigmoid",
    "hardswish",
    "hardtanh",
    "tanh",
    "softplus",
    "threshold",
)
ELEMENTWISE_TAGS = (torch.Tag.pointwise, torch.Tag.reduction, torch.Tag.view_copy)


def conv_backward_flops(
    grad_out_shape,
    x_shape,
    w_shape,
    _bias,
    _stride,
    _padding,
    _dilation,
    transposed,
    _output_padding,
    _groups,
    output_mask,
    out_shape=None,
    **kwargs,
) -> int:
    """FLOPs of `aten.convolution_backward`, right for grouped and depthwise convolutions.

    Each of the input gradient and the weight gradient is a convolution with the same
    multiply-adds as the forward pass: batch x sliding positions x prod(weight shape), where
    the weight shape already holds in_channels / groups and the positions are the output's
    (the input's for a transposed convolution). Takes shapes, as FlopCounterMode's formulas do.
    """
    batch = grad_out_shape[0]
    positions = (x_shape if transposed else grad_out_shape)[2:]
    forward_flops = 2 * batch * math.prod(positions) * math.prod(w_shape)
    return forward_flops * (int(bool(output_mask[0])) + int(bool(output_mask[1])))


def _custom_mapping() -> dict:
    registry = torch_flop_counter.flop_registry
    mapping = {_ATEN.convolution_backward: conv_backward_flops}
    cpu_attention = {
        "_scaled_dot_product_flash_attention_for_cpu": _ATEN._scaled_dot_product_flash_attention,
        "_scaled_dot_product_flash_attention_for_cpu_backward": (
            _ATEN._scaled_dot_product_flash_attention_backward
        ),
    }
    for name, like in cpu_attention.items():
        if hasattr(_ATEN, name) and like in registry:
            mapping[getattr(_ATEN, name)] = registry[like]
    return mapping


def flop_counter() -> FlopCounterMode:
    """A FlopCounterMode with the grouped-convolution backward formula corrected and the
    CPU attention kernels counted."""
    return FlopCounterMode(display=False, custom_mapping=_custom_mapping())


def op_class(op, counted: set) -> str:
    """`counted`, `elementwise` or `uncounted` (module docstring) for one aten overload."""
    packet = getattr(op, "overloadpacket", op)
    if packet in counted:
        return "counted"
    if any(tag in ELEMENTWISE_TAGS for tag in getattr(op, "tags", ())):
        return "elementwise"
    schema = getattr(op, "_schema", None)
    returns = schema.returns if schema is not None else []
    if returns and all(r.alias_info is not None for r in returns):
        return "elementwise"  # a view (or an in-place op returning its input)
    name = str(packet).removeprefix("aten.")
    if any(family in name for family in ELEMENTWISE_FAMILIES):
        return "elementwise"
    if name.endswith("_backward") and _pointwise(name.removesuffix("_backward")):
        return "elementwise"  # hardswish_backward: the gradient of a pointwise op
    return "uncounted"


def _pointwise(name: str) -> bool:
    """Whether aten op `name` has an overload tagged pointwise."""
    packet = getattr(_ATEN, name, None)
    overloads = [getattr(packet, o) for o in packet.overloads()] if packet is not None else []
    return any(torch.Tag.pointwise in overload.tags for overload in overloads)


class _Census(TorchDispatchMode):
    """Counts the calls of every op that reaches dispatch."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls[func] += 1
        return func(*args, **(kwargs or {}))


def flop_coverage(model: nn.Module, input_shape: tuple[int, ...], batch_size: int = 2) -> dict:
    """The census of one forward and backward pass of `model` (train mode) on a batch of
    `input_shape` images, on the model's device (the meta device costs no arithmetic).

    Returns `counted_calls`, `elementwise_calls`, `uncounted_calls`, `uncounted_share`
    (module docstring) and `uncounted_ops` ({aten op name: calls}, most called first).
    """
    device = next(iter([*model.parameters(), *model.buffers()]), torch.empty(0)).device
    counted = set(flop_counter().flop_registry)
    census = _Census()
    images = torch.zeros((batch_size, *input_shape), device=device)
    targets = torch.zeros(batch_size, dtype=torch.long, device=device)
    try:
        with census:
            logits = model(images)
            nn.functional.cross_entropy(logits, targets).backward()
    finally:
        model.zero_grad(set_to_none=True)
    totals: dict[str, int] = collections.Counter()
    uncounted: dict[str, int] = collections.Counter()
    for op, calls in census.calls.items():
        kind = op_class(op, counted)
        totals[kind] += calls
        if kind == "uncounted":
            uncounted[str(getattr(op, "overloadpacket", op))] += calls
    considered = totals["counted"] + totals["uncounted"]
    return {
        "counted_calls": totals["counted"],
        "elementwise_calls": totals["elementwise"],
        "uncounted_calls": totals["uncounted"],
        "uncounted_share": totals["uncounted"] / considered if considered else 0.0,
        "uncounted_ops": dict(sorted(uncounted.items(), key=lambda item: -item[1])),
    }


__all__ = ["conv_backward_flops", "flop_counter", "flop_coverage", "op_class"]

