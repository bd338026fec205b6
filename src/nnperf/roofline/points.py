"""Roofline arithmetic: points from ncu kernels or from analytic estimates, and their ceilings.

The roofline model bounds a kernel's performance P (FLOP/s) by min(peak FLOP/s, AI x peak
bandwidth), with arithmetic intensity AI = FLOPs / bytes moved at one memory level. The
hierarchical variant (NERSC; Yang, Kurth, Williams, CCPE 2020) plots the same FLOPs against the
bytes at DRAM, L2 and L1, one point per level, so the distance between a kernel's points shows
where its data comes from.

Two sources of points, always labelled:
* `ncu`: per kernel and per step from Nsight Compute counters (`nnperf.ncu.kernels` table), at
  each level `dram`, `l2`, `l1`; the step is the sum over the step's kernels (time = sum of
  kernel durations, i.e. GPU busy time under the profiler, not wall time).
* `analytic` (CPU, MPS, or any run without a profile): FLOPs = complexity
  `train_step_flops_per_image` x batch, bytes = algorithmic (no-reuse) traffic
  `fixed_bytes + batch x per_image_bytes`, time = median step time of the timed runs; memory
  level `algorithmic`.

The formulas and frames take data and return data; reading the tables and writing
`roofline_points.csv` (rule `roofline_points`) is `nnperf.roofline.tables`. Drawing is
`nnperf.report.plots.roofline`.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping

import pandas as pd

from nnperf.core.errors import NnperfError
from nnperf.core.vocab import CONFIG_KEYS
from nnperf.ncu import metrics
from nnperf.ncu import ranges
from nnperf.ncu.kernels import PEAK_COLUMNS
from nnperf.roofline import peaks
from nnperf.torchprof import analysis

MEMORY_LEVELS = ("dram", "l2", "l1")
# The memory levels a ceilings JSON's main-memory bandwidth bounds: DRAM, and the
# algorithmic (no-reuse) traffic of analytic points, which is main-memory traffic too.
JSON_BANDWIDTH_LEVELS = ("dram", "algorithmic")
POINT_COLUMNS = (
    *CONFIG_KEYS,
    "source",
    "granularity",
    "kernel_name",
    "kind",
    "memory_level",
    "flops",
    "bytes",
    "time_s",
    "arithmetic_intensity_flop_per_byte",
    "performance_flop_s",
)


# --------------------------------------------------------------------------------------------
# Formulas.
# --------------------------------------------------------------------------------------------
def arithmetic_intensity(flops: float, bytes_moved: float) -> float:
    """FLOPs per byte; NaN when no bytes were moved (the point has no place on the x axis)."""
    if not bytes_moved or bytes_moved <= 0 or math.isnan(bytes_moved):
        return math.nan
    return flops / bytes_moved


def performance(flops: float, time_s: float) -> float:
    """Achieved FLOP/s; NaN for a zero or missing time."""
    if not time_s or time_s <= 0 or math.isnan(time_s):
        return math.nan
    return flops / time_s


def attainable(intensity: float, peak_flop_s: float, bandwidth_bytes_s: float) -> float:
    """Roofline bound: min(peak, AI x bandwidth)."""
    return min(peak_flop_s, intensity * bandwidth_bytes_s)


def ridge_point(peak_flop_s: float, bandwidth_bytes_s: float) -> float:
    """AI (FLOP/byte) where the memory roof meets the compute roof."""
    return peak_flop_s / bandwidth_bytes_s


def calibration_ratio(measured_flops: float, expected_flops: float) -> float:
    """measured / expected FLOPs of the calibration GEMM (1.0 = exact counting)."""
    if expected_flops <= 0:
        raise NnperfError(f"calibration expected FLOPs {expected_flops!r} must be positive")
    return measured_flops / expected_flops


def calibration_ok(ratio: float, tolerance: float = ranges.CALIBRATION_TOLERANCE) -> bool:
    """Within `tolerance` (2 %) of exact."""
    return bool(abs(ratio - 1.0) <= tolerance)


# --------------------------------------------------------------------------------------------
# ncu points.
# --------------------------------------------------------------------------------------------
def _point(
    config: Mapping,
    source: str,
    granularity: str,
    kernel_name: str,
    kind: str,
    level: str,
    flops: float,
    bytes_moved: float,
    time_s: float,
) -> dict:
    row = {key: config[key] for key in CONFIG_KEYS}
    row.update(
        source=source,
        granularity=granularity,
        kernel_name=kernel_name,
        kind=kind,
        memory_level=level,
        flops=flops,
        bytes=bytes_moved,
        time_s=time_s,
        arithmetic_intensity_flop_per_byte=arithmetic_intensity(flops, bytes_moved),
        performance_flop_s=performance(flops, time_s),
    )
    return row


def step_kernels(kernels: pd.DataFrame) -> pd.DataFrame:
    """The kernels of the training step: everything ncu profiled except the calibration GEMM."""
    return kernels[kernels["phase"] != "calibration"]


def ncu_points(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per-kernel and per-step points at each memory level from a kernels table."""
    rows = []
    for _, config_kernels in kernels.groupby(list(CONFIG_KEYS), sort=True):
        step = step_kernels(config_kernels)
        if step.empty:
            continue
        config = step.iloc[0]
        for k in step.itertuples(index=False):
            for level in MEMORY_LEVELS:
                rows.append(
                    _point(
                        config,
                        "ncu",
                        "kernel",
                        k.kernel_name,
                        k.kind,
                        level,
                        float(k.flops_total),
                        float(getattr(k, f"bytes_{level}")),
                        float(k.duration_s),
                    )
                )
        flops = float(step["flops_total"].sum())
        time_s = float(step["duration_s"].sum())
        for level in MEMORY_LEVELS:
            rows.append(
                _point(
                    config,
                    "ncu",
                    "step",
                    "",
                    "step",
                    level,
                    flops,
                    float(step[f"bytes_{level}"].sum()),
                    time_s,
                )
            )
    return pd.DataFrame(rows, columns=list(POINT_COLUMNS))


