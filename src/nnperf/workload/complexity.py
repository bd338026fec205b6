"""What one training step of a network costs on paper: FLOPs, saved activations, bytes moved.

`estimate(model, input_shape)` runs one forward and one backward pass (best on the `meta`
device: shapes only, no arithmetic, well under a second even for VGG-16 at 224x224) and
returns a `Complexity`: parameter counts, FLOPs per image, the bytes autograd saves for
backward, the weight/gradient/optimizer-state bytes, a per-layer table and the algorithmic
memory traffic per precision. The analytic roofline (CPU, MPS) divides these FLOPs and bytes
by measured step times. `write_complexity(request, ...)` is rule `complexity`: it builds the
named model on the `meta` device, counts it with the timed runs' optimiser settings and
writes the JSON document and the per-layer CSV. Nothing here times anything.

FLOPs
-----
Counted by `torch.utils.flop_counter.FlopCounterMode` on the aten ops that run: convolutions
and matrix products, 2 FLOPs per multiply-add (so these are FLOPs, not MACs: torchvision
ResNet-18 at 224x224 is 1.814 GMAC = 3.628 GFLOP forward). Batch norm, activations, pooling
and the optimizer are not counted (they are a few percent of the FLOPs and are memory-bound;
the traffic below covers them). Each FLOP is attributed to the leaf module whose forward
call, or whose autograd nodes in backward, ran it.

The counter and its corrections (grouped-convolution backward, attention on the CPU) are
`nnperf.workload.flop_counting`'s, as is the census of the step's ops that it has no formula
for: the document's `flop_coverage` says which share of the compute ops the FLOPs leave out
(zero for convolutional networks and for torchvision's and timm's ViTs; a user's FFT or RNN
is not counted, and the report says so beside the FLOPs).

Saved activations
-----------------
Measured, not modelled: `torch.autograd.graph.saved_tensors_hooks` sees every tensor autograd
keeps for backward during the forward pass. Tensors are deduplicated by storage (an in-place
ReLU and the next convolution save the same storage once) and counted at their storage's
size. Storages of parameters and buffers are weights, not activations: they are left out
here and counted in `weight_bytes`. The network input counts (the first layer keeps it to
compute its weight gradient). Measured at two batch sizes, the bytes split exactly into
`fixed + B * per_image`; the fixed part is per-channel statistics (batch norm's saved mean
and inverse std).

Algorithmic memory traffic (the no-reuse model)
-----------------------------------------------
Bytes one training step would move between memory and the compute units if no layer reused
anything from cache, summed per leaf module (one row of the per-layer table) plus the
optimizer. With `a` bytes per activation element, `w` bytes per weight as the layer computes
with it and P the layer's parameters (times `calls` where a module runs twice):

* forward: read the inputs and the weights, write the outputs; batch-norm running statistics
  (buffers) are read and written once.
* backward: read the saved tensors, the weights (only when a gradient for the input is
  needed) and the output gradient; write the input gradient (not for the network input) and
  the weight gradient.
* optimizer (fp32, after `zero_grad(set_to_none=True)`): read weights, gradients and k state
  buffers, write weights and the k buffers: `4 * P_trainable * (3 + 2k)` bytes; k = 1 for SGD
  with momentum, 0 without, 2 for Adam/AdamW.
* precisions: fp32 and tf32 move the same bytes (a = w = 4; TF32 changes the arithmetic,
  not the storage). fp16 and bf16 mean autocast: activations, saved tensors and gradients of
  activations are 2 bytes (floating-point ones; max-pool indices and dropout masks keep their
  size); convolution and linear layers cast their fp32 master weights to 16 bits once per
  step (read 4P, write 2P), compute with the copy (w = 2) and cast the weight gradient back
  (read 2P, write 4P); other layers (batch norm) keep fp32 parameters; the optimizer is fp32.

Everything that does not grow with the batch is `fixed_bytes`; the rest is
`per_image_bytes`, so a step at batch B moves `fixed_bytes + B * per_image_bytes`. Ops
outside leaf modules (residual additions, `torch.flatten`) are not in the table and not in
the traffic: they add a few percent for ResNets. The loss and the data loading are left out.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch
from torch import nn

from nnperf.core import files, model_names
from nnperf.core.contract import ComplexityRequest, TrainingSettings
from nnperf.core.errors import NnperfError
from nnperf.core.vocab import OPTIMIZERS, PRECISIONS
from nnperf.workload import models
from nnperf.workload import datasets

# conv_backward_flops and flop_counter are named here too: where the counter was first defined.
from nnperf.workload.flop_counting import (  # noqa: F401
    conv_backward_flops,
    flop_counter,
    flop_coverage,
)

# Bytes per element of the fp32 master copy (weights, gradients, optimizer state).
FP32_BYTES = 4
# Bytes per element of activations and of autocast's weight copies in fp16/bf16.
HALF_BYTES = 2

# Bytes per floating-point activation element by precision (autocast for fp16/bf16).
ACTIVATION_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2}

# State tensors per parameter that each optimizer of `vocab.OPTIMIZERS` keeps (torch.optim):
# SGD's momentum buffer, Adam's exp_avg and exp_avg_sq. SGD with momentum 0 keeps none.
OPTIMIZER_STATE_BUFFERS = {"sgd": 1, "adam": 2}

# Layers autocast runs in 16 bits (torch.amp's "lower precision" op list): their weights are
# cast per step. Batch norm and the rest keep fp32 parameters.
AUTOCAST_16BIT_TYPES = (nn.modules.conv._ConvNd, nn.Linear)

# Modules that do no work (return their input or a view of it): no row, no traffic.
NO_OP_TYPES = (nn.Identity, nn.Flatten, nn.Unflatten)

# Two batch sizes to separate per-image from fixed quantities; both >= 2 so batch norm in
# train mode accepts 1x1 feature maps.
COUNT_BATCH_SIZES = (2, 4)

OUTSIDE_LEAVES = "(outside leaf modules)"

LAYER_COLUMNS = (
    "layer",
    "type",
    "calls",
    "input_shape",
    "output_shape",
    "params",
    "trainable_params",
    "buffer_bytes",
    "autocast_16bit",
    "input_requires_grad",
    "forward_flops_per_image",
    "backward_flops_per_image",
    "input_bytes_per_image",
    "activation_bytes_per_image",
    "saved_activation_bytes_per_image",
    "saved_activation_float_bytes_per_image",
    "saved_activation_unique_bytes_per_image",
    "saved_activation_fixed_bytes",
)


def optimizer_state_buffers(optimizer: str, momentum: float = TrainingSettings.momentum) -> int:
    """State tensors per parameter for `optimizer` (SGD without momentum keeps none)."""
    if optimizer not in OPTIMIZER_STATE_BUFFERS:
        raise NnperfError(f"optimizer {optimizer!r} is unknown; allowed: {', '.join(OPTIMIZERS)}")
    if optimizer == "sgd" and momentum == 0:
        return 0
    return OPTIMIZER_STATE_BUFFERS[optimizer]


@dataclass
class Complexity:
    """Per-image costs of one training step of one model at one input shape."""

    input_shape: tuple[int, ...]
    num_classes: int
    params: int
    trainable_params: int
    forward_flops_per_image: int
    backward_flops_per_image: int
    saved_activation_bytes_per_image: int
    saved_activation_fixed_bytes: int
    weight_bytes: int
    gradient_bytes: int
    optimizer: str
    optimizer_state_buffers: int
    optimizer_state_bytes: int
    traffic: dict[str, dict[str, int]]
    layers: pd.DataFrame = field(repr=False)

    @property
    def train_step_flops_per_image(self) -> int:
        return self.forward_flops_per_image + self.backward_flops_per_image

    def to_dict(self) -> dict[str, Any]:
        """The JSON document's body (contract keys; `layers` goes to its own CSV)."""
        return {
            "num_classes": self.num_classes,
            "input_shape": list(self.input_shape),
            "params": self.params,
            "trainable_params": self.trainable_params,
            "forward_flops_per_image": self.forward_flops_per_image,
            "backward_flops_per_image": self.backward_flops_per_image,
            "train_step_flops_per_image": self.train_step_flops_per_image,
            "saved_activation_bytes_per_image": self.saved_activation_bytes_per_image,
            "saved_activation_fixed_bytes": self.saved_activation_fixed_bytes,
            "weight_bytes": self.weight_bytes,
            "gradient_bytes": self.gradient_bytes,
            "optimizer": self.optimizer,
            "optimizer_state_buffers": self.optimizer_state_buffers,
            "optimizer_state_bytes": self.optimizer_state_bytes,
            "traffic": self.traffic,
            # torch.utils.flop_counter.FlopCounterMode, with the grouped-conv backward
            # counted by nnperf.workload.flop_counting.conv_backward_flops.
            "flop_counter": "flop_counter_mode",
            "grouped_conv_backward_corrected": True,
        }


