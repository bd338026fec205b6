"""Empirical roofs: what this machine actually reaches, next to what the datasheet says.

A roofline is only as honest as its roofs. The ceilings stage measures

* compute roofs: large square GEMMs per precision the device can run, best over several
  sizes and trials, within a time budget per precision (`nnperf.roofline.compute_roofs`);
* a main-memory bandwidth roof (STREAM copy and triad) and a working-set sweep whose
  plateaus show the cache levels (`nnperf.roofline.memory_roofs`);

and this module assembles them with the datasheet entry (`nnperf.roofline.peaks`) into the
document written to `results/ceilings/{device}.json`: the roofs, their ratios to the datasheet,
the caches, clocks and environment, as codes and numbers. What is missing or looks wrong is
worded from the document for the job's log (`notes_of`), not stored in it.
`measure_ceilings(request)` takes a `nnperf.core.contract.CeilingsRequest`, whose `settings`
are the config's `ceilings:` section (and own its defaults); what is not a config key (warm-up
calls, the shortest timed window, the sweep's steps per octave) is a named constant below.
Rule `ceilings` runs `write_ceilings` and hashes this module, which imports every module it
runs (`nnperf.core.codehash`).

Timing follows the timed runs (`nnperf.roofline.microbench`): warm-up calls, then trials of
calibrated windows of back-to-back calls; best and median over trials are reported.

Not here: datasheet numbers and the derived CPU peak (`nnperf.roofline.peaks`), drawing
(`nnperf.report.plots.ceilings`).
"""

from __future__ import annotations

import contextlib
import os
import platform
import time
from pathlib import Path

from nnperf.core import files
from nnperf.core.contract import CeilingsRequest, to_dict
from nnperf.core.cpuinfo import parse_cpuinfo, physical_cores_of
from nnperf.core.devices import MIN_CUDA_CAPABILITY, require_available
from nnperf.core.errors import NnperfError
from nnperf.core.vocab import DEVICES, SUPPORTED_PRECISIONS
from nnperf.roofline import peaks as peaks_mod
from nnperf.roofline.compute_roofs import GEMM_BUDGET_S, GEMM_PROBE_SIZE, measure_gemm, skip_reason
from nnperf.roofline.memory_roofs import (
    ELEMENT_BYTES,
    GIB,
    MIB,
    bandwidth_array_bytes,
    last_level_cache_bytes,
    measure_stream,
    measure_sweep,
    probe_cpu_caches,
    sweep_working_sets,
)

# Square GEMM sizes per device when config `ceilings.gemm_sizes` is null: large enough to be
# compute-bound there, small enough to take seconds.
DEFAULT_GEMM_SIZES = {
    "cpu": (512, 1024, 2048),
    "cuda": (2048, 4096, 8192),
    "mps": (1024, 2048, 4096),
}
# Untimed calls before each measurement (first-call allocation, kernel selection, clocks up).
WARMUP_CALLS = 2
# Shortest timed window; long enough that perf_counter resolution and the per-call launch
# overhead (a few microseconds) are well under 1% of it.
MIN_TRIAL_S = {"cpu": 0.02, "cuda": 0.05, "mps": 0.05}
# Working sets per doubling of size in the sweep: enough to place a cache edge within 41%.
SWEEP_STEPS_PER_OCTAVE = 2
# Bytes each sweep call reads (the working set re-read R times in one kernel), so a call
# is long against the launch overhead: a few microseconds on CPU, ~5 us on a GPU whose
# caches deliver >10 TB/s.
SWEEP_BYTES_PER_CALL = {"cpu": 64 * MIB, "cuda": 1 * GIB, "mps": 256 * MIB}


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
    capability: str | None = None,
) -> str:
    """The human note: where the datasheet came from, what is missing, what looks wrong.

    `skipped` maps a precision to why it has no roof (`no_size_fits`, `unavailable`, or the
    text of a document from before the codes); `skipped_sizes` maps a precision to the GEMM
    sizes left out of its roof ([{"size", "reason", ...numbers}, ...], `skip_reason`);
    `capability` is a CUDA device's compute capability."""
    notes = []
    if datasheet is None:
        notes.append(
            f"No entry in {peaks_path} matches {device} device name {device_name!r}: datasheet roofs "
            "and ratios are null (add an entry with a `match:` pattern to compare)."
        )
    elif datasheet.get("derived"):
        notes.append(
            "The peaks of this CPU are DERIVED (cores x clock x FLOP/cycle from its ISA "
            "flags), not datasheet figures; no memory bandwidth can be derived from the flags."
        )
        if not datasheet.get("clock_hz"):
            notes.append(
                "The CPU clock could not be read (no cpufreq, no 'cpu MHz' in /proc/cpuinfo); "
                "derived FLOP/s are null."
            )
        else:
            # A precision the CPU has no arithmetic for (bf16 without bf16 flags): no roof
            # rather than the fp32 one, which would bound an emulated rate 50x below it.
            for precision, code in (datasheet.get("flop_s_null_reasons") or {}).items():
                reason = peaks_mod.null_peak_reason(code, datasheet)
                notes.append(f"Derived {precision} peak is null: {reason}.")
    else:
        notes.append(f"Datasheet: {datasheet['name']} (peaks.yaml entry {datasheet.get('key')}).")
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
        rows = (skipped_sizes or {}).get(precision)
        if reason == "no_size_fits":
            reason = "no GEMM size fits the time budget" + (
                f": {skip_reason(rows[0], device)}" if rows else ""
            )
        elif reason == "unavailable" and device == "cuda":
            needed = ".".join(map(str, MIN_CUDA_CAPABILITY[precision]))
            reason = (
                f"precision {precision!r} needs CUDA compute capability {needed}+, but "
                f"{device_name} is {capability}"
            )
        elif reason == "unavailable":
            reason = f"precision {precision!r} cannot run on device {device!r} here"
        notes.append(f"{precision} not measured: {reason}")
    for precision, rows in (skipped_sizes or {}).items():
        if rows and precision not in skipped:
            sizes = ", ".join(str(row["size"]) for row in rows)
            notes.append(
                f"{precision} GEMM roof leaves out size(s) {sizes}: {skip_reason(rows[0], device)}"
            )
    return " ".join(notes)