CEILING_KEYS = ("clock_hz", *PEAK_COLUMNS)


def ncu_ceilings(kernels: pd.DataFrame) -> dict[str, float]:
    """The profile's own ceilings: median over its kernels of `peak_sustained x clock`.

    Each kernel reports the clock it ran at; with `--clock-control base` they agree, with
    `none` they vary with boost, and the median is the typical clock of the profile.
    """
    result = {}
    for key in CEILING_KEYS:
        values = pd.to_numeric(kernels[key], errors="coerce").dropna() if key in kernels else []
        result[key] = float(values.median()) if len(values) else math.nan
    return result


# A GEMM of the calibration's size runs close to the compute roof of its precision: cuBLAS
# reaches 80-95% of the dense peak at 4096^3. Below half of the roof, or above it, the roof is
# wrong (a sparse rate taken for the dense one reads as 45%; a roof below what the hardware
# did reads above 100%), so every reading against that roof is flagged.
CALIBRATION_ROOF_RANGE = (0.5, 1.0)
CALIBRATION_COLUMNS = (
    "calibration_flops_measured",
    "calibration_flops_expected",
    "calibration_ratio",
    "calibration_ok",
    "calibration_time_s",
    "calibration_clock_hz",
    "calibration_flop_s",
    "calibration_roof_flop_s",
    "calibration_roof_fraction",
    "roof_ok",
    "roof_basis",
)


def roof_fraction_ok(fraction: float, limits: tuple[float, float] = CALIBRATION_ROOF_RANGE) -> bool:
    """Whether the calibration GEMM's share of its roof says the roof is right."""
    low, high = limits
    return bool(math.isfinite(fraction) and low <= fraction <= high)


def roof_basis(arch: str, precision: str) -> str:
    """How a profile's compute roof for `precision` was derived (for tables and figures)."""
    if not metrics.TENSOR_DTYPE_OF_PRECISION.get(precision):
        return "ncu FFMA peak_sustained x 2 x clock (FP32 pipe)"
    return metrics.metric_set(arch).tensor_peak_basis