@dataclass
class _LayerRecord:
    """What one pass observed for one leaf module (totals over the batch)."""

    type: str
    calls: int = 0
    input_shape: str = ""
    output_shape: str = ""
    input_requires_grad: bool = False
    input_bytes: int = 0
    output_bytes: int = 0
    saved_bytes: int = 0
    saved_float_bytes: int = 0
    saved_unique_bytes: int = 0
    forward_flops: int = 0
    backward_flops: int = 0


def _tensors(value) -> list[torch.Tensor]:
    """The tensors in a module's inputs or outputs (a tensor, or nested tuples/lists/dicts)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors(item)]
    return []


def _shape_per_image(tensors: list[torch.Tensor]) -> str:
    return ";".join("x".join(str(d) for d in t.shape[1:]) for t in tensors)


def _storage_key(tensor: torch.Tensor) -> int:
    # The StorageImpl's address: shared by all views of one storage, on CPU, CUDA and meta.
    # data_ptr() cannot serve: it is 0 for every meta tensor.
    return tensor.untyped_storage()._cdata


def _leaf_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(row name, module) of every leaf module that does work."""
    leaves = []
    for name, module in model.named_modules():
        if next(module.children(), None) is None and not isinstance(module, NO_OP_TYPES):
            leaves.append((name or type(module).__name__, module))
    return leaves


