"""The written analysis: tables in, findings and report sections out, then HTML/Markdown.

Every sentence that states a result is built here from the tables the pipeline wrote
(summary.csv, runs.csv, roofline_points.csv, kernels.csv, the complexity and ceilings
JSONs, environment.csv), with its numbers; nothing about the results is fixed prose. The
tables carry a `machine` column (see `nnperf.machines`), so one report can compare several
machines. Each section lists the files its numbers came from.

Functions take frames and return frames, strings or `Section`s; rendering takes a
`Document` and a function that turns a figure path into an `<img src>` (a data URI for the
self-contained HTML, a relative path for Markdown). Reading files and writing the report is
`nnperf.commands.render_report`'s job; drawing the per-stage figures is the other stages'.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

import pandas as pd

from nnperf import machines as machines_mod

CONFIG_KEYS = ("device", "model", "precision", "batch_size", "variant")
GROUP_KEYS = ("machine",) + CONFIG_KEYS
PHASES = ("data_wait", "h2d", "forward", "backward", "optimizer")
PHASE_LABELS = {"data_wait": "data wait", "h2d": "host-to-device", "forward": "forward",
                "backward": "backward", "optimizer": "optimizer"}
PRECISION_ORDER = {"fp32": 0, "tf32": 1, "fp16": 2, "bf16": 3}
REFERENCE_PRECISION = "fp32"
BASELINE_VARIANT = "baseline"
MEDIAN, CI_LOW, CI_HIGH = ("throughput_img_s_median", "throughput_img_s_ci95_low",
                           "throughput_img_s_ci95_high")

# A configuration whose step waits on input (data wait + host-to-device) for a quarter of
# its time or more is input-bound: no faster kernel can win more than that share back
# before the input pipeline is fixed, so the report says so before anything else.
INPUT_BOUND_SHARE = 0.25
# Below this fraction of the attainable roof a step is far from both roofs: its time goes
# to launch latency, small kernels and framework overhead rather than to arithmetic or
# memory traffic (the usual reading of a roofline; Williams et al., CACM 2009).
FAR_FROM_ROOF = 0.3
# Throughput within 5% of the best batch size counts as saturated (a run-to-run spread of
# a few percent is normal, see the CV flag), so larger batches are not worth their memory.
SATURATION = 0.95
DEFAULT_TOP_KERNELS = 10

# Where a memory level's bandwidth roof lives: the ceilings JSON has main-memory bandwidth
# (the algorithmic, no-reuse traffic of analytic points is also main-memory traffic); the
# profile's own roofs (kernels.csv, ncu peak_sustained x clock) cover every level.
JSON_BANDWIDTH_LEVELS = ("dram", "algorithmic")
PROFILE_COMPUTE_COLUMN = {"fp32": "peak_flop_s_fp32", "tf32": "peak_flop_s_tensor",
                          "fp16": "peak_flop_s_tensor", "bf16": "peak_flop_s_tensor"}
LEVEL_LABELS = {"dram": "DRAM", "l2": "L2", "l1": "L1", "algorithmic": "main memory",
                "compute": "compute"}
ROOF_ORIGINS = ("profile", "measured", "datasheet")


# ------------------------------------------------------------------------------------------
# Document model.
# ------------------------------------------------------------------------------------------
@dataclass
class Table:
    caption: str
    frame: pd.DataFrame


@dataclass
class Figure:
    path: str
    caption: str


@dataclass
class Section:
    id: str
    title: str
    intro: str = ""
    findings: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)


@dataclass
class Document:
    title: str
    description: str
    key_findings: list[str]
    sections: list[Section]
    machines: list[str]


@dataclass
class ReportInputs:
    """Everything the report reads, already labelled with machines."""

    summary: pd.DataFrame | None = None
    runs: pd.DataFrame | None = None
    kernels: pd.DataFrame | None = None
    roofline_points: pd.DataFrame | None = None
    environment: pd.DataFrame | None = None
    complexity: list[dict] = field(default_factory=list)
    ceilings: list[dict] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sources: dict[str, list[str]] = field(default_factory=dict)


# ------------------------------------------------------------------------------------------
# Number formatting: every number in the report goes through these.
# ------------------------------------------------------------------------------------------
def _missing(value) -> bool:
    if value is None or value is pd.NA:
        return True
    try:
        return math.isnan(float(value))
    except (TypeError, ValueError):
        return False


def fmt(value, unit: str = "") -> str:
    """A readable number: thousands separators above 100, three significant digits below."""
    if _missing(value):
        return "n/a"
    x = float(value)
    if abs(x) >= 100:
        text = f"{x:,.0f}"
    elif abs(x) >= 10:
        text = f"{x:.1f}"
    elif abs(x) >= 1:
        text = f"{x:.2f}"
    elif x == 0:
        text = "0"
    else:
        text = f"{x:.3g}"
    return f"{text} {unit}".rstrip()


SI_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def fmt_si(value, unit: str) -> str:
    """`1.23 TFLOP/s`: a decimal SI prefix and three significant digits."""
    if _missing(value):
        return "n/a"
    x = float(value)
    for scale, prefix in SI_PREFIXES:
        if abs(x) >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def fmt_pct(value) -> str:
    if _missing(value):
        return "n/a"
    x = 100 * float(value)
    return f"{x:.1f}%" if abs(x) < 10 else f"{x:.0f}%"


def fmt_times(value) -> str:
    return "n/a" if _missing(value) else f"{float(value):.2f}x"


def throughput_text(median, low=None, high=None) -> str:
    """`1,234 img/s (95% CI 1,200–1,260)`; the CI is left out where there is none."""
    text = fmt(median, "img/s")
    if not _missing(low) and not _missing(high):
        text += f" (95% CI {fmt(low)}–{fmt(high)})"
    return text


def config_text(row: Mapping, *, precision: bool = True, batch: bool = True,
                variant: bool = True) -> str:
    """`resnet18_cifar bf16 at batch 256 (baseline)`."""
    text = str(row["model"])
    if precision:
        text += f" {row['precision']}"
    if batch:
        text += f" at batch {int(row['batch_size'])}"
    if variant:
        text += f" ({row['variant']})"
    return text


def _truthy(value) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return (not _missing(value)) and bool(value)


# ------------------------------------------------------------------------------------------
# Throughput, speedups, batch scaling.
# ------------------------------------------------------------------------------------------
def ok_configs(summary: pd.DataFrame | None) -> pd.DataFrame:
    """Configurations with a measured median throughput."""
    if summary is None or summary.empty or MEDIAN not in summary.columns:
        return pd.DataFrame(columns=[*GROUP_KEYS, MEDIAN, CI_LOW, CI_HIGH])
    frame = summary.copy()
    for column in (MEDIAN, CI_LOW, CI_HIGH):
        if column not in frame.columns:
            frame[column] = math.nan
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    return frame[frame[MEDIAN].notna() & (frame[MEDIAN] > 0)]


def sort_configs(frame: pd.DataFrame) -> pd.DataFrame:
    """Machine, device, model, then precision in fp32/tf32/fp16/bf16 order, batch, variant."""
    if frame.empty:
        return frame
    keys = [k for k in GROUP_KEYS if k in frame.columns]
    ordered = frame.assign(
        _precision=frame["precision"].map(PRECISION_ORDER).fillna(9) if "precision" in frame else 0,
        _variant=(frame["variant"] != BASELINE_VARIANT) if "variant" in frame else 0,
    )
    by = [k if k not in ("precision", "variant") else f"_{k}" for k in keys]
    by += [k for k in ("variant",) if k in frame.columns]
    return ordered.sort_values(by, kind="stable").drop(columns=["_precision", "_variant"])


def speedups(summary: pd.DataFrame | None, column: str, reference: str) -> pd.DataFrame:
    """Each configuration's median throughput over its counterpart with `column=reference`.

    `column` is `precision` (reference fp32) or `variant` (reference baseline). The result
    keeps both medians and 95% CIs and says whether the CIs overlap: where they do, the
    difference is within the run-to-run spread.
    """
    ok = ok_configs(summary)
    match = [k for k in GROUP_KEYS if k != column]
    columns = [*match, column, "reference", MEDIAN, CI_LOW, CI_HIGH,
               "reference_median", "reference_ci95_low", "reference_ci95_high",
               "speedup", "ci_overlap"]
    if ok.empty:
        return pd.DataFrame(columns=columns)
    base = ok[ok[column] == reference][[*match, MEDIAN, CI_LOW, CI_HIGH]].rename(columns={
        MEDIAN: "reference_median", CI_LOW: "reference_ci95_low",
        CI_HIGH: "reference_ci95_high"})
    other = ok[ok[column] != reference][[*match, column, MEDIAN, CI_LOW, CI_HIGH]]
    merged = other.merge(base, on=match, how="inner")
    merged["reference"] = reference
    merged["speedup"] = merged[MEDIAN] / merged["reference_median"]
    known = merged[[CI_LOW, CI_HIGH, "reference_ci95_low", "reference_ci95_high"]].notna().all(axis=1)
    overlap = (merged[CI_LOW] <= merged["reference_ci95_high"]) & (
        merged["reference_ci95_low"] <= merged[CI_HIGH])
    merged["ci_overlap"] = overlap.where(known, other=pd.NA).astype("boolean")
    return sort_configs(merged[columns]).reset_index(drop=True)


def at_largest_batch(table: pd.DataFrame, column: str) -> pd.DataFrame:
    """One row per compared pair (machine, device, model, the other key, `column`): the one
    at the largest batch size both ran, where throughput differences matter most."""
    if table.empty:
        return table
    keys = [k for k in GROUP_KEYS if k != "batch_size"]
    largest = table.groupby(keys)["batch_size"].transform("max")
    return table[table["batch_size"] == largest]


def speedup_sentence(row: Mapping, column: str) -> str:
    """`bf16 is 1.80x faster than fp32 for resnet18_cifar at batch 256 (baseline) on M: ...`."""
    ratio = float(row["speedup"])
    how = f"{ratio:.2f}x faster than" if ratio >= 1 else f"{1 / ratio:.2f}x slower than"
    if column == "precision":
        what = f"{row['precision']} is {how} {row['reference']} for " + config_text(
            row, precision=False)
    else:
        what = f"The {row['variant']} variant is {how} {row['reference']} for " + config_text(
            row, variant=False)
    text = (f"{what} on {row['machine']}: "
            f"{throughput_text(row[MEDIAN], row[CI_LOW], row[CI_HIGH])} vs "
            f"{throughput_text(row['reference_median'], row['reference_ci95_low'], row['reference_ci95_high'])}")
    if row.get("ci_overlap") is True:
        text += "; the 95% CIs overlap, so the difference is within the run-to-run spread"
    return text + "."


def batch_scaling(summary: pd.DataFrame | None) -> pd.DataFrame:
    """Per (machine, device, model, precision, variant): how throughput grows with batch size.

    `gain` is the throughput at the largest batch that ran over that at the smallest;
    `saturation_batch_size` the smallest batch reaching 95% of the best throughput;
    `oom_batch_sizes` the batch sizes that ran out of memory.
    """
    keys = [k for k in GROUP_KEYS if k != "batch_size"]
    columns = [*keys, "smallest_batch_size", "largest_batch_size", "smallest_median",
               "largest_median", "gain", "best_batch_size", "best_median",
               "saturation_batch_size", "oom_batch_sizes"]
    ok = ok_configs(summary)
    rows = []
    if summary is None or ok.empty:
        return pd.DataFrame(columns=columns)
    statuses = summary.assign(_status=summary.get("status", "ok").astype(str))
    for key, group in ok.groupby(keys, sort=True):
        group = group.sort_values("batch_size")
        if len(group) < 2:
            continue
        best = group.loc[group[MEDIAN].idxmax()]
        saturated = group[group[MEDIAN] >= SATURATION * best[MEDIAN]]
        same = statuses
        for k, v in zip(keys, key):
            same = same[same[k] == v]
        oom = sorted(int(b) for b in same.loc[same["_status"] == "oom", "batch_size"])
        rows.append({
            **dict(zip(keys, key)),
            "smallest_batch_size": int(group["batch_size"].iloc[0]),
            "largest_batch_size": int(group["batch_size"].iloc[-1]),
            "smallest_median": float(group[MEDIAN].iloc[0]),
            "largest_median": float(group[MEDIAN].iloc[-1]),
            "gain": float(group[MEDIAN].iloc[-1] / group[MEDIAN].iloc[0]),
            "best_batch_size": int(best["batch_size"]),
            "best_median": float(best[MEDIAN]),
            "saturation_batch_size": int(saturated["batch_size"].iloc[0]),
            "oom_batch_sizes": " ".join(str(b) for b in oom),
        })
    return sort_configs(pd.DataFrame(rows, columns=columns))


def scaling_sentence(row: Mapping) -> str:
    text = (f"For {config_text(row, batch=False)} on {row['machine']}, throughput changes "
            f"{fmt_times(row['gain'])} from batch {row['smallest_batch_size']} "
            f"({fmt(row['smallest_median'], 'img/s')}) to batch {row['largest_batch_size']} "
            f"({fmt(row['largest_median'], 'img/s')})")
    if row["saturation_batch_size"] == row["largest_batch_size"]:
        text += "; it is still rising at the largest batch size that ran"
    else:
        text += (f"; batch {row['saturation_batch_size']} already reaches "
                 f"{fmt_pct(SATURATION)} of the best ({fmt(row['best_median'], 'img/s')} at "
                 f"batch {row['best_batch_size']})")
    if row["oom_batch_sizes"]:
        text += f"; batch {row['oom_batch_sizes'].replace(' ', ', ')} ran out of memory"
    return text + "."


# ------------------------------------------------------------------------------------------
# Time breakdown.
# ------------------------------------------------------------------------------------------
def phase_columns(columns: Iterable[str]) -> dict[str, str]:
    """The column holding each phase's median step time (summary.csv: `<phase>_s_median`)."""
    present = set(columns)
    found = {}
    for phase in PHASES:
        for candidate in (f"{phase}_s_median", f"phase_time_s_{phase}", f"{phase}_s"):
            if candidate in present:
                found[phase] = candidate
                break
    return found