def calibration_table(
    kernels: pd.DataFrame,
    mnk: tuple[int, int, int] = ranges.CALIBRATION_GEMM_MNK,
    launches: int = 1,
    tolerance: float = ranges.CALIBRATION_TOLERANCE,
) -> pd.DataFrame:
    """Per config, the calibration GEMM as the check of both the counters and the roof.

    Counters: FLOPs counted in the calibration range vs 2*M*N*K x launches (`calibration_ok`:
    within `tolerance`). Roof: the GEMM's achieved rate (its known FLOPs over its kernel time)
    over the profile's compute roof for the run's precision at the GEMM's own clock
    (`calibration_roof_fraction`; `roof_ok` when in `CALIBRATION_ROOF_RANGE`). A config
    without a calibration kernel gets NaN and both checks False.
    """
    expected = float(ranges.gemm_flops(*mnk) * launches)
    rows = []
    for keys, config_kernels in kernels.groupby(list(CONFIG_KEYS), sort=True):
        calib = config_kernels[config_kernels["phase"] == "calibration"]
        row = dict(zip(CONFIG_KEYS, keys))
        arch = str(config_kernels["arch"].iloc[0]) if "arch" in config_kernels else "hopper"
        row["roof_basis"] = roof_basis(arch, row["precision"])
        if calib.empty:
            row.update(
                calibration_flops_measured=math.nan,
                calibration_flops_expected=expected,
                calibration_ratio=math.nan,
                calibration_ok=False,
                calibration_time_s=math.nan,
                calibration_clock_hz=math.nan,
                calibration_flop_s=math.nan,
                calibration_roof_flop_s=math.nan,
                calibration_roof_fraction=math.nan,
                roof_ok=False,
            )
        else:
            measured = float(calib["flops_total"].sum())
            ratio = calibration_ratio(measured, expected)
            time_s = float(calib["duration_s"].sum())
            roof = float(
                pd.to_numeric(calib[metrics.compute_peak_column(row["precision"])]).median()
            )
            achieved = performance(expected, time_s)
            fraction = achieved / roof if roof > 0 else math.nan
            row.update(
                calibration_flops_measured=measured,
                calibration_flops_expected=expected,
                calibration_ratio=ratio,
                calibration_ok=calibration_ok(ratio, tolerance),
                calibration_time_s=time_s,
                calibration_clock_hz=float(pd.to_numeric(calib["clock_hz"]).median()),
                calibration_flop_s=achieved,
                calibration_roof_flop_s=roof,
                calibration_roof_fraction=fraction,
                roof_ok=roof_fraction_ok(fraction),
            )
        rows.append(row)
    return pd.DataFrame(rows, columns=[*CONFIG_KEYS, *CALIBRATION_COLUMNS])


def busy_verdict(busy_share: float, busy_share_upper: float) -> str:
    """What the GPU's busy share of the timed step says, read with the thresholds the
    operator profiles use (`nnperf.torchprof.analysis.DEVICE_BOUND_SHARE`, `HOST_BOUND_SHARE`):
    `host-bound` when even the upper estimate is under the host-bound share, `device-bound`
    when the estimate at the runs' clock reaches the device-bound share, `mixed` between;
    `unknown` without a step time, or when only the upper estimate is known (no run clock)
    and it does not settle the question."""
    if not math.isfinite(busy_share_upper):
        return "unknown"
    if busy_share_upper < analysis.HOST_BOUND_SHARE:
        return analysis.HOST_BOUND
    if not math.isfinite(busy_share):
        return "unknown"
    if busy_share >= analysis.DEVICE_BOUND_SHARE:
        return analysis.DEVICE_BOUND
    return analysis.MIXED


PROFILE_COLUMNS = (
    *CONFIG_KEYS,
    "arch",
    "clock_control",
    "kernels",
    "kernel_time_s",
    "profiled_sm_clock_hz",
    "flops_ncu",
    "flops_analytic",
    "ratio_ncu_to_analytic",
    *CALIBRATION_COLUMNS,
    "step_time_s",
    "run_sm_clock_hz",
    "kernel_time_at_run_clock_s",
    "busy_share",
    "busy_share_at_profiled_clock",
    "busy_verdict",
)