def _nodes_between(outputs: list[torch.Tensor], stop: set) -> list:
    """Autograd nodes that produced `outputs` from the nodes in `stop` (a module's own nodes)."""
    found: list = []
    seen = set(stop)
    frontier = [t.grad_fn for t in outputs if t.grad_fn is not None]
    while frontier:
        node = frontier.pop()
        if node in seen or type(node).__name__ == "AccumulateGrad":
            continue
        seen.add(node)
        found.append(node)
        frontier.extend(fn for fn, _ in node.next_functions if fn is not None)
    return found


def _one_pass(model: nn.Module, input_shape: tuple[int, ...], batch_size: int):
    """Forward + backward at `batch_size`: {row name: _LayerRecord} in call order, logits width.

    FLOPs per layer are differences of the counter's global total: around each leaf call in
    forward, and around each autograd node that call created in backward. FlopCounterMode's
    own per-module table is not used for backward because its ModuleTracker leaves a module
    "entered" until the gradient of its *input* is complete: in a ResNet block the shortcut
    conv then also collects the main branch's backward FLOPs.
    """
    device = next(iter([*model.parameters(), *model.buffers()]), torch.empty(0)).device
    leaves = _leaf_modules(model)
    records = {name: _LayerRecord(type=type(module).__name__) for name, module in leaves}
    weight_storages = {_storage_key(t) for t in [*model.parameters(), *model.buffers()]}
    counter = flop_counter()
    # (layer, autograd nodes of its inputs, counter total at entry) per running leaf call.
    stack: list[tuple[str, set, int]] = []
    call_order: list[str] = []
    seen_storages: set[int] = set()
    saved_per_layer: dict[str, set[int]] = {}

    def pre_hook(name):
        def hook(_module, inputs):
            record = records[name]
            tensors = _tensors(inputs)
            if record.calls == 0:
                record.input_shape = _shape_per_image(tensors)
                call_order.append(name)
            record.input_bytes += sum(t.nbytes for t in tensors)
            record.input_requires_grad |= any(t.requires_grad for t in tensors)
            stop = {t.grad_fn for t in tensors if t.grad_fn is not None}
            stack.append((name, stop, counter.get_total_flops()))

        return hook

    def backward_hooks(record: _LayerRecord):
        entered: list[int] = []

        def before(_grad_outputs):
            entered.append(counter.get_total_flops())

        def after(_grad_inputs, _grad_outputs):
            record.backward_flops += counter.get_total_flops() - entered.pop()

        return before, after

    def post_hook(name):
        def hook(_module, _inputs, output):
            record = records[name]
            tensors = _tensors(output)
            if record.calls == 0:
                record.output_shape = _shape_per_image(tensors)
            record.output_bytes += sum(t.nbytes for t in tensors)
            record.calls += 1
            _, stop, flops_at_entry = stack.pop()
            record.forward_flops += counter.get_total_flops() - flops_at_entry
            for node in _nodes_between(tensors, stop):
                before, after = backward_hooks(record)
                node.register_prehook(before)
                node.register_hook(after)

        return hook

    outside = _LayerRecord(type="functional")

    def pack(tensor: torch.Tensor):
        key = _storage_key(tensor)
        if key in weight_storages:
            return tensor
        owner = stack[-1][0] if stack else OUTSIDE_LEAVES
        record = records[owner] if stack else outside
        nbytes = tensor.untyped_storage().nbytes()
        layer_keys = saved_per_layer.setdefault(owner, set())
        if key not in layer_keys:
            layer_keys.add(key)
            record.saved_bytes += nbytes
            if tensor.is_floating_point():
                record.saved_float_bytes += nbytes
        if key not in seen_storages:
            seen_storages.add(key)
            record.saved_unique_bytes += nbytes
        # Returning the tensor keeps its storage alive, so its address cannot be reused by a
        # later tensor and confuse the deduplication.
        return tensor

    handles = []
    for name, module in leaves:
        handles.append(module.register_forward_pre_hook(pre_hook(name)))
        handles.append(module.register_forward_hook(post_hook(name)))
    images = torch.zeros((batch_size, *input_shape), device=device)
    targets = torch.zeros(batch_size, dtype=torch.long, device=device)
    try:
        with counter:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                logits = model(images)
            forward_total = counter.get_total_flops()
            nn.functional.cross_entropy(logits, targets).backward()
            backward_total = counter.get_total_flops() - forward_total
    finally:
        for handle in handles:
            handle.remove()
        model.zero_grad(set_to_none=True)

    # Whatever the counter saw outside leaf modules (functional matmuls, say) gets its own
    # row, so the table always sums to the model's totals.
    outside.forward_flops = forward_total - sum(r.forward_flops for r in records.values())
    outside.backward_flops = backward_total - sum(r.backward_flops for r in records.values())
    ordered = {name: records[name] for name in call_order}
    if outside.saved_bytes or outside.forward_flops or outside.backward_flops:
        outside.calls = 1
        ordered[OUTSIDE_LEAVES] = outside
    return ordered, int(logits.shape[-1])