# ---------------------------------------------------------------------------------------
# Clocks of this machine (cpufreq, /proc/cpuinfo, nvidia-smi)


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
    if entry is not None:
        # The citation stays in peaks.yaml, named by the entry's key: the JSON holds data.
        return {**entry, "source": "peaks.yaml"}
    if device != "cpu":
        return None
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
        except NnperfError:
            skipped[precision] = "unavailable"  # fp32 ran: on CUDA, too low a capability
            continue
        result = measure_gemm(
            device, precision, gemm_sizes, warmup=warmup, trials=trials, min_trial_s=min_trial_s
        )
        if result["skipped_sizes"]:
            skipped_sizes[precision] = result["skipped_sizes"]
        if result["sizes"]:
            gemm[precision] = result
        else:
            skipped[precision] = "no_size_fits"
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
            # Each array element read or written counts once (copy 2, triad 3 arrays), no
            # write-allocate traffic (nnperf.roofline.memory_roofs).
            "convention": "stream",
            **stream,
        },
        # A sum over rows of x.expand(R, n): read-only, R re-reads of the working set per call
        # (nnperf.roofline.memory_roofs.measure_sweep).
        "sweep_kernel": "expand_sum_readonly",
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
        # Why a precision has no roof (a code, worded by `notes_of`).
        "skipped_precisions": skipped,
        # GEMM sizes left out of a roof by the time budget, per precision, with the reason
        # (a `compute_roofs.SKIP_REASONS` code and its numbers).
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


def notes_of(document: dict) -> str:
    """`notes_for` a ceilings document: what is missing or looks wrong, for the job's log."""
    return notes_for(
        document["device"],
        document["device_name"],
        document.get("datasheet"),
        document["ratio_measured_to_datasheet"],
        (document.get("settings") or {}).get("peaks"),
        document.get("skipped_precisions") or {},
        document.get("skipped_gemm_sizes"),
        (document.get("environment") or {}).get("capability"),
    )


def summary(document: dict) -> str:
    """Lines for the job log: the compute roofs and the memory roof, then `notes_of`."""
    measured = document["measured"]
    flops = ", ".join(f"{p} {v / 1e9:.1f} GFLOP/s" for p, v in measured["gemm_flop_s"].items())
    flops = flops or "no GEMM roof (see below)"
    return (
        f"{document['device_name']} ({document['device']}): {flops}; memory "
        f"{measured['memory_bandwidth_bytes_s'] / 1e9:.1f} GB/s "
        f"({measured['memory_bandwidth_kernel']})\n{notes_of(document)}"
    )
