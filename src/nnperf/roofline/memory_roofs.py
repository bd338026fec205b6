"""Memory roofs: STREAM copy and triad bandwidth, a working-set sweep, and the caches behind them.

* a main-memory bandwidth roof (`measure_stream`): STREAM-style copy and triad over arrays far
  larger than the last-level cache (`bandwidth_array_bytes`);
* a working-set sweep (`measure_sweep`): read bandwidth for working sets from a few KiB to
  hundreds of MiB, whose plateaus show the cache levels;
* the CPU's caches (`probe_cpu_caches`: sysfs, else lscpu), which size the arrays.

Byte-counting convention (STREAM's, McCalpin, "STREAM: Sustainable Memory Bandwidth in
High Performance Computers", https://www.cs.virginia.edu/stream/ref.html): every array
element a kernel reads or writes counts once, so copy `a = b` moves 2 x N x size bytes
and triad `a = b + s * c` moves 3 x N x size bytes. The extra read that write-allocate
caches perform on `a` is NOT counted, so on CPUs the hardware moves more than the figure
says; it is the convention every published STREAM number uses, so ours compare with them.

Timing is `nnperf.roofline.microbench`'s; the ceilings document that holds these roofs is
`nnperf.roofline.ceilings`.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from pathlib import Path

from nnperf.core.errors import NnperfError
from nnperf.roofline.microbench import time_interleaved

KIB = 1024
MIB = 1024**2
GIB = 1024**3
# Bandwidth arrays: each at least LLC_MULTIPLE x the last-level cache and never smaller than
# MIN_BANDWIDTH_ARRAY_BYTES, so no pass is served from cache (STREAM's rule asks for 4x).
LLC_MULTIPLE = 4
MIN_BANDWIDTH_ARRAY_BYTES = 256 * MIB
# Streams need whole cache lines; working sets are rounded to this many bytes.
SWEEP_ALIGN_BYTES = 256
ELEMENT_BYTES = 4  # bandwidth kernels use fp32 arrays
# STREAM convention: arrays touched per element (copy: read b, write a; triad: read b, c,
# write a).
STREAM_ARRAYS_TOUCHED = {"copy": 2, "triad": 3}
TRIAD_SCALAR = 3.0


def stream_bytes(kernel: str, n_elements: int, element_bytes: int = ELEMENT_BYTES) -> int:
    """Bytes one STREAM kernel call moves under the STREAM convention (module docstring)."""
    if kernel not in STREAM_ARRAYS_TOUCHED:
        raise NnperfError(
            f"stream kernel {kernel!r} is unknown; allowed: {', '.join(STREAM_ARRAYS_TOUCHED)}"
        )
    return STREAM_ARRAYS_TOUCHED[kernel] * n_elements * element_bytes


def sweep_call_bytes(
    working_set_bytes: int, repeats: int, element_bytes: int = ELEMENT_BYTES
) -> int:
    """Bytes of one sweep call: the working set read `repeats` times plus one result per read."""
    return repeats * working_set_bytes + repeats * element_bytes


def sweep_repeats(working_set_bytes: int, bytes_per_call: int) -> int:
    """How many times one call re-reads the working set to move about `bytes_per_call`."""
    return max(1, bytes_per_call // working_set_bytes)


def sweep_working_sets(min_bytes: int, max_bytes: int, steps_per_octave: int) -> list[int]:
    """Geometric working-set sizes from min to max (both included), aligned to 256 bytes."""
    low = -(-min_bytes // SWEEP_ALIGN_BYTES) * SWEEP_ALIGN_BYTES
    high = max_bytes // SWEEP_ALIGN_BYTES * SWEEP_ALIGN_BYTES
    if min_bytes < 1 or high < low:
        raise NnperfError(
            f"ceilings.sweep_min_bytes..sweep_max_bytes is {min_bytes}..{max_bytes}; need "
            f"0 < min <= max with at least one multiple of {SWEEP_ALIGN_BYTES} bytes between them"
        )
    if steps_per_octave < 1:
        raise NnperfError(
            f"ceilings.sweep_steps_per_octave is {steps_per_octave}; expected an integer >= 1"
        )
    steps = round(math.log2(high / low) * steps_per_octave)
    sizes = {low, high} | {
        round(low * 2 ** (i / steps_per_octave) / SWEEP_ALIGN_BYTES) * SWEEP_ALIGN_BYTES
        for i in range(steps + 1)
    }
    return sorted(size for size in sizes if low <= size <= high)


def bandwidth_array_bytes(
    llc_bytes: int | None, multiple: int = LLC_MULTIPLE, minimum: int = MIN_BANDWIDTH_ARRAY_BYTES
) -> int:
    """Bytes per bandwidth array: max(multiple x LLC, minimum), a whole number of MiB."""
    wanted = max(minimum, multiple * (llc_bytes or 0))
    return -(-wanted // MIB) * MIB


def parse_cache_size(text: str) -> int:
    """Size as written in /sys/devices/system/cpu/cpu*/cache/index*/size ("48K", "32768K")."""
    match = re.fullmatch(r"\s*([0-9]+)\s*([KMG]?)i?B?\s*", text, flags=re.IGNORECASE)
    if not match:
        raise ValueError(f"cache size {text!r} is not understood")
    scale = {"": 1, "K": KIB, "M": MIB, "G": GIB}[match.group(2).upper()]
    return int(match.group(1)) * scale


def count_cpu_list(text: str) -> int:
    """Number of CPUs in a sysfs cpu list such as "0-3,8,10-11"."""
    total = 0
    for part in text.strip().split(","):
        if "-" in part:
            lo, hi = part.split("-")
            total += int(hi) - int(lo) + 1
        elif part:
            total += 1
    return total


def caches_from_lscpu_json(text: str) -> list[dict]:
    """Data/unified caches from `lscpu -B -C --json` (util-linux)."""
    caches = []
    for row in json.loads(text).get("caches", []):
        if str(row.get("type", "")).lower() == "instruction":
            continue
        one = row.get("one-size")
        caches.append(
            {
                "name": row.get("name"),
                "level": int(row["level"]),
                "type": row.get("type"),
                "size_bytes": int(one) if str(one).isdigit() else parse_cache_size(str(one)),
                "shared_cpu_count": None,
            }
        )
    return sorted(caches, key=lambda c: c["level"])


def last_level_cache_bytes(caches: list[dict]) -> int | None:
    """Size of the highest-level data/unified cache, or None when nothing is known."""
    if not caches:
        return None
    return max(caches, key=lambda c: (c["level"], c["size_bytes"]))["size_bytes"]


def read_sysfs_caches(cache_dir: str | Path = "/sys/devices/system/cpu/cpu0/cache") -> list[dict]:
    """Data/unified caches of cpu0 from sysfs, lowest level first; [] when unreadable."""
    caches = []
    for index in sorted(Path(cache_dir).glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            if kind == "Instruction":
                continue
            level = int((index / "level").read_text())
            size = parse_cache_size((index / "size").read_text())
            shared = count_cpu_list((index / "shared_cpu_list").read_text())
        except (OSError, ValueError):
            continue
        name = f"L{level}d" if kind == "Data" else f"L{level}"
        caches.append(
            {
                "name": name,
                "level": level,
                "type": kind,
                "size_bytes": size,
                "shared_cpu_count": shared,
            }
        )
    return sorted(caches, key=lambda c: c["level"])


def probe_cpu_caches() -> tuple[list[dict], str]:
    """CPU caches from sysfs, else from lscpu; with where they came from."""
    caches = read_sysfs_caches()
    if caches:
        return caches, "sysfs"
    if shutil.which("lscpu"):
        try:
            out = subprocess.run(
                ["lscpu", "-B", "-C", "--json"],
                capture_output=True,
                text=True,
                timeout=10,
                check=True,
            ).stdout
            caches = caches_from_lscpu_json(out)
        except (OSError, subprocess.SubprocessError, ValueError, KeyError):
            caches = []
        if caches:
            return caches, "lscpu"
    return [], "unknown"


def measure_stream(
    device: str, array_bytes: int, *, warmup: int, trials: int, min_trial_s: float
) -> dict:
    """Copy and triad bandwidth over fp32 arrays of `array_bytes` each (STREAM counting)."""
    import torch

    n = array_bytes // ELEMENT_BYTES
    # Filled, not empty: first-touch page faults must happen before timing, not inside it.
    a = torch.full((n,), 0.0, device=device)
    b = torch.full((n,), 1.0, device=device)
    c = torch.full((n,), 2.0, device=device)
    kernels = {
        "copy": lambda: a.copy_(b),
        "triad": lambda: torch.add(b, c, alpha=TRIAD_SCALAR, out=a),
    }
    timings = time_interleaved(
        list(kernels.values()), device, warmup=warmup, trials=trials, min_trial_s=min_trial_s
    )
    result = {}
    for name, timing in zip(kernels, timings):
        moved = stream_bytes(name, n)
        result[name] = {
            "bytes_per_call": moved,
            "best_bandwidth_bytes_s": moved / timing["best_time_s"],
            "median_bandwidth_bytes_s": moved / timing["median_time_s"],
            "best_time_s": timing["best_time_s"],
            "median_time_s": timing["median_time_s"],
            "trials": trials,
            "iters_per_trial": timing["iters_per_trial"],
        }
    return result


def measure_sweep(
    device: str, working_sets, *, bytes_per_call: int, warmup: int, trials: int, min_trial_s: float
) -> list[dict]:
    """Read bandwidth per working-set size.

    One call sums the rows of `x[:n].expand(R, n)`: R rows that all alias the same
    n-element working set, so one kernel re-reads it R times from whichever cache holds
    it. A separate call per pass would time the framework's dispatch (microseconds), not
    a 16 KiB read from L1 (nanoseconds). Every working set is a prefix of one buffer, so
    all sizes can be timed round-robin without holding one buffer per size. Read-only,
    hence no write-allocate traffic: the large sizes read faster than the copy/triad roof.
    """
    import torch

    buffer = torch.full((max(working_sets) // ELEMENT_BYTES,), 1.0, device=device)
    calls, shapes = [], []
    for working_set in working_sets:
        n = max(1, working_set // ELEMENT_BYTES)
        repeats = sweep_repeats(n * ELEMENT_BYTES, bytes_per_call)
        rows = buffer[:n].expand(repeats, n)
        out = torch.empty(repeats, device=device)
        calls.append(lambda rows=rows, out=out: torch.sum(rows, dim=1, out=out))
        shapes.append((n * ELEMENT_BYTES, repeats))
    timings = time_interleaved(calls, device, warmup=warmup, trials=trials, min_trial_s=min_trial_s)
    points = []
    for (size, repeats), timing in zip(shapes, timings):
        moved = sweep_call_bytes(size, repeats)
        points.append(
            {
                "working_set_bytes": size,
                "bandwidth_bytes_s": moved / timing["best_time_s"],
                "bandwidth_bytes_s_median": moved / timing["median_time_s"],
                "repeats_per_call": repeats,
                "bytes_per_call": moved,
                "trials": trials,
                "iters_per_trial": timing["iters_per_trial"],
            }
        )
    return points
