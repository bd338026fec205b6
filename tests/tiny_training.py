"""Tiny, real training pieces shared by the timing tests: a small CNN and CIFAR-shaped data.

Everything here runs for real on the CPU in milliseconds; nothing is mocked.
"""

from __future__ import annotations

import copy
import functools

import numpy as np
import torch

from nnperf.core.contract import RunRequest, TimingSettings, TrainingSettings
from nnperf.core.variant import parse_variant_settings
from nnperf.engine.build import RunData

NUM_IMAGES = 64
NUM_CLASSES = 10
# CIFAR-10 channel statistics, the values a real run would pass.
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)


def tiny_model() -> torch.nn.Module:
    """conv-BN-ReLU-pool-linear: every layer kind of a ResNet step, at toy size."""
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=False),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(4),
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 4 * 4, NUM_CLASSES),
    )


def tiny_data(input_size: int = 32, num_images: int = NUM_IMAGES) -> RunData:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(num_images, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, NUM_CLASSES, size=num_images).astype(np.int64)
    return RunData(
        images=images,
        labels=labels,
        mean=MEAN,
        std=STD,
        num_classes=NUM_CLASSES,
        input_size=input_size,
    )


# Exactly two worker processes of two windows each (the CI target of 0.1% is never met, so
# the rule always runs to its caps): every level of the protocol, in well under a second.
TINY_TIMING = TimingSettings(
    target_ci=0.001,
    min_seconds=0.0,
    max_seconds=60.0,
    min_processes=2,
    max_processes=2,
    min_windows=2,
    max_windows=2,
    # Flagged and kept: a test runner is never quiet (tests/configs/tiny.yaml says why).
    disturbed_windows="keep",
)


def tiny_request(
    precision: str = "fp32",
    settings: dict | None = None,
    batch_size: int = 8,
    variant: str = "baseline",
    warmup_steps: int = 2,
    timed_steps: int = 3,
    timing: TimingSettings = TINY_TIMING,
    **hyper,
) -> RunRequest:
    return RunRequest(
        model="tiny",
        device="cpu",
        precision=precision,
        batch_size=batch_size,
        variant=variant,
        settings=parse_variant_settings(settings or {}),
        dataset="synthetic",
        training=TrainingSettings(warmup_steps=warmup_steps, timed_steps=timed_steps, **hyper),
        timing=timing,
    )


OOM_SCRIPT = """
import json, resource, sys
sys.path.insert(0, {tests!r})
from tiny_training import tiny_data, tiny_model, tiny_request
from nnperf.engine.runner import perform_run
# Cap the address space at what is mapped now plus 512 MiB: torch's CUDA libraries are
# already mapped, and the step below needs far more than the headroom.
with open("/proc/self/status") as status:
    vm_kib = next(int(line.split()[1]) for line in status if line.startswith("VmSize"))
resource.setrlimit(resource.RLIMIT_AS, (vm_kib * 1024 + 512 * 2**20, resource.RLIM_INFINITY))
# 1024x1024 inputs: the first convolution's output alone is B x 8 x 1024^2 x 4 B >= 256 MiB.
document, windows, steps = perform_run(tiny_request(batch_size={batch_size}), tiny_model,
                                       tiny_data(input_size=1024))
print(json.dumps({{"document": document, "n_steps": len(steps)}}))
"""


def run_out_of_memory(batch_size: int = 8) -> dict:
    """A real out-of-memory run: a subprocess under RLIMIT_AS. Returns {document, n_steps}.

    Cached per session (a fresh copy each call): the subprocess costs a torch import.
    """
    return copy.deepcopy(_run_out_of_memory(batch_size))


@functools.lru_cache(maxsize=4)
def _run_out_of_memory(batch_size: int) -> dict:
    import json
    import subprocess
    import sys
    from pathlib import Path

    tests = Path(__file__).resolve().parent
    script = OOM_SCRIPT.format(tests=str(tests), batch_size=batch_size)
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tests.parent,
        env={"PYTHONPATH": str(tests.parent / "src"), "PATH": "/usr/bin:/bin"},
    )
    if done.returncode != 0:
        raise AssertionError(f"out-of-memory subprocess failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# A small study: (precision, batch_size, variant, settings), plus one OOM config.
STUDY = (
    ("fp32", 4, "baseline", {}),
    ("fp32", 8, "baseline", {}),
    ("bf16", 4, "baseline", {}),
    ("bf16", 8, "baseline", {}),
    (
        "fp32",
        8,
        "tuned",
        {"channels_last": True, "optimizer_impl": "foreach", "data_path": "device_resident"},
    ),
)
STUDY_OOM_BATCH = 16


@functools.lru_cache(maxsize=1)
def _study_documents() -> tuple:
    from nnperf.engine.runner import perform_run

    documents = []
    for precision, batch_size, variant, settings in STUDY:
        request = tiny_request(precision, settings, batch_size=batch_size, variant=variant)
        documents.append(perform_run(request, tiny_model, tiny_data())[0])
    documents.append(run_out_of_memory(STUDY_OOM_BATCH)["document"])
    return tuple(documents)


def study_documents() -> list[dict]:
    """Real run documents of STUDY (computed once per test session; copies each call)."""
    return copy.deepcopy(list(_study_documents()))
