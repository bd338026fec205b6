"""Which device/precision combinations exist, and whether this machine can run one.

Two questions with two different answers in time:

* `supports(device, precision)` is static knowledge (tf32 is a CUDA mode; a CPU has no
  fp16 training path worth timing). The workflow asks it while building the DAG and leaves
  impossible combinations out.
* `absent_reason(device)` asks the machine building the DAG, cheaply: a local study that
  names a device this machine has no driver for stops there with one line, instead of
  failing one job per configuration minutes later. (A cluster submission skips it: the
  jobs run elsewhere.)
* `require_available(device, precision)` asks torch on the machine running the job, which
  is the final word (a driver without a CUDA build of torch, a GPU too old for bf16).

`detect_best_device()` and `absent_reason()` run on every DAG build, so they look for driver
files instead of importing torch (1-2 s).
"""

from __future__ import annotations

import platform
import shutil
from pathlib import Path

from nnperf.core.errors import NnperfError
from nnperf.core.vocab import DEVICES, SUPPORTED_PRECISIONS, supports

# Compute capability needed on CUDA: TF32 and BF16 tensor cores arrived with Ampere (8.0).
MIN_CUDA_CAPABILITY = {"tf32": (8, 0), "bf16": (8, 0), "fp16": (7, 0), "fp32": (0, 0)}


# What a machine with a CUDA (or ROCm, which torch drives as "cuda") GPU has: a driver node
# or the vendor's command-line tool.
CUDA_DRIVER_FILES = ("/dev/nvidiactl", "/dev/kfd")
CUDA_TOOLS = ("nvidia-smi", "rocm-smi")


def has_cuda_driver() -> bool:
    """Whether this machine has an NVIDIA or AMD GPU driver (no torch import)."""
    return any(Path(name).exists() for name in CUDA_DRIVER_FILES) or any(
        shutil.which(tool) for tool in CUDA_TOOLS
    )


def is_apple_silicon() -> bool:
    return platform.system() == "Darwin" and platform.machine() == "arm64"


def detect_best_device() -> str:
    """Best device this machine probably has: cuda, then mps, then cpu (no torch import)."""
    if has_cuda_driver():
        return "cuda"
    if is_apple_silicon():
        return "mps"
    return "cpu"


def absent_reason(device: str) -> str | None:
    """Why this machine cannot have `device` (one line), or None when it may have it."""
    if device == "cuda" and not has_cuda_driver():
        return (
            "device 'cuda' is not available on this machine (no GPU driver: "
            f"{', '.join(CUDA_DRIVER_FILES)} and {', '.join(CUDA_TOOLS)} are absent); "
            "use devices: [cpu] or [auto] here, or run the study on a GPU machine or "
            "through a cluster profile (docs/cluster.md)"
        )
    if device == "mps" and not is_apple_silicon():
        return (
            "device 'mps' is not available on this machine (MPS needs an Apple-silicon Mac); "
            "use devices: [cpu] or [auto] here"
        )
    return None


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
