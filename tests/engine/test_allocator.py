"""A worker's fixed malloc thresholds (`nnperf.engine.allocator`): a step's large tensors come
from reused heap, not from fresh mappings faulted in again every step. Counted in page
faults, which do not depend on how busy the machine is.

Under glibc's dynamic threshold a process lands on either path, by chance (the module
docstring): the bad one is reproduced here on purpose, with the threshold held at glibc's
starting value, so the test is the same in every run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nnperf.engine import allocator

SRC = Path(__file__).resolve().parents[2] / "src"

# A training step's shape: activations of growing size kept until backward, then freed.
STEPS = """
import json, resource, sys, torch
from nnperf.engine import allocator
import ctypes
if sys.argv[1] == "fixed":
    record = allocator.fix_thresholds()
else:  # the path half the processes take by default: every large block a fresh mapping
    record = ctypes.CDLL(None).mallopt(allocator.M_MMAP_THRESHOLD, 128 * 1024)
def step():
    kept = [torch.ones(2**20 * mib // 4) for mib in (1, 3, 6, 12, 6, 3)]
    grads = [torch.ones_like(t) for t in reversed(kept)]
    del kept, grads
for _ in range(3):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    step()
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10
print(json.dumps({"faults_per_step": faults, "record": record}))
"""

glibc_only = pytest.mark.skipif(allocator._glibc()[0] is None, reason="mallopt is glibc's (Linux)")


def faults_per_step(mode: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env["PYTHONPATH"] = str(SRC)
    done = subprocess.run(
        [sys.executable, "-c", STEPS, mode],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@glibc_only
def test_fixed_thresholds_keep_a_steps_tensors_off_fresh_mappings():
    mapped = faults_per_step("mapped")
    fixed = faults_per_step("fixed")
    # Every large block a fresh mapping: freed back to the kernel, faulted in again (about
    # 16,000 faults per step on Linux x86_64); fixed thresholds: reused heap, next to none.
    assert mapped["faults_per_step"] > 1000
    assert fixed["faults_per_step"] < mapped["faults_per_step"] / 20
    assert fixed["record"] == {
        "malloc": fixed["record"]["malloc"],
        "mmap_threshold_bytes": allocator.MMAP_THRESHOLD_BYTES,
        "trim_threshold_bytes": allocator.TRIM_THRESHOLD_BYTES,
    }
    assert fixed["record"]["malloc"].startswith("glibc ")


def test_the_users_own_malloc_settings_are_left_alone(monkeypatch):
    monkeypatch.setenv("MALLOC_ARENA_MAX", "2")
    assert allocator.fix_thresholds() == {
        "malloc": "as set by the environment",
        "variables": ["MALLOC_ARENA_MAX"],
    }


def test_another_c_library_is_left_alone(monkeypatch):
    for name in [n for n in os.environ if n.startswith("MALLOC_")]:
        monkeypatch.delenv(name)
    monkeypatch.setattr(allocator, "_glibc", lambda: (None, None))
    assert allocator.fix_thresholds() == {"malloc": "the platform's own (not glibc): unchanged"}