def _per_image(small: int, large: int, sizes: tuple[int, int]) -> tuple[int, int]:
    """(per_image, fixed) of a quantity that is `fixed + B * per_image` at both sizes."""
    b1, b2 = sizes
    per_image, remainder = divmod(large - small, b2 - b1)
    if remainder:
        raise ValueError(f"quantity {small}@{b1}, {large}@{b2} is not linear in the batch")
    return per_image, small - b1 * per_image


_PER_IMAGE_COLUMNS = {
    "forward_flops_per_image": "forward_flops",
    "backward_flops_per_image": "backward_flops",
    "input_bytes_per_image": "input_bytes",
    "activation_bytes_per_image": "output_bytes",
    "saved_activation_bytes_per_image": "saved_bytes",
    "saved_activation_float_bytes_per_image": "saved_float_bytes",
    "saved_activation_unique_bytes_per_image": "saved_unique_bytes",
}


def _count(model: nn.Module, input_shape: tuple[int, ...]) -> tuple[pd.DataFrame, int]:
    """The per-layer table and the logits width, from passes at two batch sizes."""
    sizes = COUNT_BATCH_SIZES
    small, _ = _one_pass(model, input_shape, sizes[0])
    large, num_outputs = _one_pass(model, input_shape, sizes[1])
    modules = dict(_leaf_modules(model))
    rows = []
    for name, rec in large.items():
        module = modules.get(name)
        own_params = list(module.parameters(recurse=False)) if module is not None else []
        own_buffers = list(module.buffers(recurse=False)) if module is not None else []
        row = {
            "layer": name,
            "type": rec.type,
            "calls": rec.calls,
            "input_shape": rec.input_shape,
            "output_shape": rec.output_shape,
            "params": sum(p.numel() for p in own_params),
            "trainable_params": sum(p.numel() for p in own_params if p.requires_grad),
            "buffer_bytes": sum(b.nbytes for b in own_buffers),
            "autocast_16bit": isinstance(module, AUTOCAST_16BIT_TYPES),
            "input_requires_grad": rec.input_requires_grad,
        }
        for column, attribute in _PER_IMAGE_COLUMNS.items():
            per_image, fixed = _per_image(
                getattr(small[name], attribute), getattr(rec, attribute), sizes
            )
            row[column] = per_image
            if attribute == "saved_unique_bytes":
                row["saved_activation_fixed_bytes"] = fixed
        rows.append(row)
    return pd.DataFrame(rows, columns=list(LAYER_COLUMNS)), num_outputs


