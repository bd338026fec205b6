"""`nnperf gpu-env`: can this Python run a GPU study as it is? One line either way.

`make gpu-check` and `make gpu-study` run in the environment they are started in: a GPU
machine's torch is matched to its driver, and nothing may replace it (a wheel built for a
newer CUDA leaves an older driver without a GPU), nor may anything be downloaded (a lent
machine has no network). So before `nnperf doctor` this checks, offline, that

* this Python's torch can be imported, is a CUDA (or ROCm) build and sees a GPU; if not, the
  study cannot run here at all, and the line says what to use instead;
* every other package nnperf imports is importable; if not, one line names all the missing
  ones and the pip command that adds them beside this torch (from a wheelhouse where there is
  no network).

What lies below torch (the driver against torch's CUDA build, `ncu` and its counters, NVML)
is `nnperf doctor`'s (`nnperf.study.preflight`). This module imports nothing outside the
standard library before torch, so a missing package is this line, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib.util
import shlex
import sys
from typing import Callable, Sequence

# What nnperf needs besides torch (pyproject.toml's dependencies, which tests/study/test_gpu_check.py
# holds this to): import name -> what pip installs. nvidia-ml-py is left to `nnperf doctor`:
# without it a study runs, its clocks unrecorded.
PACKAGES = {
    "torchvision": "torchvision",
    "snakemake": "snakemake",
    "pandas": "pandas",
    "scipy": "scipy",
    "matplotlib": "matplotlib",
    "seaborn": "seaborn",
    "yaml": "pyyaml",
    "pygments": "pygments",
    "jsonschema": "jsonschema",
    "jinja2": "jinja2",
    "tabulate": "tabulate",
}
# Requirements nnperf has that this check leaves to `nnperf doctor` (or that it is about).
NOT_CHECKED_HERE = ("torch", "nvidia-ml-py")

CUDA_HINT = (
    "GPU targets run in the Python they are started with and never install torch: run on a "
    "machine with an NVIDIA GPU, with PYTHON= a Python whose torch is a CUDA build "
    "(e.g. make gpu-check PYTHON=/path/to/python)"
)


def torch_problem(import_torch: Callable[[], object]) -> str | None:
    """Why this Python's torch cannot run CUDA (one line), or None when it can.

    `import_torch()` returns the torch module or raises what importing it raised."""
    try:
        torch = import_torch()
    except Exception as error:  # noqa: BLE001 - any import failure is the answer
        return f"torch cannot be imported ({type(error).__name__}: {error})"
    version = torch.__version__
    if not (torch.version.cuda or getattr(torch.version, "hip", None)):
        return f"torch {version} is a CPU-only build (torch.version.cuda is None)"
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        build = torch.version.cuda or torch.version.hip
        return (
            f"torch {version} (built for CUDA {build}) sees no GPU "
            "(torch.cuda.is_available() is False: no GPU, its driver or CUDA_VISIBLE_DEVICES)"
        )
    return None


def missing_packages(
    find_spec: Callable[[str], object] = importlib.util.find_spec,
) -> list[str]:
    """The pip names of the packages of PACKAGES this Python cannot import (none imported)."""
    missing = []
    for module, requirement in PACKAGES.items():
        try:
            found = find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(requirement)
    return missing


def packages_line(missing: Sequence[str], python: str = sys.executable) -> str:
    command = shlex.join([python, "-m", "pip", "install", *missing])
    return (
        f"nnperf needs {', '.join(missing)}, which this Python cannot import: {command} "
        "(offline: add --no-index --find-links DIR, DIR a folder of their wheels); torch "
        "stays as it is"
    )


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "gpu-env",
        help="check, in one line, that this Python's torch has CUDA and nnperf's packages are here",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(func=run)


def _import_torch():
    import torch

    return torch


def run(args: argparse.Namespace) -> int:
    problem = torch_problem(_import_torch)
    if problem:
        print(f"gpu-env: no CUDA in {sys.executable}: {problem}; {CUDA_HINT}", file=sys.stderr)
        return 2
    missing = missing_packages()
    if missing:
        print(f"gpu-env: {packages_line(missing)}", file=sys.stderr)
        return 2
    import torch

    print(
        f"gpu-env: ok: {sys.executable}, torch {torch.__version__} "
        f"on {torch.cuda.get_device_name(0)}"
    )
    return 0
