"""Which device/precision combinations exist, and whether this machine can run one.

Two questions with two different answers in time:

* `supports(device, precision)` is static knowledge (tf32 is a CUDA mode; a CPU has no
  fp16 training path worth timing). The workflow asks it while building the DAG and leaves
  impossible combinations out.
* `require_available(device, precision)` asks the running machine. The DAG is often built
  on a machine without the GPU (a cluster login node), so this is only checked when the job
  starts, and then it fails with one clear line.

`detect_best_device()` must be cheap (it runs on every DAG build), so it looks for driver
files instead of importing torch.
"""

from __future__ import annotations

import platform
import shutil
from pathlib import Path

from nnperf.errors import NnperfError
from nnperf.vocab import DEVICES, SUPPORTED_PRECISIONS, supports

# Compute capability needed on CUDA: TF32 and BF16 tensor cores arrived with Ampere (8.0).
MIN_CUDA_CAPABILITY = {"tf32": (8, 0), "bf16": (8, 0), "fp16": (7, 0), "fp32": (0, 0)}


def detect_best_device() -> str:
    """Best device this machine probably has: cuda, then mps, then cpu (no torch import)."""
    if Path("/dev/nvidiactl").exists() or shutil.which("nvidia-smi"):
        return "cuda"
    if platform.system() == "Darwin" and platform.machine() == "arm64":
        return "mps"
    return "cpu"


def resolve_device(name: str) -> str:
    """Map `auto` to the best device present; pass concrete names through."""
    return detect_best_device() if name == "auto" else name


def require_available(device: str, precision: str) -> None:
    """Raise NnperfError unless this machine can train on `device` in `precision` now."""
    import torch

    if device not in DEVICES:
        raise NnperfError(f"device {device!r} is unknown; allowed: {', '.join(DEVICES)}")
    if not supports(device, precision):
        allowed = ", ".join(SUPPORTED_PRECISIONS[device])
        raise NnperfError(
            f"precision {precision!r} cannot run on device {device!r}; allowed there: {allowed}"
        )
    if device == "cuda":
        if not torch.cuda.is_available():
            raise NnperfError("device 'cuda' is not available on this machine (torch sees no GPU)")
        capability = torch.cuda.get_device_capability()
        needed = MIN_CUDA_CAPABILITY[precision]
        if capability < needed:
            name = torch.cuda.get_device_name()
            raise NnperfError(
                f"precision {precision!r} needs CUDA compute capability "
                f"{needed[0]}.{needed[1]}+, but {name} is {capability[0]}.{capability[1]}"
            )
    elif device == "mps":
        if not torch.backends.mps.is_available():
            raise NnperfError("device 'mps' is not available on this machine")