def per_layer_table(model: nn.Module, input_shape: tuple[int, ...]) -> pd.DataFrame:
    """One row per leaf module in call order (columns `LAYER_COLUMNS`).

    Byte columns are fp32; `*_per_image` columns grow with the batch, the rest do not.
    """
    return _count(model, tuple(input_shape))[0]


def step_traffic(
    layers: pd.DataFrame,
    precision: str,
    optimizer: str = TrainingSettings.optimizer,
    momentum: float = TrainingSettings.momentum,
) -> dict[str, int]:
    """Algorithmic bytes of one training step: `{"fixed_bytes", "per_image_bytes"}`.

    The model is the module docstring's; `layers` is `per_layer_table`'s output.
    """
    if precision not in ACTIVATION_BYTES:
        raise NnperfError(f"precision {precision!r} is unknown; allowed: {', '.join(PRECISIONS)}")
    state = optimizer_state_buffers(optimizer, momentum)
    half = ACTIVATION_BYTES[precision] == HALF_BYTES
    scale = ACTIVATION_BYTES[precision] / FP32_BYTES  # measured bytes are fp32
    per_image = 0.0
    fixed = 0.0
    for row in layers.itertuples(index=False):
        saved_float = row.saved_activation_float_bytes_per_image
        saved = saved_float * scale + (row.saved_activation_bytes_per_image - saved_float)
        grad_in = row.input_bytes_per_image if row.input_requires_grad else 0
        per_image += (row.input_bytes_per_image + row.activation_bytes_per_image) * scale
        per_image += saved + (row.activation_bytes_per_image + grad_in) * scale
        fixed += row.saved_activation_fixed_bytes * scale

        cast = half and row.autocast_16bit
        weight_width = HALF_BYTES if cast else FP32_BYTES
        weight_reads = row.params * row.calls * (1 + int(row.input_requires_grad))
        fixed += weight_reads * weight_width + row.trainable_params * weight_width
        fixed += 2 * row.buffer_bytes
        if cast:
            fixed += row.params * (FP32_BYTES + HALF_BYTES)  # forward cast: read fp32, write 16
            fixed += row.trainable_params * (HALF_BYTES + FP32_BYTES)  # gradient cast back
        fixed += row.trainable_params * FP32_BYTES * (3 + 2 * state)
    return {"fixed_bytes": int(round(fixed)), "per_image_bytes": int(round(per_image))}


def estimate(
    model: nn.Module,
    input_shape: tuple[int, ...],
    optimizer: str = TrainingSettings.optimizer,
    momentum: float = TrainingSettings.momentum,
) -> Complexity:
    """Count `model` (train mode) on images of `input_shape` (C, H, W).

    Put the model on the `meta` device to count without arithmetic; on a real device the two
    small passes really run. Gradients are cleared afterwards; on a real device batch-norm
    running statistics move as in any training step.
    """
    state = optimizer_state_buffers(optimizer, momentum)
    model.train()
    layers, num_outputs = _count(model, tuple(input_shape))
    params = [*model.parameters()]
    trainable = sum(p.numel() for p in params if p.requires_grad)
    return Complexity(
        input_shape=tuple(input_shape),
        num_classes=num_outputs,
        params=sum(p.numel() for p in params),
        trainable_params=trainable,
        forward_flops_per_image=int(layers["forward_flops_per_image"].sum()),
        backward_flops_per_image=int(layers["backward_flops_per_image"].sum()),
        saved_activation_bytes_per_image=int(
            layers["saved_activation_unique_bytes_per_image"].sum()
        ),
        saved_activation_fixed_bytes=int(layers["saved_activation_fixed_bytes"].sum()),
        weight_bytes=sum(p.numel() for p in params) * FP32_BYTES,
        gradient_bytes=trainable * FP32_BYTES,
        optimizer=optimizer,
        optimizer_state_buffers=state,
        optimizer_state_bytes=trainable * FP32_BYTES * state,
        traffic={p: step_traffic(layers, p, optimizer, momentum) for p in PRECISIONS},
        layers=layers,
    )


