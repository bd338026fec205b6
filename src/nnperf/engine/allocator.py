"""One host-memory path for every worker process: glibc's malloc thresholds fixed.

glibc's malloc serves a block above its mmap threshold with a fresh mapping and unmaps it on
free, and it raises that threshold each time the process frees such a block (the dynamic
threshold). A training step frees and reallocates its multi-MiB activations and gradients
every step, so whether they come from reused heap or from fresh mappings that fault in every
page again depends on each process's history of frees: two processes of one configuration can
settle on different paths, and the second pays the kernel (and, in a VM, the hypervisor) for
every page of every step. Which one a process takes is chance: eight fresh processes running
one step pattern of torch tensors (1-12 MiB, `tests/engine/test_allocator.py`) gave 0 minor page
faults per step in four and 10,400-15,800 in the other four; with fixed thresholds, 0 in
every one. On the default study's configuration, `benchmarks/cpu_noise.py --precision fp32
--batch-size 16 --steps 2 --windows 8 --rounds 8 --treatments default dynamic_malloc` (ResNet-18
CIFAR, a 2-vCPU KVM guest, treatments interleaved) gave with glibc's dynamic threshold 8,100
minor page faults per step on average, system time 2.7% of user time, a window CV of 7.1% and
a median of 47.0 img/s; fixed, 62 faults, 0.1%, 4.3% and 49.8 img/s.

`fix_thresholds` sets them with `mallopt` (which also turns the dynamic threshold off) in the
worker itself, after the fork: a worker forked from a warm server inherits the server's
malloc, so variables read at the server's start would not reach it. Blocks up to
MMAP_THRESHOLD_BYTES come from the heap and stay there; larger ones (an ImageNet batch's
activations) are mapped as before. Where the user set any `MALLOC_*` variable, or the C library
is not glibc (macOS, musl), nothing is changed. No library exposes mallopt, hence ctypes.
"""

from __future__ import annotations

import ctypes
import os

# mallopt's parameter numbers (glibc's malloc.h).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
# glibc's largest mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX): 32 MiB.
MMAP_THRESHOLD_BYTES = 32 * 2**20
# Heap memory freed at the top is kept up to this much instead of returned to the kernel.
TRIM_THRESHOLD_BYTES = 2**30


def _glibc():
    """The process's C library when it is glibc, else None."""
    try:
        libc = ctypes.CDLL(None)
        version = libc.gnu_get_libc_version
    except (OSError, AttributeError):
        return None, None
    version.restype = ctypes.c_char_p
    return libc, version().decode()


def fix_thresholds() -> dict:
    """Fix this process's malloc thresholds (module docstring); returns what was done, for
    the run's environment record."""
    user_set = sorted(name for name in os.environ if name.startswith("MALLOC_"))
    if user_set:
        return {"malloc": "as set by the environment", "variables": user_set}
    libc, version = _glibc()
    if libc is None:
        return {"malloc": "the platform's own (not glibc): unchanged"}
    settings = {
        "mmap_threshold_bytes": (M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES),
        "trim_threshold_bytes": (M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES),
    }
    applied = {
        name: value for name, (param, value) in settings.items() if libc.mallopt(param, value) == 1
    }
    return {"malloc": f"glibc {version}, fixed thresholds", **applied}