def phase_shares(summary: pd.DataFrame | None, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per configuration: each phase's median time and its share of the summed phases.

    From summary.csv's phase medians; from the median over ok reps of runs.csv when the
    summary has none. `input_share` is data wait + host-to-device: the input pipeline.
    """
    source = ok_configs(summary)
    found = phase_columns(source.columns)
    if not found and runs is not None and not runs.empty:
        found_runs = phase_columns(runs.columns)
        ok_runs = runs[runs["status"].astype(str) == "ok"] if "status" in runs else runs
        if found_runs:
            source = (ok_runs.groupby(list(GROUP_KEYS), sort=True)[list(found_runs.values())]
                      .median().reset_index())
            found = found_runs
    columns = [*GROUP_KEYS, *(f"{p}_s" for p in PHASES), "phase_total_s",
               *(f"{p}_share" for p in PHASES), "input_share"]
    if not found or source.empty:
        return pd.DataFrame(columns=columns)
    frame = source[list(GROUP_KEYS)].copy()
    for phase in PHASES:
        frame[f"{phase}_s"] = (pd.to_numeric(source[found[phase]], errors="coerce")
                               if phase in found else 0.0)
    seconds = frame[[f"{p}_s" for p in PHASES]].fillna(0.0)
    frame["phase_total_s"] = seconds.sum(axis=1)
    for phase in PHASES:
        frame[f"{phase}_share"] = seconds[f"{phase}_s"] / frame["phase_total_s"]
    frame["input_share"] = frame["data_wait_share"] + frame["h2d_share"]
    frame = frame[frame["phase_total_s"] > 0]
    return sort_configs(frame[columns]).reset_index(drop=True)


def breakdown_findings(phases: pd.DataFrame, listed: int = 5) -> list[str]:
    """Per machine: which phase is largest how often, and every input-bound configuration
    (up to `listed`, then a count), rather than one sentence per row of the table."""
    findings = []
    for machine, group in phases.groupby("machine", sort=True):
        largest = [largest_phase(r)[0] for r in group.to_dict("records")]
        counts = pd.Series(largest).value_counts()
        top = counts.index[0]
        example = group.iloc[largest.index(top)].to_dict()
        findings.append(
            f"On {machine}, {PHASE_LABELS[top]} is the largest phase in {counts.iloc[0]} of "
            f"{len(group)} configurations (e.g. {fmt_pct(example[f'{top}_share'])} of the step for "
            f"{config_text(example)}).")
        bound = group[group["input_share"] >= INPUT_BOUND_SHARE].sort_values(
            "input_share", ascending=False)
        for row in bound.head(listed).to_dict("records"):
            findings.append(
                f"{config_text(row)} on {machine} waits on input for "
                f"{fmt_pct(row['input_share'])} of each step (data wait "
                f"{fmt_pct(row['data_wait_share'])}, host-to-device {fmt_pct(row['h2d_share'])}).")
        if len(bound) > listed:
            findings.append(f"… and {len(bound) - listed} more input-bound configurations on "
                            f"{machine} (see the table).")
    return findings


def largest_phase(row: Mapping) -> tuple[str, float]:
    phase = max(PHASES, key=lambda p: float(row[f"{p}_share"]))
    return phase, float(row[f"{phase}_share"])


def breakdown_sentence(row: Mapping) -> str:
    parts = ", ".join(f"{PHASE_LABELS[p]} {fmt_pct(row[f'{p}_share'])}" for p in PHASES)
    return (f"{config_text(row)} on {row['machine']}: {parts} of "
            f"{fmt(row['phase_total_s'] * 1e3, 'ms')} per step.")


# ------------------------------------------------------------------------------------------
# Roofline reading.
# ------------------------------------------------------------------------------------------
def _positive(value) -> float | None:
    if _missing(value):
        return None
    x = float(value)
    return x if x > 0 else None


def json_roofs(ceiling: Mapping | None, precision: str, origin: str) -> tuple[float | None, dict]:
    """(compute roof for `precision`, {memory level: bandwidth}) from a ceilings JSON."""
    section = (ceiling or {}).get(origin) or {}
    flop_s = section.get("gemm_flop_s" if origin == "measured" else "flop_s") or {}
    bandwidth = _positive(section.get("memory_bandwidth_bytes_s"))
    levels = {level: bandwidth for level in JSON_BANDWIDTH_LEVELS} if bandwidth else {}
    return _positive(flop_s.get(precision)), levels


def profile_roofs(kernels: pd.DataFrame | None) -> dict[tuple, tuple[float | None, dict]]:
    """Per configuration: the profile's own roofs (median over its kernels, kernels.csv)."""
    result: dict[tuple, tuple[float | None, dict]] = {}
    if kernels is None or kernels.empty:
        return result
    for key, group in kernels.groupby(list(GROUP_KEYS), sort=True):
        row = dict(zip(GROUP_KEYS, key))
        column = PROFILE_COMPUTE_COLUMN.get(row["precision"])

        def median(name):
            if name not in group.columns:
                return None
            values = pd.to_numeric(group[name], errors="coerce").dropna()
            return _positive(values.median()) if len(values) else None

        levels = {level: median(f"peak_bytes_s_{level}") for level in ("dram", "l2", "l1")}
        result[key] = (median(column) if column else None,
                       {k: v for k, v in levels.items() if v})
    return result


def roofline_readings(points: pd.DataFrame | None, ceilings: Sequence[Mapping],
                      kernels: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per step-level roofline point and roof origin (profile/measured/datasheet).

    For each roof: the compute peak for the run's precision, the bandwidth at the point's
    memory level, the ridge point (peak / bandwidth), whether the point's arithmetic
    intensity lies left of it (memory-bound) or right (compute-bound), the attainable
    performance min(peak, intensity x bandwidth) and the fractions of it and of the peak
    that the step reached.
    """
    columns = [*GROUP_KEYS, "source", "memory_level", "roof", "arithmetic_intensity_flop_per_byte",
               "performance_flop_s", "peak_flop_s", "bandwidth_bytes_s", "ridge_flop_per_byte",
               "bound", "attainable_flop_s", "fraction_of_roof", "fraction_of_peak"]
    if points is None or points.empty:
        return pd.DataFrame(columns=columns)
    steps = points[points["granularity"].astype(str) == "step"] if "granularity" in points else points
    by_machine_device = {(c.get("machine"), c.get("device")): c for c in ceilings}
    profiles = profile_roofs(kernels)
    rows = []
    for point in steps.to_dict("records"):
        key = tuple(point[k] for k in GROUP_KEYS)
        ceiling = by_machine_device.get((point["machine"], point["device"]))
        level = str(point["memory_level"])
        intensity = _positive(point["arithmetic_intensity_flop_per_byte"])
        performance = _positive(point["performance_flop_s"])
        for origin in ROOF_ORIGINS:
            if origin == "profile":
                if str(point.get("source")) != "ncu" or key not in profiles:
                    continue
                peak, levels = profiles[key]
            else:
                peak, levels = json_roofs(ceiling, str(point["precision"]), origin)
            bandwidth = levels.get(level)
            if peak is None and bandwidth is None:
                continue
            row = {k: point[k] for k in GROUP_KEYS}
            row.update(source=point.get("source"), memory_level=level, roof=origin,
                       arithmetic_intensity_flop_per_byte=intensity,
                       performance_flop_s=performance, peak_flop_s=peak,
                       bandwidth_bytes_s=bandwidth)
            ridge = peak / bandwidth if peak and bandwidth else None
            attainable = None
            bound = None
            if intensity is not None and peak and bandwidth:
                attainable = min(peak, intensity * bandwidth)
                bound = "memory" if intensity < ridge else "compute"
            row.update(
                ridge_flop_per_byte=ridge, bound=bound, attainable_flop_s=attainable,
                fraction_of_roof=performance / attainable if performance and attainable else None,
                fraction_of_peak=performance / peak if performance and peak else None,
            )
            rows.append(row)
    return pd.DataFrame(rows, columns=columns)


def roofline_verdicts(readings: pd.DataFrame) -> pd.DataFrame:
    """Per configuration, point source and roof origin: what binds the step.

    The hierarchical reading: of the compute peak and every memory level's
    intensity x bandwidth, the lowest is the roof the step runs under. `limit` is
    `compute` or the memory level; `fraction_of_roof` is the step's performance over that
    lowest roof, `fraction_of_peak` over the compute peak (model FLOP utilisation).
    """
    columns = [*GROUP_KEYS, "source", "roof", "limit", "bound", "arithmetic_intensity_flop_per_byte",
               "ridge_flop_per_byte", "performance_flop_s", "peak_flop_s", "attainable_flop_s",
               "fraction_of_roof", "fraction_of_peak", "levels"]
    if readings.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for key, group in readings.groupby([*GROUP_KEYS, "source", "roof"], sort=True):
        usable = group.dropna(subset=["attainable_flop_s"])
        if usable.empty:
            continue
        peak = float(usable["peak_flop_s"].iloc[0])
        performance = float(usable["performance_flop_s"].iloc[0])
        memory = usable.assign(_roof=usable["arithmetic_intensity_flop_per_byte"]
                               * usable["bandwidth_bytes_s"])
        lowest = memory.loc[memory["_roof"].idxmin()]
        if lowest["_roof"] < peak:
            limit, attainable = str(lowest["memory_level"]), float(lowest["_roof"])
        else:
            limit, attainable = "compute", peak
        rows.append({
            **dict(zip([*GROUP_KEYS, "source", "roof"], key)),
            "limit": limit, "bound": "compute" if limit == "compute" else "memory",
            "arithmetic_intensity_flop_per_byte": float(lowest["arithmetic_intensity_flop_per_byte"]),
            "ridge_flop_per_byte": float(lowest["ridge_flop_per_byte"]),
            "performance_flop_s": performance, "peak_flop_s": peak,
            "attainable_flop_s": attainable, "fraction_of_roof": performance / attainable,
            "fraction_of_peak": performance / peak,
            "levels": " ".join(sorted(usable["memory_level"].astype(str))),
        })
    return sort_configs(pd.DataFrame(rows, columns=columns)).reset_index(drop=True)


def preferred_verdict(verdicts: pd.DataFrame, row: Mapping) -> Mapping | None:
    """The verdict a finding quotes for one config: ncu over analytic points, and the
    profile's own roofs over measured over datasheet ones."""
    if verdicts.empty:
        return None
    match = verdicts
    for k in GROUP_KEYS:
        match = match[match[k] == row[k]]
    if match.empty:
        return None
    rank = match.assign(
        _source=(match["source"].astype(str) != "ncu").astype(int),
        _roof=match["roof"].map({o: i for i, o in enumerate(ROOF_ORIGINS)}),
    ).sort_values(["_source", "_roof"])
    return rank.iloc[0].to_dict()


def verdict_sentence(verdict: Mapping) -> str:
    level = LEVEL_LABELS.get(verdict["limit"], verdict["limit"])
    what = (f"{config_text(verdict)} on {verdict['machine']} ({verdict['source']} step point, "
            f"{verdict['roof']} roofs): ")
    if verdict["bound"] == "compute":
        what += (f"compute-bound — arithmetic intensity "
                 f"{fmt(verdict['arithmetic_intensity_flop_per_byte'], 'FLOP/B')} is right of the "
                 f"ridge point ({fmt(verdict['ridge_flop_per_byte'], 'FLOP/B')})")
    else:
        what += (f"memory-bound at {level} — arithmetic intensity "
                 f"{fmt(verdict['arithmetic_intensity_flop_per_byte'], 'FLOP/B')} is left of the "
                 f"ridge point ({fmt(verdict['ridge_flop_per_byte'], 'FLOP/B')})")
    what += (f"; it reaches {fmt_si(verdict['performance_flop_s'], 'FLOP/s')}, "
             f"{fmt_pct(verdict['fraction_of_roof'])} of the roof above it and "
             f"{fmt_pct(verdict['fraction_of_peak'])} of the {verdict['precision']} compute peak "
             f"({fmt_si(verdict['peak_flop_s'], 'FLOP/s')})")
    return what + "."


# ------------------------------------------------------------------------------------------
# What limits a configuration.
# ------------------------------------------------------------------------------------------
def limiter_sentence(config: Mapping, phases: pd.DataFrame, verdicts: pd.DataFrame) -> str | None:
    """One sentence on what limits `config`, from its phase shares and roofline verdict."""
    phase_row = _match(phases, config)
    verdict = preferred_verdict(verdicts, config)
    head = f"What limits {config_text(config)} on {config['machine']}: "
    if phase_row is not None and phase_row["input_share"] >= INPUT_BOUND_SHARE:
        return head + (f"the input pipeline — data wait and host-to-device copies take "
                       f"{fmt_pct(phase_row['input_share'])} of each step "
                       f"({fmt(phase_row['phase_total_s'] * 1e3, 'ms')}); a device-resident "
                       "dataset or more DataLoader workers attack that share first.")
    if verdict is not None:
        level = LEVEL_LABELS.get(verdict["limit"], verdict["limit"])
        fraction = float(verdict["fraction_of_roof"])
        if fraction < FAR_FROM_ROOF:
            text = (f"overheads, not the roofs — the step reaches only {fmt_pct(fraction)} of "
                    f"the {verdict['roof']} {'compute' if verdict['bound'] == 'compute' else level + ' bandwidth'} "
                    f"roof above it ({fmt_si(verdict['performance_flop_s'], 'FLOP/s')} of "
                    f"{fmt_si(verdict['attainable_flop_s'], 'FLOP/s')} attainable), so launch "
                    "latency, small kernels and framework time dominate; larger batches, "
                    "torch.compile or CUDA graphs address that.")
        elif verdict["bound"] == "compute":
            text = (f"compute — the step is right of the ridge point and reaches "
                    f"{fmt_pct(verdict['fraction_of_peak'])} of the {verdict['roof']} "
                    f"{config['precision']} peak; a faster precision or fewer FLOPs help most.")
        else:
            text = (f"memory bandwidth at {level} — the step is left of the ridge point and "
                    f"reaches {fmt_pct(fraction)} of the {verdict['roof']} bandwidth roof; "
                    "fusing kernels, channels-last or lower precision (fewer bytes) help most.")
        if phase_row is not None:
            phase, share = largest_phase(phase_row)
            text = text[:-1] + f" The largest phase is {PHASE_LABELS[phase]} ({fmt_pct(share)})."
        return head + text
    if phase_row is not None:
        phase, share = largest_phase(phase_row)
        return head + (f"no roofline point for it; the largest phase is {PHASE_LABELS[phase]} "
                       f"({fmt_pct(share)} of {fmt(phase_row['phase_total_s'] * 1e3, 'ms')} "
                       "per step).")
    return None


def _match(frame: pd.DataFrame, config: Mapping) -> Mapping | None:
    if frame is None or frame.empty:
        return None
    match = frame
    for k in GROUP_KEYS:
        match = match[match[k] == config[k]]
    return None if match.empty else match.iloc[0].to_dict()


# ------------------------------------------------------------------------------------------
# Kernels, complexity, ceilings.
# ------------------------------------------------------------------------------------------
def top_kernels(kernels: pd.DataFrame | None, n: int = DEFAULT_TOP_KERNELS) -> pd.DataFrame:
    """Per configuration, the `n` kernels (by name) that took the most time in the step.

    Launches of one kernel name are summed; `share` is of the profiled step's kernel time
    (the calibration GEMM is left out).
    """
    columns = [*GROUP_KEYS, "rank", "kernel_name", "kind", "launches", "duration_s", "share",
               "flops_total", "bytes_dram", "arithmetic_intensity_dram_flop_per_byte",
               "performance_flop_s"]
    if kernels is None or kernels.empty:
        return pd.DataFrame(columns=columns)
    step = kernels[kernels["phase"].astype(str) != "calibration"] if "phase" in kernels else kernels
    step = step.assign(**{c: pd.to_numeric(step[c], errors="coerce") if c in step else math.nan
                          for c in ("duration_s", "flops_total", "bytes_dram")})
    rows = []
    for key, group in step.groupby(list(GROUP_KEYS), sort=True):
        total = group["duration_s"].sum()
        per_name = (group.groupby(["kernel_name", "kind"], sort=False, dropna=False)
                    .agg(launches=("duration_s", "size"), duration_s=("duration_s", "sum"),
                         flops_total=("flops_total", "sum"), bytes_dram=("bytes_dram", "sum"))
                    .reset_index().sort_values("duration_s", ascending=False).head(n))
        for rank, k in enumerate(per_name.to_dict("records"), start=1):
            rows.append({
                **dict(zip(GROUP_KEYS, key)), "rank": rank, **k,
                "share": k["duration_s"] / total if total else math.nan,
                "arithmetic_intensity_dram_flop_per_byte":
                    k["flops_total"] / k["bytes_dram"] if k["bytes_dram"] else math.nan,
                "performance_flop_s": k["flops_total"] / k["duration_s"] if k["duration_s"] else math.nan,
            })
    return pd.DataFrame(rows, columns=columns)


def kernel_kind_shares(kernels: pd.DataFrame | None) -> pd.DataFrame:
    """Per configuration and kernel kind: summed duration and share of the step."""
    columns = [*GROUP_KEYS, "kind", "duration_s", "share"]
    if kernels is None or kernels.empty:
        return pd.DataFrame(columns=columns)
    step = kernels[kernels["phase"].astype(str) != "calibration"] if "phase" in kernels else kernels
    step = step.assign(duration_s=pd.to_numeric(step["duration_s"], errors="coerce"))
    kinds = step.groupby([*GROUP_KEYS, "kind"], sort=True)["duration_s"].sum().reset_index()
    totals = kinds.groupby(list(GROUP_KEYS))["duration_s"].transform("sum")
    kinds["share"] = kinds["duration_s"] / totals
    return kinds.sort_values([*GROUP_KEYS, "share"], ascending=[True] * len(GROUP_KEYS) + [False])[columns]


def complexity_table(documents: Sequence[Mapping]) -> pd.DataFrame:
    """One row per model: parameters, FLOPs and bytes per image (complexity JSONs)."""
    rows = []
    for d in sorted(documents, key=lambda d: str(d.get("model"))):
        traffic = (d.get("traffic") or {}).get("fp32") or {}
        rows.append({
            "model": d.get("model"),
            "dataset": d.get("dataset"),
            "input_shape": "x".join(str(v) for v in d.get("input_shape") or []),
            "params": d.get("params"),
            "forward_flops_per_image": d.get("forward_flops_per_image"),
            "train_step_flops_per_image": d.get("train_step_flops_per_image"),
            "saved_activation_bytes_per_image": d.get("saved_activation_bytes_per_image"),
            "weight_bytes": d.get("weight_bytes"),
            "optimizer_state_bytes": d.get("optimizer_state_bytes"),
            "fp32_traffic_fixed_bytes": traffic.get("fixed_bytes"),
            "fp32_traffic_per_image_bytes": traffic.get("per_image_bytes"),
        })
    return pd.DataFrame(rows)


def ceilings_table(ceilings: Sequence[Mapping]) -> pd.DataFrame:
    """Per machine and device: measured vs datasheet compute (per dtype) and bandwidth."""
    rows = []
    for c in sorted(ceilings, key=lambda c: (str(c.get("machine")), str(c.get("device")))):
        measured = c.get("measured") or {}
        datasheet = c.get("datasheet") or {}
        dtypes = list(dict.fromkeys([*(measured.get("gemm_flop_s") or {}),
                                     *(datasheet.get("flop_s") or {})]))
        dtypes.sort(key=lambda d: PRECISION_ORDER.get(d, 9))
        for dtype in dtypes:
            m = _positive((measured.get("gemm_flop_s") or {}).get(dtype))
            s = _positive((datasheet.get("flop_s") or {}).get(dtype))
            rows.append({"machine": c.get("machine"), "device": c.get("device"),
                         "roof": f"{dtype} GEMM", "unit": "FLOP/s", "measured": m,
                         "datasheet": s, "measured_over_datasheet": m / s if m and s else None})
        m = _positive(measured.get("memory_bandwidth_bytes_s"))
        s = _positive(datasheet.get("memory_bandwidth_bytes_s"))
        rows.append({"machine": c.get("machine"), "device": c.get("device"),
                     "roof": "memory bandwidth", "unit": "B/s", "measured": m, "datasheet": s,
                     "measured_over_datasheet": m / s if m and s else None})
    return pd.DataFrame(rows, columns=["machine", "device", "roof", "unit", "measured",
                                       "datasheet", "measured_over_datasheet"])


# ------------------------------------------------------------------------------------------
# Notes: skipped and flagged.
# ------------------------------------------------------------------------------------------
def oom_notes(runs: pd.DataFrame | None, summary: pd.DataFrame | None) -> list[str]:
    """One note per configuration whose reps ran out of memory (runs.csv `status`)."""
    frame = runs if runs is not None and "status" in (runs.columns if runs is not None else []) else summary
    if frame is None or frame.empty or "status" not in frame.columns:
        return []
    oom = frame[frame["status"].astype(str) == "oom"]
    notes = []
    for key, group in oom.groupby(list(GROUP_KEYS), sort=True):
        row = dict(zip(GROUP_KEYS, key))
        errors = [e for e in group.get("error", pd.Series(dtype=object)).tolist()
                  if isinstance(e, str) and e]
        text = (f"Out of memory: {config_text(row)} on {row['machine']} "
                f"({len(group)} rep{'s' if len(group) != 1 else ''} with status oom)")
        if errors:
            text += f": {errors[0]}"
        notes.append(text + ".")
    return sort_notes(notes)


def variance_notes(summary: pd.DataFrame | None, cv_threshold: float) -> list[str]:
    """Configurations whose throughput varies across reps more than `cv_threshold` (CV)."""
    ok = ok_configs(summary)
    if ok.empty or "throughput_img_s_cv" not in ok.columns:
        return []
    cv = pd.to_numeric(ok["throughput_img_s_cv"], errors="coerce")
    flagged = cv > cv_threshold
    if "high_variance" in ok.columns:
        flagged = flagged | ok["high_variance"].map(_truthy)
    notes = []
    for row in sort_configs(ok[flagged]).to_dict("records"):
        notes.append(
            f"High variance: {config_text(row)} on {row['machine']} — throughput CV "
            f"{fmt_pct(row['throughput_img_s_cv'])} across {int(row.get('n_ok', 0) or 0)} reps "
            f"(threshold {fmt_pct(cv_threshold)}); treat its numbers and speedups with care."
        )
    return notes


def sort_notes(notes: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(notes))


# ------------------------------------------------------------------------------------------
# Display tables (formatted strings, only the columns a reader needs).
# ------------------------------------------------------------------------------------------
def _drop_single_machine(frame: pd.DataFrame, machines: Sequence[str]) -> pd.DataFrame:
    if len(machines) <= 1 and "Machine" in frame.columns:
        return frame.drop(columns=["Machine"])
    return frame


def _key_columns(frame: pd.DataFrame, keys: Sequence[str] = GROUP_KEYS) -> dict[str, pd.Series]:
    labels = {"machine": "Machine", "device": "Device", "model": "Model",
              "precision": "Precision", "batch_size": "Batch", "variant": "Variant"}
    return {labels[k]: frame[k].astype(str) if k != "batch_size" else frame[k].astype(int)
            for k in keys if k in frame.columns}


def throughput_display(summary: pd.DataFrame | None, cv_threshold: float) -> pd.DataFrame:
    if summary is None or summary.empty:
        return pd.DataFrame()
    s = sort_configs(summary)
    cv = pd.to_numeric(s.get("throughput_img_s_cv"), errors="coerce") if "throughput_img_s_cv" in s else None
    frame = pd.DataFrame({
        **_key_columns(s),
        "Status": s["status"].astype(str) if "status" in s else "ok",
        "Reps ok": [f"{_int(a)}/{_int(b)}" for a, b in zip(s.get("n_ok", [None] * len(s)),
                                                       s.get("n_reps", [None] * len(s)))],
        "Median (img/s)": [fmt(v) for v in s.get(MEDIAN, [None] * len(s))],
        "95% CI (img/s)": [f"{fmt(a)}–{fmt(b)}" if not (_missing(a) or _missing(b)) else "n/a"
                           for a, b in zip(s.get(CI_LOW, [None] * len(s)), s.get(CI_HIGH, [None] * len(s)))],
        "IQR (img/s)": [fmt(v) for v in s.get("throughput_img_s_iqr", [None] * len(s))],
        "CV": [fmt_pct(v) for v in (cv if cv is not None else [None] * len(s))],
        "Flag": ["high variance" if (not _missing(v) and v > cv_threshold) else ""
                 for v in (cv if cv is not None else [None] * len(s))],
    })
    return frame


def _int(value) -> str:
    return "?" if _missing(value) else str(int(value))


def speedup_display(table: pd.DataFrame, column: str) -> pd.DataFrame:
    if table.empty:
        return pd.DataFrame()
    keys = [k for k in GROUP_KEYS if k in table.columns]
    return pd.DataFrame({
        **_key_columns(table, keys),
        "Against": table["reference"].astype(str),
        "Speedup": [fmt_times(v) for v in table["speedup"]],
        "Median (img/s)": [throughput_text(m, a, b).replace(" img/s", "")
                           for m, a, b in zip(table[MEDIAN], table[CI_LOW], table[CI_HIGH])],
        "Reference median (img/s)": [
            throughput_text(m, a, b).replace(" img/s", "")
            for m, a, b in zip(table["reference_median"], table["reference_ci95_low"],
                               table["reference_ci95_high"])],
        "CIs overlap": ["yes" if v is True else "no" if v is False else "n/a"
                        for v in table["ci_overlap"].astype(object)],
    })


def scaling_display(table: pd.DataFrame) -> pd.DataFrame:
    if table.empty:
        return pd.DataFrame()
    keys = [k for k in GROUP_KEYS if k != "batch_size"]
    return pd.DataFrame({
        **_key_columns(table, keys),
        "Batch range": [f"{a}–{b}" for a, b in zip(table["smallest_batch_size"], table["largest_batch_size"])],
        "Throughput (img/s)": [f"{fmt(a)} → {fmt(b)}" for a, b in zip(table["smallest_median"], table["largest_median"])],
        "Gain": [fmt_times(v) for v in table["gain"]],
        "Best batch": table["best_batch_size"].astype(int),
        "95% of best from batch": table["saturation_batch_size"].astype(int),
        "OOM batches": table["oom_batch_sizes"].astype(str),
    })


def breakdown_display(table: pd.DataFrame) -> pd.DataFrame:
    if table.empty:
        return pd.DataFrame()
    return pd.DataFrame({
        **_key_columns(table),
        "Step (ms, sum of phase medians)": [fmt(v * 1e3) for v in table["phase_total_s"]],
        **{PHASE_LABELS[p].capitalize(): [fmt_pct(v) for v in table[f"{p}_share"]] for p in PHASES},
    })


def readings_display(readings: pd.DataFrame, verdicts: pd.DataFrame) -> pd.DataFrame:
    if verdicts.empty:
        return pd.DataFrame()
    return pd.DataFrame({
        **_key_columns(verdicts),
        "Point": verdicts["source"].astype(str),
        "Roofs": verdicts["roof"].astype(str),
        "Bound": [f"memory ({LEVEL_LABELS.get(l, l)})" if b == "memory" else "compute"
                  for b, l in zip(verdicts["bound"], verdicts["limit"])],
        "Intensity (FLOP/B)": [fmt(v) for v in verdicts["arithmetic_intensity_flop_per_byte"]],
        "Ridge (FLOP/B)": [fmt(v) for v in verdicts["ridge_flop_per_byte"]],
        "Achieved": [fmt_si(v, "FLOP/s") for v in verdicts["performance_flop_s"]],
        "Attainable": [fmt_si(v, "FLOP/s") for v in verdicts["attainable_flop_s"]],
        "Of roof": [fmt_pct(v) for v in verdicts["fraction_of_roof"]],
        "Of peak": [fmt_pct(v) for v in verdicts["fraction_of_peak"]],
        "Levels with a roof": verdicts["levels"].astype(str),
    })


def kernels_display(table: pd.DataFrame) -> pd.DataFrame:
    if table.empty:
        return pd.DataFrame()
    return pd.DataFrame({
        **_key_columns(table),
        "#": table["rank"].astype(int),
        "Kernel": [_shorten(str(k)) for k in table["kernel_name"]],
        "Kind": table["kind"].astype(str),
        "Launches": table["launches"].astype(int),
        "Time (µs)": [fmt(v * 1e6) for v in table["duration_s"]],
        "Share": [fmt_pct(v) for v in table["share"]],
        "FLOP/s": [fmt_si(v, "FLOP/s") for v in table["performance_flop_s"]],
        "Intensity, DRAM (FLOP/B)": [fmt(v) for v in table["arithmetic_intensity_dram_flop_per_byte"]],
    })


def _shorten(name: str, limit: int = 90) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"


def kinds_display(table: pd.DataFrame) -> pd.DataFrame:
    if table.empty:
        return pd.DataFrame()
    return pd.DataFrame({**_key_columns(table), "Kind": table["kind"].astype(str),
                         "Time (µs)": [fmt(v * 1e6) for v in table["duration_s"]],
                         "Share": [fmt_pct(v) for v in table["share"]]})


def complexity_display(table: pd.DataFrame) -> pd.DataFrame:
    if table.empty:
        return pd.DataFrame()
    return pd.DataFrame({
        "Model": table["model"], "Dataset": table["dataset"], "Input": table["input_shape"],
        "Parameters": [fmt_si(v, "") for v in table["params"]],
        "Forward FLOP/image": [fmt_si(v, "FLOP") for v in table["forward_flops_per_image"]],
        "Train step FLOP/image": [fmt_si(v, "FLOP") for v in table["train_step_flops_per_image"]],
        "Saved activations/image": [fmt_si(v, "B") for v in table["saved_activation_bytes_per_image"]],
        "Weights": [fmt_si(v, "B") for v in table["weight_bytes"]],
        "Optimizer state": [fmt_si(v, "B") for v in table["optimizer_state_bytes"]],
        "fp32 traffic (fixed + per image)": [
            f"{fmt_si(a, 'B')} + {fmt_si(b, 'B')}" for a, b in
            zip(table["fp32_traffic_fixed_bytes"], table["fp32_traffic_per_image_bytes"])],
    })


def ceilings_display(table: pd.DataFrame) -> pd.DataFrame:
    if table.empty:
        return pd.DataFrame()
    return pd.DataFrame({
        "Machine": table["machine"].astype(str), "Device": table["device"].astype(str),
        "Roof": table["roof"],
        "Measured": [fmt_si(v, u) for v, u in zip(table["measured"], table["unit"])],
        "Datasheet": [fmt_si(v, u) for v, u in zip(table["datasheet"], table["unit"])],
        "Measured / datasheet": [fmt_pct(v) for v in table["measured_over_datasheet"]],
    })


def settings_display(table: pd.DataFrame) -> pd.DataFrame:
    """Column names as words: `cudnn_benchmark` -> `cudnn benchmark`."""
    return table.rename(columns=lambda c: "Machine" if c == "machine" else c.replace("_", " ").capitalize())


def matrix_display(summary: pd.DataFrame | None) -> pd.DataFrame:
    """The study matrix: one row per (machine, device, model, precision, variant), one
    column per batch size, each cell the status and how many reps succeeded."""
    if summary is None or summary.empty:
        return pd.DataFrame()
    s = summary.copy()
    s["cell"] = [f"{st} {_int(a)}/{_int(b)}" for st, a, b in zip(
        s.get("status", ["ok"] * len(s)), s.get("n_ok", [None] * len(s)), s.get("n_reps", [None] * len(s)))]
    keys = [k for k in GROUP_KEYS if k != "batch_size"]
    wide = s.pivot_table(index=keys, columns="batch_size", values="cell", aggfunc="first").reset_index()
    wide = sort_configs(wide.assign(batch_size=0)).drop(columns=["batch_size"])
    wide.columns = [f"bs {c}" if isinstance(c, (int, float)) and not isinstance(c, bool) else c
                    for c in wide.columns]
    renamed = {"machine": "Machine", "device": "Device", "model": "Model",
               "precision": "Precision", "variant": "Variant"}
    return wide.rename(columns=renamed).fillna("—")


# ------------------------------------------------------------------------------------------
# Figures per section.
# ------------------------------------------------------------------------------------------
# Path keywords -> section, first match wins (machines/throughput.png is a machine figure).
FIGURE_SECTIONS = (
    ("machines", "machines"), ("speedup", "speedups"), ("breakdown", "breakdown"),
    ("phase", "breakdown"), ("sweep", "ceilings"), ("ceiling", "ceilings"),
    ("roofline", "roofline"), ("flops", "roofline"), ("kernel", "kernels"),
    ("throughput", "throughput"), ("complexity", "complexity"), ("environment", "environment"),
)


def figure_section(path: str) -> str:
    lowered = path.replace("\\", "/").lower()
    for keyword, section in FIGURE_SECTIONS:
        if keyword in lowered:
            return section
    return "figures"


def figure_caption(path: str) -> str:
    """The figure's path below `figures/`, which names its experiment (keys in order)."""
    parts = path.replace("\\", "/").split("/")
    if "figures" in parts:
        parts = parts[parts.index("figures") + 1:]
    return " / ".join(parts).removesuffix(".png")


# ------------------------------------------------------------------------------------------
# The document.
# ------------------------------------------------------------------------------------------
def key_findings(inputs: ReportInputs, machines: Sequence[str], phases: pd.DataFrame,
                 verdicts: pd.DataFrame, precision_table: pd.DataFrame,
                 variant_table: pd.DataFrame, scaling: pd.DataFrame, notes: Sequence[str]) -> list[str]:
    """The short list a newcomer reads first: per machine and model the fastest
    configuration, what limits it, the best precision and variant, batch scaling; then the
    machine comparison and the count of flagged results."""
    findings = []
    ok = ok_configs(inputs.summary)
    for (machine, model), group in ok.groupby(["machine", "model"], sort=True):
        best = group.loc[group[MEDIAN].idxmax()].to_dict()
        findings.append(f"Fastest configuration on {machine}: {config_text(best)}, "
                        f"{throughput_text(best[MEDIAN], best[CI_LOW], best[CI_HIGH])}.")
        limiter = limiter_sentence(best, phases, verdicts)
        if limiter:
            findings.append(limiter)
        for table, column in ((precision_table, "precision"), (variant_table, "variant")):
            rows = table[(table["machine"] == machine) & (table["model"] == model)]
            if rows.empty:
                continue
            at = rows[rows["batch_size"] == rows["batch_size"].max()]
            if column == "precision" and (at["variant"] == BASELINE_VARIANT).any():
                at = at[at["variant"] == BASELINE_VARIANT]
            if column == "variant" and (at["precision"] == best["precision"]).any():
                at = at[at["precision"] == best["precision"]]
            findings.append(speedup_sentence(at.loc[at["speedup"].idxmax()].to_dict(), column))
        scale = scaling
        for k in ("machine", "device", "model", "precision", "variant"):
            scale = scale[scale[k] == best[k]]
        if not scale.empty:
            findings.append(scaling_sentence(scale.iloc[0].to_dict()))
    findings.extend(machine_comparison_findings(ok, machines))
    n_oom = sum(1 for n in notes if n.startswith("Out of memory"))
    n_var = sum(1 for n in notes if n.startswith("High variance"))
    if n_oom or n_var:
        findings.append(f"{n_oom} configuration{'s' if n_oom != 1 else ''} ran out of memory and "
                        f"{n_var} {'were' if n_var != 1 else 'was'} flagged for high variance; "
                        "see Notes.")
    return findings


def machine_comparison_findings(ok: pd.DataFrame, machines: Sequence[str]) -> list[str]:
    """Per model, the fastest and slowest machine on the largest configuration they share."""
    if len(machines) < 2 or ok.empty:
        return []
    findings = []
    config = ["model", "precision", "batch_size", "variant"]
    for model, group in ok.groupby("model", sort=True):
        counts = group.groupby(config)["machine"].nunique()
        shared = counts[counts == counts.max()]
        if shared.max() < 2:
            continue
        candidates = pd.DataFrame(list(shared.index), columns=config)
        candidates = candidates.assign(_fp32=candidates["precision"] != REFERENCE_PRECISION,
                                       _base=candidates["variant"] != BASELINE_VARIANT)
        chosen = candidates.sort_values(["_fp32", "_base", "batch_size"],
                                        ascending=[True, True, False]).iloc[0]
        rows = group
        for k in config:
            rows = rows[rows[k] == chosen[k]]
        rows = rows.sort_values(MEDIAN, ascending=False)
        fast, slow = rows.iloc[0], rows.iloc[-1]
        findings.append(
            f"Across machines, {config_text(fast)} runs fastest on {fast['machine']} at "
            f"{throughput_text(fast[MEDIAN], fast[CI_LOW], fast[CI_HIGH])}, "
            f"{fmt_times(fast[MEDIAN] / slow[MEDIAN])} the slowest machine, {slow['machine']}, "
            f"at {throughput_text(slow[MEDIAN], slow[CI_LOW], slow[CI_HIGH])}.")
    return findings


def _sources(inputs: ReportInputs, *kinds: str) -> list[str]:
    paths = []
    for kind in kinds:
        paths.extend(inputs.sources.get(kind, []))
    return list(dict.fromkeys(paths))


def build_document(inputs: ReportInputs, *, title: str, description: str,
                   cv_threshold: float, top_n_kernels: int = DEFAULT_TOP_KERNELS) -> Document:
    """Every section of the summary, written from `inputs`."""
    machines = sorted({m for frame in (inputs.summary, inputs.environment, inputs.roofline_points)
                       if frame is not None and "machine" in frame for m in frame["machine"].dropna()})

    def drop(frame: pd.DataFrame) -> pd.DataFrame:
        return _drop_single_machine(frame, machines)

    summary = inputs.summary
    precision_table = speedups(summary, "precision", REFERENCE_PRECISION)
    variant_table = speedups(summary, "variant", BASELINE_VARIANT)
    scaling = batch_scaling(summary)
    phases = phase_shares(summary, inputs.runs)
    readings = roofline_readings(inputs.roofline_points, inputs.ceilings, inputs.kernels)
    verdicts = roofline_verdicts(readings)
    figures: dict[str, list[Figure]] = {}
    for path in inputs.figures:
        figures.setdefault(figure_section(path), []).append(Figure(path, figure_caption(path)))

    notes = list(inputs.notes)
    notes += oom_notes(inputs.runs, summary)
    notes += variance_notes(summary, cv_threshold)
    if summary is None:
        notes.append("No timed runs: results/tables/summary.csv was not part of this report, so "
                      "there are no throughput, speedup or breakdown numbers.")
    if inputs.kernels is None:
        notes.append("No per-kernel table (kernels.csv): Nsight Compute profiles need an NVIDIA "
                     "GPU and `ncu`; rooflines without them use analytic step points.")
    if inputs.roofline_points is None:
        notes.append("No roofline points (roofline_points.csv) were part of this report.")
    if not inputs.ceilings:
        notes.append("No ceilings JSON: there are no measured or datasheet roofs to read the "
                     "roofline against.")
    notes = sort_notes(notes)

    sections = []
    env_frame = inputs.environment
    sections.append(Section(
        "environment", "Environment",
        intro="Where the numbers were measured: one column per machine (host name and device "
              "name from the environment record of every run).",
        tables=[t for t in (
            Table("Machines", machines_mod.machine_table(env_frame)),
            Table("Math and pipeline settings the runs recorded",
                  drop(settings_display(machines_mod.settings_table(env_frame)))),
        ) if not t.frame.empty],
        figures=figures.get("environment", []),
        sources=_sources(inputs, "environment"),
    ))
    sections.append(Section(
        "matrix", "Study matrix",
        intro="Every configuration of the study, with its status and how many of its reps "
              "succeeded, per batch size.",
        tables=[t for t in [Table("Configurations", drop(matrix_display(summary)))] if not t.frame.empty],
        sources=_sources(inputs, "summary"),
    ))
    top = ok_configs(summary)
    throughput_findings = []
    for (machine, model), group in top.groupby(["machine", "model"], sort=True):
        best = group.loc[group[MEDIAN].idxmax()]
        worst = group.loc[group[MEDIAN].idxmin()]
        throughput_findings.append(
            f"{model} on {machine}: from {throughput_text(worst[MEDIAN], worst[CI_LOW], worst[CI_HIGH])} "
            f"for {config_text(worst)} to {throughput_text(best[MEDIAN], best[CI_LOW], best[CI_HIGH])} "
            f"for {config_text(best)}.")
    sections.append(Section(
        "throughput", "Throughput",
        intro="Images per second over each run's timed window; the median across reps with its "
              "95% confidence interval, interquartile range and coefficient of variation.",
        findings=throughput_findings,
        tables=[t for t in [Table("Throughput per configuration",
                                  drop(throughput_display(summary, cv_threshold)))] if not t.frame.empty],
        figures=figures.get("throughput", []),
        sources=_sources(inputs, "summary"),
    ))
    speedup_findings = [speedup_sentence(r, "precision")
                        for r in at_largest_batch(precision_table, "precision").to_dict("records")]
    speedup_findings += [speedup_sentence(r, "variant")
                         for r in at_largest_batch(variant_table, "variant").to_dict("records")]
    speedup_findings += [scaling_sentence(r) for r in scaling.to_dict("records")]
    sections.append(Section(
        "speedups", "Speedups",
        intro="Ratios of median throughputs: each precision against fp32 and each variant "
              "against baseline at the same batch size, and each configuration across batch "
              "sizes. Where the two 95% CIs overlap the difference is within the run-to-run spread.",
        findings=speedup_findings,
        tables=[t for t in (
            Table("Precisions against fp32", drop(speedup_display(precision_table, "precision"))),
            Table("Variants against baseline", drop(speedup_display(variant_table, "variant"))),
            Table("Batch-size scaling", drop(scaling_display(scaling))),
        ) if not t.frame.empty],
        figures=figures.get("speedups", []),
        sources=_sources(inputs, "summary"),
    ))
    sections.append(Section(
        "breakdown", "Time breakdown",
        intro="Where a training step's time goes: the median time of each phase (data wait, "
              "host-to-device copy, forward, backward, optimizer) as a share of their sum.",
        findings=breakdown_findings(phases),
        tables=[t for t in [Table("Phase shares", drop(breakdown_display(phases)))] if not t.frame.empty],
        figures=figures.get("breakdown", []),
        sources=_sources(inputs, "summary") or _sources(inputs, "runs"),
    ))
    sections.append(Section(
        "roofline", "Roofline",
        intro="Each training step as a point (FLOPs per byte moved, FLOP/s achieved) against "
              "the roofs: the compute peak of its precision and the bandwidth of each memory "
              "level. The lowest roof above the point binds it; left of the ridge point it is "
              "memory-bound, right of it compute-bound. Profile roofs are Nsight Compute's "
              "own peaks at the profiled clock, measured roofs the ceilings stage's "
              "benchmarks, datasheet roofs the vendor's numbers. Analytic points (CPU, MPS) count FLOPs from the "
              "model and bytes as algorithmic no-reuse traffic, which overstates bytes: they sit "
              "left of where the hardware really is.",
        findings=[verdict_sentence(preferred_verdict(verdicts, config))
                  for config in verdicts.drop_duplicates(list(GROUP_KEYS)).to_dict("records")],
        tables=[t for t in [Table("Reading per configuration", drop(readings_display(readings, verdicts)))]
                if not t.frame.empty],
        figures=figures.get("roofline", []),
        sources=_sources(inputs, "roofline_points", "ceilings", "kernels"),
    ))
    sections.append(Section(
        "ceilings", "Ceilings",
        intro="The roofs: the ceilings stage's measured GEMM throughput per dtype and "
              "main-memory bandwidth next to the datasheet peaks.",
        tables=[t for t in [Table("Measured and datasheet roofs", drop(ceilings_display(ceilings_table(inputs.ceilings))))]
                if not t.frame.empty],
        figures=figures.get("ceilings", []),
        sources=_sources(inputs, "ceilings"),
    ))
    kernels_top = top_kernels(inputs.kernels, top_n_kernels)
    kinds = kernel_kind_shares(inputs.kernels)
    kernel_findings = []
    for key, group in kinds.groupby(list(GROUP_KEYS), sort=True):
        first = group.iloc[0].to_dict()
        kernel_findings.append(f"{config_text(first)} on {first['machine']}: {first['kind']} "
                               f"kernels take {fmt_pct(first['share'])} of the profiled step.")
    sections.append(Section(
        "kernels", "Top kernels",
        intro=f"The {top_n_kernels} kernels that took the most time in the profiled step of "
              "each configuration (launches of one kernel summed), and the time per kernel kind.",
        findings=kernel_findings,
        tables=[t for t in (Table("Top kernels by time", drop(kernels_display(kernels_top))),
                            Table("Time per kernel kind", drop(kinds_display(kinds))))
                if not t.frame.empty],
        figures=figures.get("kernels", []),
        sources=_sources(inputs, "kernels"),
    ))
    sections.append(Section(
        "complexity", "Model complexity",
        intro="Per image: parameters, FLOPs of the forward pass and of a whole training step "
              "(FLOPs, not MACs), activation bytes saved for backward, and the algorithmic "
              "memory traffic of a training step in fp32 (fixed + per image).",
        tables=[t for t in [Table("Complexity", complexity_display(complexity_table(inputs.complexity)))]
                if not t.frame.empty],
        figures=figures.get("complexity", []),
        sources=_sources(inputs, "complexity"),
    ))
    if len(machines) > 1 or figures.get("machines"):
        sections.append(Section(
            "machines", "Machines compared",
            intro="The same configurations on every machine whose results were merged.",
            findings=machine_comparison_findings(ok_configs(summary), machines),
            figures=figures.get("machines", []),
            sources=_sources(inputs, "summary", "environment"),
        ))
    if figures.get("figures"):
        sections.append(Section("figures", "More figures", figures=figures["figures"]))
    sections.append(Section(
        "notes", "Notes: skipped and flagged",
        findings=notes,
        sources=_sources(inputs, "runs", "summary") + list(inputs.sources.get("notes", [])),
    ))
    sections = [s for s in sections if s.tables or s.figures or s.findings or s.id == "notes"]
    findings = key_findings(inputs, machines, phases, verdicts, precision_table, variant_table,
                            scaling, notes)
    if not findings:
        findings = ["No timed results yet: only the sections below with data were written."]
    return Document(title=title, description=description, key_findings=findings,
                    sections=sections, machines=machines)


# ------------------------------------------------------------------------------------------
# Rendering.
# ------------------------------------------------------------------------------------------
def _template_environment(autoescape: bool):
    import jinja2

    return jinja2.Environment(
        loader=jinja2.PackageLoader("nnperf", "templates"),
        autoescape=autoescape, trim_blocks=True, lstrip_blocks=True,
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
    )


MISSING_CELL = "—"


def display_cells(frame: pd.DataFrame) -> pd.DataFrame:
    """Every cell as text, missing values as a dash (not `nan`/`None`)."""
    return frame.astype(object).apply(
        lambda column: [MISSING_CELL if _missing(v) else str(v) for v in column])


def table_html(frame: pd.DataFrame) -> str:
    return display_cells(frame).to_html(index=False, escape=True, border=0, classes="data")


def table_markdown(frame: pd.DataFrame) -> str:
    # A `|` inside a cell would end the cell in Markdown.
    cells = display_cells(frame).replace({r"\|": r"\\|"}, regex=True)
    cells.columns = [str(c).replace("|", r"\|") for c in cells.columns]
    return cells.to_markdown(index=False)


def render_html(document: Document, figure_src: Callable[[str], str], generated_from: str) -> str:
    """The self-contained HTML summary; `figure_src(path)` gives each image's src (data URI)."""
    import markupsafe

    template = _template_environment(True).get_template("summary.html.j2")
    return template.render(
        doc=document, generated_from=generated_from,
        table=lambda frame: markupsafe.Markup(table_html(frame)),
        figure_src=figure_src,
    )


def render_markdown(document: Document, figure_src: Callable[[str], str], generated_from: str) -> str:
    """The Markdown summary; `figure_src(path)` gives each image's link (relative path)."""
    template = _template_environment(False).get_template("summary.md.j2")
    return template.render(doc=document, generated_from=generated_from,
                           table=table_markdown, figure_src=figure_src, md=_md_escape)


def _md_escape(text: str) -> str:
    # Underscores inside words are literal in CommonMark, but `*` and a leading `#` are not.
    return re.sub(r"([*`])", r"\\\1", str(text))
