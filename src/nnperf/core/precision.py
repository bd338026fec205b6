"""What each precision name means for a training step, made exact.

* `fp32`: true IEEE fp32 everywhere; TF32 off for matmul and cuDNN, matmul precision
  'highest'.
* `tf32`: fp32 tensors, TF32 tensor-core math allowed for matmul and cuDNN convolutions
  (matmul precision 'high').
* `fp16`: `torch.autocast(float16)` + `torch.amp.GradScaler` (loss scaling is part of fp16
  training; without it small gradients underflow).
* `bf16`: `torch.autocast(bfloat16)`, no scaler (bf16 has fp32's exponent range).

In the autocast modes TF32 stays off, so the ops autocast leaves in fp32 are real fp32 and a
run differs from `fp32` only by the autocast dtype. The flags are process-global in PyTorch,
which is one more reason why every rep is its own process.

This module does not check whether a device can run a precision (`nnperf.core.devices` does).
"""

from __future__ import annotations

import contextlib
from typing import ContextManager

import torch

from nnperf.core.vocab import TF32_PRECISIONS

AUTOCAST_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
TENSOR_DTYPES = {
    "fp32": torch.float32,
    "tf32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
}


def apply_math_flags(precision: str) -> None:
    """Set the process-wide TF32 switches for `precision`."""
    tf32 = precision in TF32_PRECISIONS
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")


def autocast(device: str, precision: str) -> ContextManager:
    """The autocast context of one forward pass (a null context for fp32/tf32)."""
    dtype = AUTOCAST_DTYPES.get(precision)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device, dtype=dtype)


def make_grad_scaler(device: str, precision: str) -> torch.amp.GradScaler | None:
    """A GradScaler for fp16, None otherwise."""
    if precision != "fp16":
        return None
    return torch.amp.GradScaler(device)


def math_flags() -> dict:
    """The TF32/matmul switches as they are now, for the environment record."""
    flags = {
        "cuda_matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }
    # torch >= 2.9 also exposes the newer per-backend `fp32_precision` switches.
    for name, backend in (
        ("cuda_matmul", torch.backends.cuda.matmul),
        ("cudnn", torch.backends.cudnn),
    ):
        value = getattr(backend, "fp32_precision", None)
        if value is not None:
            flags[f"{name}_fp32_precision"] = str(value)
    return flags
