"""Training setup: precision semantics, variant toggles, optimizer implementations, OOM test."""

from __future__ import annotations

import pytest
import torch

from nnperf.core import precision as precision_mod
from nnperf.core.contract import TrainingSettings
from nnperf.core.errors import NnperfError
from nnperf.core.variant import parse_variant_settings
from nnperf.engine.step import (
    build_training,
    is_out_of_memory,
    make_optimizer,
    resolved_optimizer_impl,
)
from tiny_training import tiny_data, tiny_model


def _build(precision="fp32", settings=None, batch_size=4, **hyper):
    data = tiny_data()
    torch.manual_seed(0)
    return build_training(
        tiny_model(),
        device="cpu",
        precision=precision,
        batch_size=batch_size,
        settings=parse_variant_settings(settings or {}),
        hyper=TrainingSettings(**hyper),
        seed=0,
        images=data.images,
        labels=data.labels,
        mean=data.mean,
        std=data.std,
        input_size=32,
    )


@pytest.mark.parametrize(
    ("precision", "tf32", "matmul_precision"),
    [
        ("fp32", False, "highest"),
        ("tf32", True, "high"),
        ("fp16", False, "highest"),
        ("bf16", False, "highest"),
    ],
)
def test_math_flags_per_precision(precision, tf32, matmul_precision):
    precision_mod.apply_math_flags(precision)
    flags = precision_mod.math_flags()
    assert flags["cuda_matmul_allow_tf32"] is tf32
    assert flags["cudnn_allow_tf32"] is tf32
    assert flags["float32_matmul_precision"] == matmul_precision
    precision_mod.apply_math_flags("fp32")


def test_scaler_only_for_fp16():
    assert precision_mod.make_grad_scaler("cpu", "bf16") is None
    assert precision_mod.make_grad_scaler("cpu", "fp32") is None
    assert isinstance(precision_mod.make_grad_scaler("cpu", "fp16"), torch.amp.GradScaler)


def _conv_output_dtypes(training):
    dtypes = []
    conv = training.model[0]
    handle = conv.register_forward_hook(lambda module, args, out: dtypes.append(out.dtype))
    inputs, labels = training.to_device(training.next_batch())
    loss = training.forward(inputs, labels)
    training.backward(loss)
    training.optimizer_step()
    handle.remove()
    return dtypes, loss


def test_bf16_runs_convolutions_in_bf16_and_keeps_fp32_weights():
    training = _build("bf16")
    dtypes, loss = _conv_output_dtypes(training)
    assert dtypes == [torch.bfloat16]
    assert loss.dtype == torch.float32  # cross-entropy autocasts to fp32
    assert all(p.dtype == torch.float32 for p in training.model.parameters())
    assert training.scaler is None


def test_fp32_runs_convolutions_in_fp32():
    dtypes, _ = _conv_output_dtypes(_build("fp32"))
    assert dtypes == [torch.float32]


def test_fp16_on_cpu_uses_the_grad_scaler_for_real():
    """fp16 is not a CPU precision in the study, but the engine path is the same as on GPUs."""
    training = _build("fp16")
    dtypes, _ = _conv_output_dtypes(training)
    assert dtypes == [torch.float16]
    assert training.scaler is not None and training.scaler.get_scale() > 0


def test_channels_last_variant_converts_model_and_inputs():
    training = _build(
        "fp32", {"channels_last": True, "data_path": "device_resident", "optimizer_impl": "foreach"}
    )
    assert training.model[0].weight.is_contiguous(memory_format=torch.channels_last)
    inputs, _ = training.to_device(training.next_batch())
    assert inputs.is_contiguous(memory_format=torch.channels_last)
    assert training.optimizer.defaults["foreach"] is True


@pytest.mark.parametrize(
    ("impl", "foreach", "fused", "resolved"),
    [
        ("default", None, None, "for-loop"),  # CPU parameters: torch's default is the loop
        ("foreach", True, None, "foreach"),
        ("fused", None, True, "fused"),
        ("for-loop", False, None, "for-loop"),
    ],
)
def test_optimizer_implementations(impl, foreach, fused, resolved):
    params = list(tiny_model().parameters())
    optimizer = make_optimizer(params, TrainingSettings(), impl)
    assert isinstance(optimizer, torch.optim.SGD)
    assert optimizer.defaults["foreach"] is foreach
    assert optimizer.defaults["fused"] is fused
    assert optimizer.defaults["momentum"] == 0.9
    assert resolved_optimizer_impl(impl, params) == resolved


def test_fused_sgd_steps_on_cpu():
    training = _build("fp32", {"optimizer_impl": "fused"})
    before = training.model[-1].weight.detach().clone()
    training.step()
    assert not torch.equal(before, training.model[-1].weight)


def test_adam_and_unknown_optimizer():
    params = list(tiny_model().parameters())
    assert isinstance(
        make_optimizer(params, TrainingSettings(optimizer="adam"), "foreach"), torch.optim.Adam
    )
    with pytest.raises(NnperfError, match=r"^optimizer 'lamb' is unknown; allowed: sgd, adam"):
        make_optimizer(params, TrainingSettings(optimizer="lamb"), "default")


def test_images_must_be_uint8_nhwc():
    data = tiny_data()
    with pytest.raises(NnperfError, match=r"allowed: uint8 \[N, H, W, 3\]"):
        build_training(
            tiny_model(),
            device="cpu",
            precision="fp32",
            batch_size=4,
            settings=parse_variant_settings({}),
            hyper=TrainingSettings(),
            seed=0,
            images=data.images.astype("float32"),
            labels=data.labels,
            mean=data.mean,
            std=data.std,
            input_size=32,
        )


def test_out_of_memory_classification_on_a_real_allocation_failure():
    with pytest.raises(RuntimeError) as info:
        torch.empty(1 << 62, dtype=torch.uint8)  # 4 EiB: no allocator can serve it
    assert is_out_of_memory(info.value)
    assert is_out_of_memory(MemoryError())
    assert is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"))
    assert not is_out_of_memory(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert not is_out_of_memory(ValueError("out of memory"))
