"""Empirical roofs: what this machine actually reaches, next to what the datasheet says.

A roofline is only as honest as its roofs. This module measures

* compute roofs: large square GEMMs per precision the device can run (CPU: fp32, bf16;
  CUDA: fp32 with TF32 off, tf32, fp16, bf16), best over several sizes and trials. Sizes
  run from small to large within a time budget per precision (`GEMM_BUDGET_S`): a size
  projected to overrun it is skipped, and the document says which and why
  (`skipped_gemm_sizes`, the note), so a CPU without native bf16 costs seconds, not minutes;
* a main-memory bandwidth roof: STREAM-style copy and triad over arrays far larger than
  the last-level cache;
* a working-set sweep: read bandwidth for working sets from a few KiB to hundreds of MiB, whose
  plateaus show the cache levels;

and assembles them with the datasheet entry (`nnperf.roofline.peaks`) into the document written to
`results/ceilings/{device}.json`. `measure_ceilings(request)` takes a
`nnperf.core.contract.CeilingsRequest`, whose `settings` are the config's `ceilings:` section (and
own its defaults); what is not a config key (warm-up calls, the shortest timed window, the
sweep's steps per octave) is a named constant below.

Byte-counting convention (STREAM's, McCalpin, "STREAM: Sustainable Memory Bandwidth in
High Performance Computers", https://www.cs.virginia.edu/stream/ref.html): every array
element a kernel reads or writes counts once, so copy `a = b` moves 2 x N x size bytes
and triad `a = b + s * c` moves 3 x N x size bytes. The extra read that write-allocate
caches perform on `a` is NOT counted, so on CPUs the hardware moves more than the figure
says; it is the convention every published STREAM number uses, so ours compare with them.

Timing follows the timed runs: warm-up calls first, then repeated trials, each trial a
window of back-to-back calls closed by one synchronisation (CUDA events on GPU,
`time.perf_counter` on CPU); best and median over trials are reported. The number of
calls per window is calibrated so a window lasts at least `MIN_TRIAL_S`, which keeps
launch and timer overheads out of the figures.

Not here: datasheet numbers and the derived CPU peak (`nnperf.roofline.peaks`), drawing
(`nnperf.report.plots.ceilings`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import time
from pathlib import Path

from nnperf.core import files
from nnperf.core.contract import CeilingsRequest, to_dict
from nnperf.core.cpuinfo import parse_cpuinfo, physical_cores_of
from nnperf.core.devices import require_available
from nnperf.core.errors import NnperfError
from nnperf.core.vocab import DEVICES, SUPPORTED_PRECISIONS
from nnperf.roofline import peaks as peaks_mod

KIB = 1024
MIB = 1024**2
GIB = 1024**3

# Square GEMM sizes per device when config `ceilings.gemm_sizes` is null: large enough to be
# compute-bound there, small enough to take seconds.
DEFAULT_GEMM_SIZES = {
    "cpu": (512, 1024, 2048),
    "cuda": (2048, 4096, 8192),
    "mps": (1024, 2048, 4096),
}
# Untimed calls before each measurement (first-call allocation, kernel selection, clocks up).
WARMUP_CALLS = 2
# Seconds one precision's GEMMs may take (all sizes: warm-up, calibration, trials). Sizes run
# from small to large; a size whose projected cost would overrun this is skipped, with the
# reason in the document. Why bound it: a CPU without native bf16 runs bf16 GEMMs 100x or
# more slower than fp32 (2-core Xeon VM: fp32 120-166 GFLOP/s; bf16 1.3 at 512^3, 0.9 at
# 1024^3, 0.3 at 2048^3), so the 2048^3 bf16 call alone takes ~60 s and the unbounded
# stage took 579 s, in a CPU study meant to take minutes (bounded: 11 s).
# A few seconds still lets every default CPU size run where fp32 or bf16 reach ~50 GFLOP/s
# (a 2048^3 call is 0.34 s; warm-up and 3 trials ~2-3 s), and a GPU's sizes take well
# under a second (an H100's 8192^3 fp32 call, the slowest, is 21 ms).
GEMM_BUDGET_S = {"cpu": 5.0, "cuda": 30.0, "mps": 15.0}
# Smallest probe GEMM. A call's time is projected to a larger size at the same FLOP rate,
# which is only trusted over one doubling of the size (8x the FLOPs) or from a call of at
# least GEMM_TRUSTED_CALL_S: a short call is mostly dispatch and, on a busy machine, waiting
# for a time slice (a 32^3 GEMM took 16 ms instead of 10 us on this 2-core VM under load),
# which 8x-per-doubling scaling would blow up into a skipped size. So sizes are probed from
# here, doubling, up to half the size to project, as long as the budget affords the probe;
# even a user's 8192^3 on a slow CPU is never started blind. Probes cost a fraction of the
# size they are for and are not reported as roofs.
GEMM_PROBE_SIZE = 128
GEMM_TRUSTED_CALL_S = 0.1
# Shortest timed window; long enough that perf_counter resolution and the per-call launch
# overhead (a few microseconds) are well under 1% of it.
MIN_TRIAL_S = {"cpu": 0.02, "cuda": 0.05, "mps": 0.05}
# Bandwidth arrays: each at least LLC_MULTIPLE x the last-level cache and never smaller than
# MIN_BANDWIDTH_ARRAY_BYTES, so no pass is served from cache (STREAM's rule asks for 4x).
LLC_MULTIPLE = 4
MIN_BANDWIDTH_ARRAY_BYTES = 256 * MIB
# Working sets per doubling of size in the sweep: enough to place a cache edge within 41%.
SWEEP_STEPS_PER_OCTAVE = 2
# Bytes each sweep call reads (the working set re-read R times in one kernel), so a call
# is long against the launch overhead: a few microseconds on CPU, ~5 us on a GPU whose
# caches deliver >10 TB/s.
SWEEP_BYTES_PER_CALL = {"cpu": 64 * MIB, "cuda": 1 * GIB, "mps": 256 * MIB}
# Streams need whole cache lines; working sets are rounded to this many bytes.
SWEEP_ALIGN_BYTES = 256
MAX_ITERS_PER_TRIAL = 100_000
ELEMENT_BYTES = 4  # bandwidth kernels use fp32 arrays
# STREAM convention: arrays touched per element (copy: read b, write a; triad: read b, c,
# write a).
STREAM_ARRAYS_TOUCHED = {"copy": 2, "triad": 3}
TRIAD_SCALAR = 3.0

# ---------------------------------------------------------------------------------------
# Formulas (pure)


def gemm_flops(m: int, n: int, k: int) -> int:
    """FLOPs of C[m,n] = A[m,k] @ B[k,n]: one multiply and one add per (i, j, l)."""
    return 2 * m * n * k


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


def window_iters(call_s: float, min_trial_s: float) -> int:
    """Calls per timed window as `calibrate_iters` finds them for a call of `call_s`: the
    smallest power of two whose window lasts `min_trial_s` (1 for a call that long)."""
    iters = 1
    while iters * call_s < min_trial_s and iters < MAX_ITERS_PER_TRIAL:
        iters = min(MAX_ITERS_PER_TRIAL, iters * 2)
    return iters


def gemm_cost_s(call_s: float, *, warmup: int, trials: int, min_trial_s: float) -> float:
    """Projected seconds to measure one GEMM size whose call takes `call_s`: `warmup` calls,
    calibration (windows of 1, 2, 4 ... calls; none when one call fills a window), then
    `trials` windows, each after one untimed call (see `time_interleaved`)."""
    iters = window_iters(call_s, min_trial_s)
    calibration = 0 if iters == 1 else 2 * iters - 1
    return (warmup + calibration + trials * (1 + iters)) * call_s


def projected_call_s(call_s: float, size: int, new_size: int) -> float:
    """A square GEMM call's seconds at `new_size` from one at `size`, at the same FLOP rate.

    Usually an over-estimate, as larger GEMMs run at a higher rate. Where the rate falls
    with size (bf16 emulated on a CPU: 1.3 GFLOP/s at 512, 0.9 at 1024) it under-estimates;
    `measure_gemm` then checks again on the size's own warm-up call before any trial, so the
    overrun is at most its warm-up calls."""
    return call_s * gemm_flops(new_size, new_size, new_size) / gemm_flops(size, size, size)


def summarize_times(times_s: list[float]) -> dict:
    """Best (shortest) and median of per-call times."""
    return {"best_time_s": min(times_s), "median_time_s": statistics.median(times_s)}


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


def fraction_of_roofs(achieved_flop_s: float | None, ceilings_doc: dict, dtype: str) -> dict:
    """Achieved FLOP/s as a fraction of the measured and datasheet roofs (MFU).

    Either entry is None when that roof is unknown for `dtype` (no datasheet entry, a
    precision the device was not measured in, or no achieved figure).
    """
    measured_roof = ((ceilings_doc.get("measured") or {}).get("gemm_flop_s") or {}).get(dtype)
    datasheet_roof = ((ceilings_doc.get("datasheet") or {}).get("flop_s") or {}).get(dtype)

    def fraction(roof):
        if achieved_flop_s is None or not roof:
            return None
        return achieved_flop_s / roof

    return {"measured": fraction(measured_roof), "datasheet": fraction(datasheet_roof)}


def ratios(measured: dict, datasheet: dict | None) -> dict:
    """measured / datasheet per precision and for memory bandwidth (None where unknown)."""
    sheet_flops = (datasheet or {}).get("flop_s") or {}
    gemm = {}
    for precision, value in measured["gemm_flop_s"].items():
        roof = sheet_flops.get(precision)
        gemm[precision] = value / roof if value and roof else None
    sheet_bw = (datasheet or {}).get("memory_bandwidth_bytes_s")
    bw = measured.get("memory_bandwidth_bytes_s")
    return {
        "gemm_flop_s": gemm,
        "memory_bandwidth_bytes_s": bw / sheet_bw if bw and sheet_bw else None,
    }


def notes_for(
    device: str,
    device_name: str,
    datasheet: dict | None,
    ratio: dict,
    peaks_path,
    skipped: dict,
    skipped_sizes: dict | None = None,
) -> str:
    """The human note: where the datasheet came from, what is missing, what looks wrong.

    `skipped` maps a precision to why it has no roof; `skipped_sizes` maps a precision to
    the GEMM sizes left out of its roof ([{"size", "reason"}, ...])."""
    notes = []
    if datasheet is None:
        notes.append(
            f"No entry in {peaks_path} matches {device} device name {device_name!r}: datasheet roofs "
            "and ratios are null (add an entry with a `match:` pattern to compare)."
        )
    elif datasheet.get("derived"):
        notes.append(
            "Datasheet roofs are DERIVED for this CPU (cores x clock x FLOP/cycle from its ISA "
            "flags), not a vendor figure; no memory bandwidth can be derived from the flags."
        )
        if not datasheet.get("clock_hz"):
            notes.append(
                "The CPU clock could not be read (no cpufreq, no 'cpu MHz' in /proc/cpuinfo); "
                "derived FLOP/s are null."
            )
        else:
            # A precision the CPU has no arithmetic for (bf16 without bf16 flags): no roof
            # rather than the fp32 one, which would bound an emulated rate 50x below it.
            for precision, reason in (datasheet.get("flop_s_null_reasons") or {}).items():
                notes.append(f"Derived {precision} peak is null: {reason}.")
    else:
        notes.append(f"Datasheet: {datasheet['name']} ({datasheet['source']}).")
    for precision, value in ratio["gemm_flop_s"].items():
        if value is not None and value > 1:
            if datasheet.get("derived") and datasheet.get("clock_hz"):
                implied = datasheet["clock_hz"] * value
                notes.append(
                    f"Measured {precision} GEMM is {value:.2f}x the derived peak: the clock used "
                    f"({datasheet['clock_hz'] / 1e9:.3f} GHz, {datasheet['clock_source']}) is below the "
                    f"clock the cores ran at (>= {implied / 1e9:.2f} GHz implied), or the FLOP/cycle "
                    "table under-counts this core."
                )
            else:
                notes.append(
                    f"Measured {precision} GEMM is {value:.2f}x the datasheet value: check the "
                    "peaks.yaml entry (dense vs sparse figure, the right board variant)."
                )
    bw_ratio = ratio["memory_bandwidth_bytes_s"]
    if bw_ratio is not None and bw_ratio > 1:
        notes.append(
            f"Measured memory bandwidth is {bw_ratio:.2f}x the datasheet value: the arrays may fit in cache."
        )
    for precision, reason in skipped.items():
        notes.append(f"{precision} not measured: {reason}")
    for precision, rows in (skipped_sizes or {}).items():
        if rows and precision not in skipped:
            sizes = ", ".join(str(row["size"]) for row in rows)
            notes.append(f"{precision} GEMM roof leaves out size(s) {sizes}: {rows[0]['reason']}")
    return " ".join(notes)


# ---------------------------------------------------------------------------------------
# Probes of this machine (files under /proc and /sys, nvidia-smi, torch)


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


def probe_cpu_clock() -> tuple[float | None, str]:
    """Highest max clock of the CPUs this process may use, and where it was read."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    khz = []
    for cpu in cpus:
        path = Path(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/cpuinfo_max_freq")
        with contextlib.suppress(OSError, ValueError):
            khz.append(int(path.read_text()))
    if khz:
        return max(khz) * 1e3, "cpufreq cpuinfo_max_freq"
    with contextlib.suppress(OSError):
        mhz = parse_cpuinfo(Path("/proc/cpuinfo").read_text())["cpu_mhz"]
        if mhz:
            return (
                mhz * 1e6,
                "/proc/cpuinfo 'cpu MHz' (current or nominal clock; boost may be higher)",
            )
    return None, "unreadable"


def nvidia_smi_clocks() -> dict | None:
    """Current and max SM/memory clocks in Hz of the first GPU, or None without nvidia-smi."""
    from nnperf.core import environment  # imports torch; only needed on a GPU machine

    rows = environment.nvidia_smi_rows()
    if not rows:
        return None
    gpu = rows[0]

    def hz(field):
        try:
            return float(gpu[field]) * 1e6  # nvidia-smi reports MHz
        except (TypeError, ValueError):
            return None

    return {
        "sm_clock_hz": hz("clocks.sm"),
        "sm_clock_max_hz": hz("clocks.max.sm"),
        "memory_clock_hz": hz("clocks.mem"),
        "memory_clock_max_hz": hz("clocks.max.mem"),
        "driver": gpu["driver_version"],
    }


# ---------------------------------------------------------------------------------------
# Timing


def synchronize(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
    elif device == "mps":
        torch.mps.synchronize()


def _window_s(fn, device: str, iters: int) -> float:
    """Seconds for `iters` back-to-back calls, closed by one synchronisation."""
    import torch

    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    synchronize(device)
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    synchronize(device)
    return time.perf_counter() - t0


def calibrate_iters(fn, device: str, min_trial_s: float) -> int:
    """Calls per timed window, as timeit.Timer.autorange finds them: double until a window
    lasts `min_trial_s`. (Calibrating on one call would let a single stalled call shrink
    every window to a call or two.)"""
    iters = 1
    while _window_s(fn, device, iters) < min_trial_s and iters < MAX_ITERS_PER_TRIAL:
        iters = min(MAX_ITERS_PER_TRIAL, iters * 2)
    return iters


def time_interleaved(
    fns, device: str, *, warmup: int, trials: int, min_trial_s: float, iters=None
) -> list[dict]:
    """Per-call seconds of each function in `fns`, trials interleaved round-robin.

    Round-robin (trial 1 of every function, then trial 2, ...) spreads a burst of
    interference from other processes over one trial of many measurements instead of all
    trials of one, so best-of-trials stays clean on a shared machine. One untimed call
    before each window puts that function's data back in the caches the previous
    function evicted; with a single function nothing evicts them, so it is left out (for a
    GEMM that takes seconds a call, it would double the cost of every trial).

    `iters` gives calls per window where the caller already knows them (None entries, or
    no list, are calibrated): a call known to fill a window alone needs no calibration.
    """
    known = list(iters) if iters is not None else [None] * len(fns)
    iters = []
    for fn, n in zip(fns, known):
        for _ in range(warmup):
            fn()
        iters.append(n or calibrate_iters(fn, device, min_trial_s))
    refresh = len(fns) > 1
    times = [[] for _ in fns]
    for _ in range(trials):
        for fn, n, out in zip(fns, iters, times):
            if refresh:
                fn()
            out.append(_window_s(fn, device, n) / n)
    return [
        {"times_s": t, "iters_per_trial": n, "trials": trials, **summarize_times(t)}
        for t, n in zip(times, iters)
    ]


# ---------------------------------------------------------------------------------------
# Measurements


@contextlib.contextmanager
def float32_matmul_mode(precision: str):
    """fp32 means TF32 off; tf32 allows it. Restores the previous setting."""
    import torch

    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if precision == "tf32" else "highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)


def torch_dtype(precision: str):
    import torch

    return {
        "fp32": torch.float32,
        "tf32": torch.float32,
        "fp16": torch.float16,
        "bf16": torch.bfloat16,
    }[precision]


def _gemm_call(device: str, dtype, size: int, generator):
    """One square GEMM `out = a @ b` of `size`, its operands drawn on the device (an 8192^2
    matrix takes ~1 s to draw on a CPU)."""
    import torch

    a = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
    b = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
    out = torch.empty(size, size, device=device, dtype=dtype)
    return lambda: torch.matmul(a, b, out=out)


def _fastest_call_s(call, device: str, calls: int, min_trial_s: float) -> float:
    """The fastest of `calls` timed calls, and of one more when one call is shorter than a
    window: a first call carries one-time costs (allocation, thread pools, kernel choice)."""
    times = [_window_s(call, device, 1) for _ in range(calls)]
    if len(times) == 1 and times[0] < min_trial_s:
        times.append(_window_s(call, device, 1))
    return min(times)


def _probe_up_to(size: int, estimate, left_s, device: str, dtype, generator, min_trial_s):
    """(size, seconds per call) to project `size` from: `estimate` when it is trusted for it
    (see GEMM_PROBE_SIZE), else probe GEMMs of doubling sizes below `size` while `left_s()`
    affords two calls of the next one; None when `size` needs no projection (<= the probe
    size)."""
    while True:
        if estimate is None:
            if size <= GEMM_PROBE_SIZE:
                return None
            probe_size = GEMM_PROBE_SIZE
        else:
            probe_size = 2 * estimate[0]
            trusted = size <= probe_size or estimate[1] >= GEMM_TRUSTED_CALL_S
            if trusted or 2 * projected_call_s(estimate[1], estimate[0], probe_size) > left_s():
                return estimate
        probe = _gemm_call(device, dtype, probe_size, generator)
        estimate = (probe_size, _fastest_call_s(probe, device, 2, min_trial_s))


def _skip_rows(sizes, reason: str) -> list[dict]:
    """The first size left out carries the reason; the larger ones point at it."""
    return [{"size": sizes[0], "reason": reason}] + [
        {"size": size, "reason": f"larger than {sizes[0]}, which did not fit the budget"}
        for size in sizes[1:]
    ]


def measure_gemm(
    device: str,
    precision: str,
    sizes,
    *,
    warmup: int,
    trials: int,
    min_trial_s: float,
    budget_s: float | None = None,
    seed: int = 0,
) -> dict:
    """Square GEMM throughput per size; the roof is the best over the sizes measured.

    Sizes run from small to large within `budget_s` seconds (None: `GEMM_BUDGET_S`). A
    size's cost (`gemm_cost_s`) is projected before it starts, from the previous size's
    call or from probe GEMMs (`GEMM_PROBE_SIZE`), and again after its warm-up calls, which
    are timed one by one, from its own fastest call. A size whose cost would overrun
    what is left of the budget is skipped with every larger size; `skipped_sizes` says why.
    Nothing is reported for a size that was not measured whole: with no size left,
    `sizes` is empty and the roofs are None. The sizes kept are then timed together,
    trials interleaved; a size whose call fills a window alone is not calibrated again.
    """
    import torch

    budget = GEMM_BUDGET_S[device] if budget_s is None else budget_s
    generator = torch.Generator(device=device).manual_seed(seed)
    dtype = torch_dtype(precision)
    ordered = sorted(set(sizes))
    started = time.perf_counter()
    committed = 0.0  # projected seconds of the kept sizes' calibration and trials
    kept, calls, known_iters, skipped = [], [], [], []
    estimate = None  # (size, seconds per call) the next size is projected from

    def left_s() -> float:
        return budget - (time.perf_counter() - started) - committed

    with float32_matmul_mode(precision):
        for index, size in enumerate(ordered):
            estimate = _probe_up_to(size, estimate, left_s, device, dtype, generator, min_trial_s)
            if estimate is not None:
                call_s = projected_call_s(estimate[1], estimate[0], size)
                cost = gemm_cost_s(call_s, warmup=warmup, trials=trials, min_trial_s=min_trial_s)
                if cost > left_s():
                    skipped = _skip_rows(
                        ordered[index:],
                        f"a {size}^3 call is projected at {call_s:.3g} s from the "
                        f"{estimate[0]}^3 GEMM's rate, so warm-up and {trials} trials would "
                        f"take ~{cost:.3g} s; {max(0.0, left_s()):.3g} s were left of the "
                        f"{budget:g} s per precision (ceilings.GEMM_BUDGET_S[{device!r}])",
                    )
                    break
            call = _gemm_call(device, dtype, size, generator)
            call_s = _fastest_call_s(call, device, max(1, warmup), min_trial_s)
            rest = gemm_cost_s(call_s, warmup=0, trials=trials, min_trial_s=min_trial_s)
            if rest > left_s():
                skipped = _skip_rows(
                    ordered[index:],
                    f"a {size}^3 call takes {call_s:.3g} s (measured in warm-up), so "
                    f"{trials} trials would take ~{rest:.3g} s more; "
                    f"{max(0.0, left_s()):.3g} s were left of the {budget:g} s per precision "
                    f"(ceilings.GEMM_BUDGET_S[{device!r}])",
                )
                break
            committed += rest
            kept.append(size)
            calls.append(call)
            known_iters.append(1 if call_s >= min_trial_s else None)
            estimate = (size, call_s)
        timings = (
            time_interleaved(
                calls,
                device,
                warmup=0,
                trials=trials,
                min_trial_s=min_trial_s,
                iters=known_iters,
            )
            if calls
            else []
        )
    rows = []
    for size, timing in zip(kept, timings):
        flops = gemm_flops(size, size, size)
        rows.append(
            {
                "m": size,
                "n": size,
                "k": size,
                "flops": flops,
                "best_time_s": timing["best_time_s"],
                "median_time_s": timing["median_time_s"],
                "best_flop_s": flops / timing["best_time_s"],
                "median_flop_s": flops / timing["median_time_s"],
                "trials": trials,
                "iters_per_trial": timing["iters_per_trial"],
            }
        )
    best = max(rows, key=lambda r: r["best_flop_s"]) if rows else None
    return {
        "best_flop_s": best["best_flop_s"] if best else None,
        "median_flop_s": best["median_flop_s"] if best else None,
        "best_size": best["m"] if best else None,
        "sizes": rows,
        "skipped_sizes": skipped,
        "budget_s": budget,
        "duration_s": time.perf_counter() - started,
    }


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


# ---------------------------------------------------------------------------------------
# The whole stage


def _device_identity(device: str) -> tuple[str, list[dict], str, dict]:
    """(device name, caches, cache source, environment) of the device being measured."""
    import torch

    env = {
        "torch": torch.__version__,
        "hostname": platform.node(),
        "python": platform.python_version(),
    }
    with contextlib.suppress(OSError):
        cpu = parse_cpuinfo(Path("/proc/cpuinfo").read_text())
        env.update(
            cpu_model=cpu["model_name"],
            cpu_logical_cpus=cpu["logical_cpus"],
            cpu_physical_cores=cpu["physical_cores"],
        )
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        name = torch.cuda.get_device_name(0)
        caches = (
            [
                {
                    "name": "L2",
                    "level": 2,
                    "type": "Unified",
                    "size_bytes": int(props.L2_cache_size),
                    "shared_cpu_count": None,
                }
            ]
            if getattr(props, "L2_cache_size", 0)
            else []
        )
        env.update(
            cuda=torch.version.cuda,
            cudnn=torch.backends.cudnn.version(),
            capability=f"{props.major}.{props.minor}",
            multi_processor_count=props.multi_processor_count,
            total_memory_bytes=props.total_memory,
            clocks=nvidia_smi_clocks(),
        )
        return name, caches, "torch.cuda.get_device_properties", env
    caches, source = probe_cpu_caches()
    env["cpu_clock_hz"], env["cpu_clock_source"] = probe_cpu_clock()
    if device == "mps":
        return f"Apple {platform.machine()} GPU (MPS)", [], "unknown", env
    return env.get("cpu_model") or platform.processor() or "unknown CPU", caches, source, env


def datasheet_for(
    device: str,
    device_name: str,
    peaks: dict,
    *,
    threads: int,
    cpu_clock_hz: float | None = None,
    cpu_fma_units: int = peaks_mod.DEFAULT_FMA_UNITS,
) -> dict | None:
    """The matching peaks.yaml entry; for an unmatched CPU, the derived peak; else None.

    The derived peak uses `cpu_clock_hz` when given, else the clock read from this machine.
    """
    entry = peaks_mod.match_device(device, device_name, peaks)
    if entry is not None or device != "cpu":
        return entry
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    cpuinfo = parse_cpuinfo(text)
    affinity = (
        os.sched_getaffinity(0)
        if hasattr(os, "sched_getaffinity")
        else set(range(os.cpu_count() or 1))
    )
    cores = min(threads, physical_cores_of(text, affinity) or len(affinity))
    if cpu_clock_hz:
        clock_hz, clock_source = float(cpu_clock_hz), "given"
    else:
        clock_hz, clock_source = probe_cpu_clock()
    return peaks_mod.derived_cpu_peak(cpuinfo, cores, clock_hz, clock_source, cpu_fma_units)


def check_request(request: CeilingsRequest) -> None:
    """One clear line for each setting a user can get wrong (the schema checks the config;
    this checks requests built by hand too)."""
    settings = request.settings
    if request.device not in DEVICES:
        raise NnperfError(f"device {request.device!r} is unknown; allowed: {', '.join(DEVICES)}")
    if request.threads is not None and request.threads < 1:
        raise NnperfError(
            f"threads is {request.threads}; expected null (torch default) or an integer >= 1"
        )
    sizes = settings.gemm_sizes
    if sizes is not None and (not sizes or any(s < 1 for s in sizes)):
        raise NnperfError(
            f"ceilings.gemm_sizes is {list(sizes)}; expected null or a non-empty list of "
            "integers >= 1"
        )
    if settings.trials < 1:
        raise NnperfError(f"ceilings.trials is {settings.trials}; expected an integer >= 1")
    if settings.bandwidth_bytes is not None and settings.bandwidth_bytes < 1:
        raise NnperfError(
            f"ceilings.bandwidth_bytes is {settings.bandwidth_bytes}; expected null or an "
            "integer >= 1"
        )


def measure_ceilings(request: CeilingsRequest) -> dict:
    """Measure every roof of `request.device` and return the ceilings document.

    Settings are checked and the peaks file is read before anything is measured, so a bad
    request fails in a second rather than after minutes of GEMMs.
    """
    import torch

    check_request(request)
    device, settings = request.device, request.settings
    gemm_sizes = list(settings.gemm_sizes or DEFAULT_GEMM_SIZES[device])
    trials, warmup, min_trial_s = settings.trials, WARMUP_CALLS, MIN_TRIAL_S[device]
    working_sets = sweep_working_sets(
        settings.sweep_min_bytes, settings.sweep_max_bytes, SWEEP_STEPS_PER_OCTAVE
    )
    peaks = peaks_mod.load_peaks(request.peaks_path)
    require_available(device, "fp32")
    if request.threads is not None:
        torch.set_num_threads(request.threads)
    started = time.time()
    device_name, caches, cache_source, env = _device_identity(device)
    array_bytes = settings.bandwidth_bytes or bandwidth_array_bytes(last_level_cache_bytes(caches))

    gemm, skipped, skipped_sizes = {}, {}, {}
    for precision in SUPPORTED_PRECISIONS[device]:
        try:
            require_available(device, precision)
        except NnperfError as exc:
            skipped[precision] = str(exc)
            continue
        result = measure_gemm(
            device, precision, gemm_sizes, warmup=warmup, trials=trials, min_trial_s=min_trial_s
        )
        if result["skipped_sizes"]:
            skipped_sizes[precision] = result["skipped_sizes"]
        if result["sizes"]:
            gemm[precision] = result
        else:
            skipped[precision] = (
                f"no GEMM size fits the time budget: {result['skipped_sizes'][0]['reason']}"
            )
    stream = measure_stream(
        device, array_bytes, warmup=warmup, trials=trials, min_trial_s=min_trial_s
    )
    sweep = measure_sweep(
        device,
        working_sets,
        bytes_per_call=SWEEP_BYTES_PER_CALL[device],
        warmup=warmup,
        trials=trials,
        min_trial_s=min_trial_s,
    )
    best_kernel = max(stream, key=lambda k: stream[k]["best_bandwidth_bytes_s"])
    measured = {
        "gemm_flop_s": {p: g["best_flop_s"] for p, g in gemm.items()},
        "gemm_flop_s_median": {p: g["median_flop_s"] for p, g in gemm.items()},
        "memory_bandwidth_bytes_s": stream[best_kernel]["best_bandwidth_bytes_s"],
        "memory_bandwidth_kernel": best_kernel,
        "sweep": sweep,
        "gemm": gemm,
        "bandwidth": {
            "array_bytes": array_bytes,
            "element_bytes": ELEMENT_BYTES,
            "convention": "STREAM: each array element read or written counts once (copy 2, triad 3 "
            "arrays); write-allocate traffic not counted",
            **stream,
        },
        "sweep_kernel": "sum over rows of x.expand(R, n): read-only, R re-reads of the working set per call",
    }
    threads_used = torch.get_num_threads()
    datasheet = datasheet_for(device, device_name, peaks, threads=threads_used)
    ratio = ratios(measured, datasheet)
    ended = time.time()
    return {
        "device": device,
        "device_name": device_name,
        "threads": threads_used,
        "measured": measured,
        "datasheet": datasheet,
        "ratio_measured_to_datasheet": ratio,
        "note": notes_for(
            device, device_name, datasheet, ratio, request.peaks_path, skipped, skipped_sizes
        ),
        "skipped_precisions": skipped,
        # GEMM sizes left out of a roof by the time budget, per precision, with the reason.
        "skipped_gemm_sizes": skipped_sizes,
        "caches": caches,
        "cache_source": cache_source,
        # The request as measured: null sizes resolved to the device's own, the array size
        # actually used, and the fixed settings that are not config keys.
        "settings": {
            **to_dict(settings),
            "gemm_sizes": gemm_sizes,
            "bandwidth_bytes": array_bytes,
            "warmup": warmup,
            "min_trial_s": min_trial_s,
            "gemm_budget_s": GEMM_BUDGET_S[device],
            "gemm_probe_size": GEMM_PROBE_SIZE,
            "sweep_steps_per_octave": SWEEP_STEPS_PER_OCTAVE,
            "sweep_bytes_per_call": SWEEP_BYTES_PER_CALL[device],
            "peaks": str(request.peaks_path),
            "cpu_fma_units": peaks_mod.DEFAULT_FMA_UNITS,
            "threads": request.threads,
        },
        "environment": env,
        "started_at_unix": started,
        "ended_at_unix": ended,
        "duration_s": ended - started,
    }


def write_ceilings(request: CeilingsRequest, out_json) -> dict:
    """Measure (`measure_ceilings`) and write the document to `out_json`; return it."""
    document = measure_ceilings(request)
    files.write_json(out_json, document)
    return document


def summary(document: dict) -> str:
    """One line for the job log: the compute roofs and the memory roof."""
    measured = document["measured"]
    flops = ", ".join(f"{p} {v / 1e9:.1f} GFLOP/s" for p, v in measured["gemm_flop_s"].items())
    flops = flops or "no GEMM roof (see the note)"
    return (
        f"{document['device_name']} ({document['device']}): {flops}; memory "
        f"{measured['memory_bandwidth_bytes_s'] / 1e9:.1f} GB/s "
        f"({measured['memory_bandwidth_kernel']})"
    )