def profiles_table(
    kernels: pd.DataFrame, points: pd.DataFrame, summary: pd.DataFrame | None = None
) -> pd.DataFrame:
    """One row per profiled configuration: what its profile says and how far to trust it.

    * FLOPs: the step's ncu FLOPs next to the analytic count (`ratio_ncu_to_analytic`).
    * The calibration GEMM (`calibration_table`): counters exact, roof plausible.
    * The GPU's busy share of the timed step: the step's kernel time under ncu, at the
      profiled SM clock, scaled to the clock the timed windows ran at (summary.csv
      `sm_clock_hz_median`; ncu locks base clocks, timed runs boost), over the timed median
      step time. Scaling assumes kernel time goes as 1/clock, which overstates the gain of a
      memory-bound kernel; kernels under ncu also start with flushed caches. So
      `busy_share_at_profiled_clock` (unscaled) is an upper estimate and `busy_share` the
      estimate at the runs' clock; `busy_verdict` reads both (`busy_verdict`).
    Without a timed step (no summary row, or the configuration did not measure) the busy
    columns are NaN and the verdict `unknown`.
    """
    if kernels.empty:
        return pd.DataFrame(columns=list(PROFILE_COLUMNS))
    calibration = calibration_table(kernels)
    runs = _run_facts(summary)
    steps = points[points["granularity"] == "step"] if not points.empty else points
    rows = []
    for keys, config_kernels in kernels.groupby(list(CONFIG_KEYS), sort=True):
        step = step_kernels(config_kernels)
        row = dict(zip(CONFIG_KEYS, keys))
        matching = steps
        for key in CONFIG_KEYS:
            matching = matching[matching[key] == row[key]] if not matching.empty else matching
        flops_ncu = _first(matching, "ncu")
        flops_analytic = _first(matching, "analytic")
        kernel_time = float(step["duration_s"].sum())
        profiled_clock = float(pd.to_numeric(step["clock_hz"]).median()) if len(step) else math.nan
        step_time, run_clock = runs.get(tuple(keys), (math.nan, math.nan))
        # No run clock (no NVML during the windows): nothing to scale to, no estimate.
        at_run_clock = kernel_time * profiled_clock / run_clock if run_clock > 0 else math.nan
        upper = kernel_time / step_time if step_time > 0 else math.nan
        share = at_run_clock / step_time if step_time > 0 and run_clock > 0 else math.nan
        row.update(
            arch=str(config_kernels["arch"].iloc[0]),
            clock_control=str(config_kernels["clock_control"].iloc[0]),
            kernels=len(step),
            kernel_time_s=kernel_time,
            profiled_sm_clock_hz=profiled_clock,
            flops_ncu=flops_ncu,
            flops_analytic=flops_analytic,
            ratio_ncu_to_analytic=(
                flops_ncu / flops_analytic if flops_analytic and flops_analytic > 0 else math.nan
            ),
            step_time_s=step_time,
            run_sm_clock_hz=run_clock,
            kernel_time_at_run_clock_s=at_run_clock,
            busy_share=share,
            busy_share_at_profiled_clock=upper,
            busy_verdict=busy_verdict(share, upper),
        )
        rows.append(row)
    table = pd.DataFrame(rows).merge(calibration, on=list(CONFIG_KEYS), how="left")
    return table.loc[:, list(PROFILE_COLUMNS)]


def _first(steps: pd.DataFrame, source: str) -> float:
    match = steps[steps["source"] == source] if not steps.empty else steps
    return float(match["flops"].iloc[0]) if len(match) else math.nan


def _run_facts(summary: pd.DataFrame | None) -> dict[tuple, tuple[float, float]]:
    """(median step time, median SM clock of the timed windows) per configuration."""
    if summary is None or summary.empty:
        return {}
    facts = {}
    for row in summary.to_dict("records"):
        key = tuple(int(row[k]) if k == "batch_size" else row[k] for k in CONFIG_KEYS)
        facts[key] = (
            _number(row.get("step_time_s_median")),
            _number(row.get("sm_clock_hz_median")),
        )
    return facts


def _number(value) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return math.nan
    return number if math.isfinite(number) else math.nan


# --------------------------------------------------------------------------------------------
# Analytic points.
# --------------------------------------------------------------------------------------------
def analytic_flops(complexity: Mapping, batch_size: int) -> float:
    """Training-step FLOPs at batch B: `train_step_flops_per_image` x B."""
    try:
        return float(complexity["train_step_flops_per_image"]) * batch_size
    except (KeyError, TypeError, ValueError):
        raise NnperfError(
            f"complexity of {complexity.get('model', '?')!r}: train_step_flops_per_image "
            f"{complexity.get('train_step_flops_per_image')!r} is not a number"
        ) from None


def analytic_bytes(complexity: Mapping, precision: str, batch_size: int) -> float:
    """Algorithmic (no-reuse) traffic of one step: `fixed_bytes + B x per_image_bytes`."""
    traffic = complexity.get("traffic") or {}
    if precision not in traffic:
        raise NnperfError(
            f"complexity of {complexity.get('model', '?')!r}: traffic has no precision "
            f"{precision!r}; present: {', '.join(sorted(traffic)) or 'none'}"
        )
    entry = traffic[precision]
    try:
        return float(entry["fixed_bytes"]) + batch_size * float(entry["per_image_bytes"])
    except (KeyError, TypeError, ValueError):
        raise NnperfError(
            f"complexity of {complexity.get('model', '?')!r}: traffic[{precision!r}] must have "
            "numeric fixed_bytes and per_image_bytes"
        ) from None


def analytic_point(complexity: Mapping, config: Mapping, step_time_s: float) -> dict:
    """One `analytic` step point for `config` (the CONFIG_KEYS) at `step_time_s`."""
    batch_size = int(config["batch_size"])
    flops = analytic_flops(complexity, batch_size)
    bytes_moved = analytic_bytes(complexity, config["precision"], batch_size)
    return _point(
        config,
        "analytic",
        "step",
        "",
        "step",
        "algorithmic",
        flops,
        bytes_moved,
        float(step_time_s),
    )