# --- rule `complexity`: one named model, counted as the timed runs train it ------------------


def complexity_document(request: ComplexityRequest) -> tuple[dict[str, Any], pd.DataFrame]:
    """(JSON document, per-layer table) of `request.model`, counted on the meta device.

    The model gets the dataset's classes and the input size it is timed at; the optimiser
    state counted is the one `request.training` gives the timed runs (none for SGD with
    momentum 0). The document records the model, the dataset and those optimiser settings,
    so it carries its own keys.
    """
    source = request.model_source
    models.check_model(request.model, source)  # an unknown model is reported first
    size = request.input_size
    if request.num_classes is not None:  # an ImageFolder's: its class folders
        num_classes = request.num_classes
    else:
        spec = datasets.get_spec(request.dataset)
        num_classes = spec.num_classes
        if size is None:
            size = models.input_size(request.model, spec.image_shape[-1], source)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise NnperfError(f"input_size {size!r} is invalid; allowed: an integer >= 1")
    training = request.training
    with torch.device("meta"):
        # The first build of a model in a study: a user factory that raises, or whose
        # output is not (batch, num_classes), stops here with one line.
        model = models.build_model(request.model, num_classes, source, size)
    try:
        result = estimate(
            model, (3, size, size), optimizer=training.optimizer, momentum=training.momentum
        )
        coverage = flop_coverage(model, (3, size, size))
    except RuntimeError as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise NnperfError(
            f"input_size {size} does not fit model {request.model!r} ({first_line})"
        ) from None
    document = {
        "model": request.model,
        "dataset": request.dataset,
        # What the optimizer_state_* counts and the traffic assumed.
        "training": {"optimizer": training.optimizer, "momentum": training.momentum},
        **result.to_dict(),
        # Which source built it (nnperf.core.model_names) and what the FLOPs leave out.
        "model_kind": model_names.kind_of(request.model, source),
        "flop_coverage": coverage,
    }
    return document, result.layers


def write_complexity(request: ComplexityRequest, out_json, out_csv) -> dict[str, Any]:
    """Count `request.model` and write the JSON document and the per-layer CSV; return the
    document."""
    started_at = time.time()
    document, layers = complexity_document(request)
    # The job's interval, for the report's measurement-cost section (study wall time).
    document = {**document, "started_at_unix": started_at, "ended_at_unix": time.time()}
    files.write_json(out_json, document)
    files.write_csv(out_csv, layers)
    return document


def summary(document: dict[str, Any]) -> str:
    """One line for the job log."""
    return (
        f"{document['model']}: {document['forward_flops_per_image'] / 1e9:.3f} GFLOP forward, "
        f"{document['train_step_flops_per_image'] / 1e9:.3f} GFLOP per training step, "
        f"{document['saved_activation_bytes_per_image'] / 2**20:.1f} MiB saved per image, "
        f"{document['optimizer']} state {document['optimizer_state_bytes'] / 2**20:.1f} MiB"
        + uncounted_note(document)
    )


def uncounted_note(document: dict[str, Any]) -> str:
    """`, 12% of compute ops uncounted (aten._fft_r2c x4)` where the FLOPs leave ops out."""
    coverage = document.get("flop_coverage") or {}
    if not coverage.get("uncounted_calls"):
        return ""
    ops = ", ".join(f"{op} x{n}" for op, n in list(coverage["uncounted_ops"].items())[:3])
    return f", {coverage['uncounted_share']:.0%} of compute ops uncounted ({ops})"