def step_times(summary: pd.DataFrame) -> dict[tuple, float]:
    """Median step time per configuration (CONFIG_KEYS tuple) from summary.csv.

    `step_time_s_median` there is the median over every timed step of a configuration (all its
    median step; a configuration without one (every rep out of memory), or not measured `ok`
    (a `host_busy` one keeps its clean windows' median), has no point.
    """
    timed = summary.dropna(subset=["step_time_s_median"])
    if "status" in timed:
        # A host_busy configuration keeps its clean windows' numbers, but they are no point.
        timed = timed[timed["status"].astype(str) == "ok"]
    return {
        (row.device, row.model, row.precision, int(row.batch_size), row.variant): float(
            row.step_time_s_median
        )
        for row in timed.itertuples(index=False)
    }


def analytic_points(
    complexities: Mapping[str, Mapping], times: Mapping[tuple, float]
) -> pd.DataFrame:
    """Analytic step points for every timed config (`step_times`; complexity keyed by model)."""
    rows = []
    for key, step_time_s in sorted(times.items()):
        config = dict(zip(CONFIG_KEYS, key))
        if config["model"] not in complexities:
            raise NnperfError(
                f"no complexity for model {config['model']!r}; have: "
                f"{', '.join(sorted(complexities)) or 'none'}"
            )
        rows.append(analytic_point(complexities[config["model"]], config, step_time_s))
    return pd.DataFrame(rows, columns=list(POINT_COLUMNS))


# --------------------------------------------------------------------------------------------
# Ceilings from the ceilings stage (results/ceilings/{device}.json).
# --------------------------------------------------------------------------------------------
def json_ceilings(document: Mapping, dtypes: Iterable[str]) -> list[dict]:
    """Roofs from a ceilings JSON: measured (solid) and datasheet (dashed) or derived
    (`peaks.peak_origin`: a CPU's cores x clock x FLOP/cycle, never labelled a datasheet),
    for `dtypes` (the ceilings JSON names its dtypes as nnperf names its precisions).

    Returns dicts `{label, kind: compute|memory, value, origin: measured|datasheet|derived}`
    with the `precision` a compute roof bounds and the memory `levels` a bandwidth roof
    bounds (main memory: `JSON_BANDWIDTH_LEVELS`); entries the document lacks are left out.
    """
    roofs: list[dict] = []
    wanted = list(dict.fromkeys(dtypes))
    for origin in ("measured", "datasheet"):
        section = document.get(origin) or {}
        name = origin if origin == "measured" else peaks.peak_origin(section)
        flop_s = section.get("gemm_flop_s" if origin == "measured" else "flop_s") or {}
        for dtype in wanted:
            value = flop_s.get(dtype)
            if isinstance(value, (int, float)) and value > 0:
                roofs.append(
                    {
                        "label": f"{name} {dtype}",
                        "kind": "compute",
                        "value": float(value),
                        "origin": name,
                        "precision": dtype,
                    }
                )
        bandwidth = section.get("memory_bandwidth_bytes_s")
        if isinstance(bandwidth, (int, float)) and bandwidth > 0:
            roofs.append(
                {
                    "label": f"{name} memory",
                    "kind": "memory",
                    "value": float(bandwidth),
                    "origin": name,
                    "levels": JSON_BANDWIDTH_LEVELS,
                }
            )
    return roofs


def roofs_exceeded(point: Mapping, roofs: Iterable[Mapping]) -> list[dict]:
    """The roofs a measured point lies above, each with the point's `fraction` of it.

    A compute roof bounds the points of its `precision`; a bandwidth roof, at the point's
    intensity, the points of its memory `levels`. A roof without those keys (the profile's
    own, drawn per figure) is not judged here. A point cannot beat a roof: one above it
    means the roof is under-measured (or the point's FLOPs overcounted)."""
    performance = point.get("performance_flop_s")
    intensity = point.get("arithmetic_intensity_flop_per_byte")
    if performance is None or not performance > 0:
        return []
    exceeded = []
    for roof in roofs:
        if roof.get("kind") == "compute" and roof.get("precision") == point.get("precision"):
            bound = roof["value"]
        elif roof.get("kind") == "memory" and point.get("memory_level") in roof.get("levels", ()):
            bound = roof["value"] * intensity if intensity and intensity > 0 else None
        else:
            continue
        if bound and performance > bound:
            exceeded.append({**roof, "fraction": performance / bound})
    return exceeded
