"""What the tables say: speedups, batch scaling, time shares, roofline readings, kernels,
notes, and the sentences that state them with their numbers.

Input frames are the pipeline's tables (summary.csv, runs.csv, roofline_points.csv,
kernels.csv) with a `machine` column added by `nnperf.report.machines`, plus the ceilings and
complexity JSONs as dicts. Every function returns a frame or a sentence computed from them;
no sentence about a result is fixed prose. How the findings are laid out in a document and
rendered is `nnperf.report.document`'s job.
"""

from __future__ import annotations

import math
import re
from typing import Iterable, Mapping, Sequence

import pandas as pd

from nnperf.core.vocab import (
    CONFIG_KEYS,
    PHASES,
    REFERENCE_PRECISION,
    REFERENCE_VARIANT,
    precision_rank,
)
from nnperf.core.wording import count_of, missing
from nnperf.ncu.metrics import compute_peak_column
from nnperf.ncu.ranges import CALIBRATION_TOLERANCE
from nnperf.report.format import (
    config_text,
    fmt,
    fmt_duration,
    fmt_ghz,
    fmt_pct,
    fmt_si,
    fmt_times,
    fmt_utc,
    throughput_text,
    truthy,
)
from nnperf.roofline import points as roofline

GROUP_KEYS = ("machine",) + CONFIG_KEYS
PHASE_LABELS = {
    "data_wait": "data wait",
    "h2d": "host-to-device",
    "forward": "forward",
    "backward": "backward",
    "optimizer": "optimizer",
}
# The headline number of a configuration is the mean of its worker processes' throughputs
# (summary.csv `throughput_img_s_mean`); `throughput_img_s_median` is the median over
# windows, a spread statistic, not the estimate.
MEAN, CI_LOW, CI_HIGH = (
    "throughput_img_s_mean",
    "throughput_img_s_ci95_low",
    "throughput_img_s_ci95_high",
)
# What every sentence quoting a throughput carries: the estimate, its CI, how many windows
# it rests on (one window gives no CI) and whether the measurement was flagged unstable.
ESTIMATE = (MEAN, CI_LOW, CI_HIGH, "n_windows", "n_processes", "ci_method", "unstable")
# Prefix of the reference configuration's ESTIMATE columns in a speedup table.
REFERENCE = "reference_"

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
# A point may sit a little above a roof from timing noise; more than 5% above means the roof
# (or the point's FLOP count) is wrong, and no bound is read from that roof.
ROOF_TOLERANCE = 1.05
DEFAULT_TOP_KERNELS = 10

# Where a memory level's bandwidth roof lives: the ceilings JSON has main-memory bandwidth
# (the algorithmic, no-reuse traffic of analytic points is also main-memory traffic); the
# profile's own roofs (kernels.csv, ncu peak_sustained x clock) cover every level.
JSON_BANDWIDTH_LEVELS = ("dram", "algorithmic")
LEVEL_LABELS = {
    "dram": "DRAM",
    "l2": "L2",
    "l1": "L1",
    "algorithmic": "main memory",
    "compute": "compute",
}
ROOF_ORIGINS = ("profile", "measured", "datasheet")


# ------------------------------------------------------------------------------------------
# Throughput, speedups, batch scaling.
# ------------------------------------------------------------------------------------------
def ok_configs(summary: pd.DataFrame | None) -> pd.DataFrame:
    """Measured configurations (status ok, a positive mean throughput), with the ESTIMATE
    columns numeric (`unstable` as a bool) whether or not the table had them."""
    if summary is None or summary.empty or MEAN not in summary.columns:
        return pd.DataFrame(columns=[*GROUP_KEYS, *ESTIMATE])
    frame = summary.copy()
    for column in (MEAN, CI_LOW, CI_HIGH, "n_windows", "n_processes"):
        if column not in frame.columns:
            frame[column] = math.nan
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    if "ci_method" not in frame.columns:
        frame["ci_method"] = None
    frame["unstable"] = frame["unstable"].map(truthy) if "unstable" in frame else False
    measured = frame[MEAN].notna() & (frame[MEAN] > 0)
    if "status" in frame.columns:
        measured &= frame["status"].astype(str) == "ok"
    return frame[measured]


def estimate_text(row: Mapping, prefix: str = "") -> str:
    """The throughput of `row` as a sentence quotes it: mean, 95% CI (or why there is none)
    and the unstable flag; `prefix` REFERENCE reads the reference's columns of a speedup."""
    return throughput_text(
        row.get(prefix + MEAN),
        row.get(prefix + CI_LOW),
        row.get(prefix + CI_HIGH),
        n_windows=row.get(prefix + "n_windows"),
        n_processes=row.get(prefix + "n_processes"),
        method=row.get(prefix + "ci_method"),
        unstable=truthy(row.get(prefix + "unstable")),
    )


def sort_configs(frame: pd.DataFrame) -> pd.DataFrame:
    """Machine, device, model, then precision in fp32/tf32/fp16/bf16 order, batch, variant."""
    if frame.empty:
        return frame
    keys = [k for k in GROUP_KEYS if k in frame.columns]
    ordered = frame.assign(
        _precision=frame["precision"].map(precision_rank) if "precision" in frame else 0,
        _variant=(frame["variant"] != REFERENCE_VARIANT) if "variant" in frame else 0,
    )
    by = [k if k not in ("precision", "variant") else f"_{k}" for k in keys]
    by += [k for k in ("variant",) if k in frame.columns]
    return ordered.sort_values(by, kind="stable").drop(columns=["_precision", "_variant"])


def speedups(summary: pd.DataFrame | None, column: str, reference: str) -> pd.DataFrame:
    """Each configuration's mean throughput over its counterpart with `column=reference`.

    `column` is `precision` (reference fp32) or `variant` (reference baseline). The result
    keeps both estimates (ESTIMATE, the reference's prefixed REFERENCE) and says whether
    the 95% CIs overlap: where they do, the difference is within the measured spread.
    """
    ok = ok_configs(summary)
    match = [k for k in GROUP_KEYS if k != column]
    columns = [
        *match,
        column,
        "reference",
        *ESTIMATE,
        *(REFERENCE + c for c in ESTIMATE),
        "speedup",
        "ci_overlap",
    ]
    if ok.empty:
        return pd.DataFrame(columns=columns)
    base = ok[ok[column] == reference][[*match, *ESTIMATE]].rename(
        columns={c: REFERENCE + c for c in ESTIMATE}
    )
    other = ok[ok[column] != reference][[*match, column, *ESTIMATE]]
    merged = other.merge(base, on=match, how="inner")
    merged["reference"] = reference
    merged["speedup"] = merged[MEAN] / merged[REFERENCE + MEAN]
    cis = [CI_LOW, CI_HIGH, REFERENCE + CI_LOW, REFERENCE + CI_HIGH]
    known = merged[cis].notna().all(axis=1)
    overlap = (merged[CI_LOW] <= merged[REFERENCE + CI_HIGH]) & (
        merged[REFERENCE + CI_LOW] <= merged[CI_HIGH]
    )
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
    factor = f"{max(ratio, 1 / ratio):.2f}x"
    if factor == "1.00x":
        how = "as fast as"  # "1.00x slower" would claim a difference its digits do not show
    else:
        how = f"{factor} {'faster' if ratio > 1 else 'slower'} than"
    if column == "precision":
        what = f"{row['precision']} is {how} {row['reference']} for " + config_text(
            row, precision=False
        )
    else:
        what = f"The {row['variant']} variant is {how} {row['reference']} for " + config_text(
            row, variant=False
        )
    text = f"{what} on {row['machine']}: {estimate_text(row)} vs {estimate_text(row, REFERENCE)}"
    if row.get("ci_overlap") is True:
        text += "; the 95% CIs overlap, so the difference is within the measured spread"
    return text + "."


def batch_scaling(summary: pd.DataFrame | None) -> pd.DataFrame:
    """Per (machine, device, model, precision, variant): how throughput grows with batch size.

    `gain` is the mean throughput at the largest batch that ran over that at the smallest;
    `saturation_batch_size` the smallest batch reaching 95% of the best throughput;
    `oom_batch_sizes` the batch sizes that ran out of memory and `over_budget_batch_sizes`
    those whose step was too slow to measure within `timing.max_seconds`.
    """
    keys = [k for k in GROUP_KEYS if k != "batch_size"]
    columns = [
        *keys,
        "smallest_batch_size",
        "largest_batch_size",
        "smallest_mean",
        "largest_mean",
        "gain",
        "best_batch_size",
        "best_mean",
        "saturation_batch_size",
        "oom_batch_sizes",
        "over_budget_batch_sizes",
    ]
    ok = ok_configs(summary)
    rows = []
    if summary is None or ok.empty:
        return pd.DataFrame(columns=columns)
    statuses = summary.assign(_status=summary.get("status", "ok").astype(str))
    for key, group in ok.groupby(keys, sort=True):
        group = group.sort_values("batch_size")
        if len(group) < 2:
            continue
        best = group.loc[group[MEAN].idxmax()]
        saturated = group[group[MEAN] >= SATURATION * best[MEAN]]
        same = statuses
        for k, v in zip(keys, key):
            same = same[same[k] == v]

        def batches(status: str) -> str:
            return " ".join(
                str(b)
                for b in sorted(int(b) for b in same.loc[same["_status"] == status, "batch_size"])
            )

        rows.append(
            {
                **dict(zip(keys, key)),
                "smallest_batch_size": int(group["batch_size"].iloc[0]),
                "largest_batch_size": int(group["batch_size"].iloc[-1]),
                "smallest_mean": float(group[MEAN].iloc[0]),
                "largest_mean": float(group[MEAN].iloc[-1]),
                "gain": float(group[MEAN].iloc[-1] / group[MEAN].iloc[0]),
                "best_batch_size": int(best["batch_size"]),
                "best_mean": float(best[MEAN]),
                "saturation_batch_size": int(saturated["batch_size"].iloc[0]),
                "oom_batch_sizes": batches("oom"),
                "over_budget_batch_sizes": batches("over_budget"),
            }
        )
    return sort_configs(pd.DataFrame(rows, columns=columns))


def scaling_sentence(row: Mapping) -> str:
    text = (
        f"For {config_text(row, batch=False)} on {row['machine']}, throughput changes "
        f"{fmt_times(row['gain'])} from batch {row['smallest_batch_size']} "
        f"({fmt(row['smallest_mean'], 'img/s')}) to batch {row['largest_batch_size']} "
        f"({fmt(row['largest_mean'], 'img/s')})"
    )
    if row["saturation_batch_size"] == row["largest_batch_size"]:
        text += "; it is still rising at the largest batch size that ran"
    else:
        text += (
            f"; batch {row['saturation_batch_size']} already reaches "
            f"{fmt_pct(SATURATION)} of the best ({fmt(row['best_mean'], 'img/s')} at "
            f"batch {row['best_batch_size']})"
        )
    if row["oom_batch_sizes"]:
        text += f"; batch {row['oom_batch_sizes'].replace(' ', ', ')} ran out of memory"
    if row.get("over_budget_batch_sizes"):
        text += (
            f"; batch {row['over_budget_batch_sizes'].replace(' ', ', ')} was too slow to "
            "measure within the time budget"
        )
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


def phase_shares(summary: pd.DataFrame | None) -> pd.DataFrame:
    """Per measured configuration: each phase's median time (summary.csv `<phase>_s_median`,
    over every timed step of every process) and its share of the summed phases.

    `input_share` is data wait + host-to-device: the input pipeline.
    """
    source = ok_configs(summary)
    found = phase_columns(source.columns)
    columns = [
        *GROUP_KEYS,
        *(f"{p}_s" for p in PHASES),
        "phase_total_s",
        *(f"{p}_share" for p in PHASES),
        "input_share",
    ]
    if not found or source.empty:
        return pd.DataFrame(columns=columns)
    frame = source[list(GROUP_KEYS)].copy()
    for phase in PHASES:
        frame[f"{phase}_s"] = (
            pd.to_numeric(source[found[phase]], errors="coerce") if phase in found else 0.0
        )
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
            f"{config_text(example)})."
        )
        bound = group[group["input_share"] >= INPUT_BOUND_SHARE].sort_values(
            "input_share", ascending=False
        )
        for row in bound.head(listed).to_dict("records"):
            findings.append(
                f"{config_text(row)} on {machine} waits on input for "
                f"{fmt_pct(row['input_share'])} of each step (data wait "
                f"{fmt_pct(row['data_wait_share'])}, host-to-device {fmt_pct(row['h2d_share'])})."
            )
        if len(bound) > listed:
            findings.append(
                f"… and {len(bound) - listed} more input-bound configurations on "
                f"{machine} (see the table)."
            )
    return findings


def largest_phase(row: Mapping) -> tuple[str, float]:
    phase = max(PHASES, key=lambda p: float(row[f"{p}_share"]))
    return phase, float(row[f"{phase}_share"])


# ------------------------------------------------------------------------------------------
# Roofline reading.
# ------------------------------------------------------------------------------------------
def _positive(value) -> float | None:
    if missing(value):
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


def flagged_roofs(profiles: pd.DataFrame | None) -> set[tuple]:
    """Configurations (GROUP_KEYS) whose profile roof its own calibration GEMM contradicts
    (profiles.csv `roof_ok` false): no bound is read from that roof."""
    if profiles is None or profiles.empty or "roof_ok" not in profiles.columns:
        return set()
    flagged = profiles[~profiles["roof_ok"].map(truthy)]
    return {
        tuple(int(r[k]) if k == "batch_size" else r[k] for k in GROUP_KEYS)
        for r in flagged.to_dict("records")
    }


def profile_roofs(
    kernels: pd.DataFrame | None, profiles: pd.DataFrame | None = None
) -> dict[tuple, tuple[float | None, dict]]:
    """Per configuration: the profile's own roofs (median over its kernels, kernels.csv),
    leaving out configurations whose roof the calibration GEMM flagged (`flagged_roofs`)."""
    result: dict[tuple, tuple[float | None, dict]] = {}
    if kernels is None or kernels.empty:
        return result
    flagged = flagged_roofs(profiles)
    for key, group in kernels.groupby(list(GROUP_KEYS), sort=True):
        row = dict(zip(GROUP_KEYS, key))
        if tuple(int(v) if k == "batch_size" else v for k, v in row.items()) in flagged:
            continue
        column = compute_peak_column(row["precision"])

        def median(name):
            if name not in group.columns:
                return None
            values = pd.to_numeric(group[name], errors="coerce").dropna()
            return _positive(values.median()) if len(values) else None

        levels = {level: median(f"peak_bytes_s_{level}") for level in ("dram", "l2", "l1")}
        result[key] = (median(column) if column else None, {k: v for k, v in levels.items() if v})
    return result


def roofline_readings(
    points: pd.DataFrame | None,
    ceilings: Sequence[Mapping],
    kernels: pd.DataFrame | None = None,
    profiles: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per step-level roofline point and roof origin (profile/measured/datasheet).

    For each roof: the compute peak for the run's precision, the bandwidth at the point's
    memory level, the ridge point (peak / bandwidth), whether the point's arithmetic
    intensity lies left of it (memory-bound) or right (compute-bound), the attainable
    performance min(peak, intensity x bandwidth) and the fractions of it and of the peak
    that the step reached.
    """
    columns = [
        *GROUP_KEYS,
        "source",
        "memory_level",
        "roof",
        "arithmetic_intensity_flop_per_byte",
        "performance_flop_s",
        "peak_flop_s",
        "bandwidth_bytes_s",
        "ridge_flop_per_byte",
        "bound",
        "attainable_flop_s",
        "fraction_of_roof",
        "fraction_of_peak",
    ]
    if points is None or points.empty:
        return pd.DataFrame(columns=columns)
    steps = (
        points[points["granularity"].astype(str) == "step"] if "granularity" in points else points
    )
    by_machine_device = {(c.get("machine"), c.get("device")): c for c in ceilings}
    profile_roof = profile_roofs(kernels, profiles)
    rows = []
    for point in steps.to_dict("records"):
        key = tuple(point[k] for k in GROUP_KEYS)
        ceiling = by_machine_device.get((point["machine"], point["device"]))
        level = str(point["memory_level"])
        intensity = _positive(point["arithmetic_intensity_flop_per_byte"])
        performance = _positive(point["performance_flop_s"])
        for origin in ROOF_ORIGINS:
            if origin == "profile":
                if str(point.get("source")) != "ncu" or key not in profile_roof:
                    continue
                peak, levels = profile_roof[key]
            else:
                peak, levels = json_roofs(ceiling, str(point["precision"]), origin)
            bandwidth = levels.get(level)
            if peak is None and bandwidth is None:
                continue
            row = {k: point[k] for k in GROUP_KEYS}
            row.update(
                source=point.get("source"),
                memory_level=level,
                roof=origin,
                arithmetic_intensity_flop_per_byte=intensity,
                performance_flop_s=performance,
                peak_flop_s=peak,
                bandwidth_bytes_s=bandwidth,
            )
            ridge = roofline.ridge_point(peak, bandwidth) if peak and bandwidth else None
            attainable = None
            bound = None
            if intensity is not None and peak and bandwidth:
                attainable = roofline.attainable(intensity, peak, bandwidth)
                bound = "memory" if intensity < ridge else "compute"
            row.update(
                ridge_flop_per_byte=ridge,
                bound=bound,
                attainable_flop_s=attainable,
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
    columns = [
        *GROUP_KEYS,
        "source",
        "roof",
        "limit",
        "bound",
        "arithmetic_intensity_flop_per_byte",
        "ridge_flop_per_byte",
        "performance_flop_s",
        "peak_flop_s",
        "attainable_flop_s",
        "fraction_of_roof",
        "fraction_of_peak",
        "levels",
    ]
    if readings.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for key, group in readings.groupby([*GROUP_KEYS, "source", "roof"], sort=True):
        usable = group.dropna(subset=["attainable_flop_s"])
        if usable.empty:
            # A compute peak without a bandwidth roof (a datasheet entry without memory
            # bandwidth): no bound can be read, but the fraction of the peak still can.
            peaks = group.dropna(subset=["peak_flop_s", "performance_flop_s"])
            if not peaks.empty:
                first = peaks.iloc[0]
                rows.append(
                    {
                        **dict(zip([*GROUP_KEYS, "source", "roof"], key)),
                        "limit": "unknown",
                        "bound": None,
                        "arithmetic_intensity_flop_per_byte": first[
                            "arithmetic_intensity_flop_per_byte"
                        ],
                        "performance_flop_s": first["performance_flop_s"],
                        "peak_flop_s": first["peak_flop_s"],
                        "fraction_of_peak": first["performance_flop_s"] / first["peak_flop_s"],
                        "levels": "",
                    }
                )
            continue
        peak = float(usable["peak_flop_s"].iloc[0])
        performance = float(usable["performance_flop_s"].iloc[0])
        memory = usable.assign(
            _roof=usable["arithmetic_intensity_flop_per_byte"] * usable["bandwidth_bytes_s"]
        )
        lowest = memory.loc[memory["_roof"].idxmin()]
        if lowest["_roof"] < peak:
            limit, attainable = str(lowest["memory_level"]), float(lowest["_roof"])
        else:
            limit, attainable = "compute", peak
        rows.append(
            {
                **dict(zip([*GROUP_KEYS, "source", "roof"], key)),
                "limit": limit,
                "bound": "compute" if limit == "compute" else "memory",
                "arithmetic_intensity_flop_per_byte": float(
                    lowest["arithmetic_intensity_flop_per_byte"]
                ),
                "ridge_flop_per_byte": float(lowest["ridge_flop_per_byte"]),
                "performance_flop_s": performance,
                "peak_flop_s": peak,
                "attainable_flop_s": attainable,
                "fraction_of_roof": performance / attainable,
                "fraction_of_peak": performance / peak,
                "levels": " ".join(sorted(usable["memory_level"].astype(str))),
            }
        )
    return sort_configs(pd.DataFrame(rows, columns=columns)).reset_index(drop=True)


def preferred_verdict(verdicts: pd.DataFrame, row: Mapping) -> Mapping | None:
    """The verdict a finding quotes for one config: one whose point is not above its roof
    (see `roof_violation_notes`), ncu over analytic points, and the profile's own roofs over
    measured over datasheet ones."""
    if verdicts.empty:
        return None
    match = verdicts
    for k in GROUP_KEYS:
        match = match[match[k] == row[k]]
    match = match[match["bound"].notna()]
    if match.empty:
        return None
    rank = match.assign(
        _above=(match["fraction_of_roof"] > ROOF_TOLERANCE).astype(int),
        _source=(match["source"].astype(str) != "ncu").astype(int),
        _roof=match["roof"].map({o: i for i, o in enumerate(ROOF_ORIGINS)}),
    ).sort_values(["_above", "_source", "_roof"])
    return rank.iloc[0].drop(["_above", "_source", "_roof"]).to_dict()


def verdict_sentence(verdict: Mapping) -> str:
    level = LEVEL_LABELS.get(verdict["limit"], verdict["limit"])
    what = (
        f"{config_text(verdict)} on {verdict['machine']} ({verdict['source']} step point, "
        f"{verdict['roof']} roofs): "
    )
    if verdict["fraction_of_roof"] > ROOF_TOLERANCE:
        return what + (
            f"it reaches {fmt_si(verdict['performance_flop_s'], 'FLOP/s')}, "
            f"{fmt_times(verdict['fraction_of_roof'])} the roof above it "
            f"({fmt_si(verdict['attainable_flop_s'], 'FLOP/s')}): a point cannot "
            "beat its roof, so this roof is too low (or the FLOPs overcounted) and "
            "no bound is read from it."
        )
    if verdict["bound"] == "compute":
        what += (
            f"compute-bound — arithmetic intensity "
            f"{fmt(verdict['arithmetic_intensity_flop_per_byte'], 'FLOP/B')} is right of the "
            f"ridge point ({fmt(verdict['ridge_flop_per_byte'], 'FLOP/B')})"
        )
    else:
        what += (
            f"memory-bound at {level} — arithmetic intensity "
            f"{fmt(verdict['arithmetic_intensity_flop_per_byte'], 'FLOP/B')} is left of the "
            f"ridge point ({fmt(verdict['ridge_flop_per_byte'], 'FLOP/B')})"
        )
    what += (
        f"; it reaches {fmt_si(verdict['performance_flop_s'], 'FLOP/s')}, "
        f"{fmt_pct(verdict['fraction_of_roof'])} of the roof above it and "
        f"{fmt_pct(verdict['fraction_of_peak'])} of the {verdict['precision']} compute peak "
        f"({fmt_si(verdict['peak_flop_s'], 'FLOP/s')})"
    )
    return what + "."


# ------------------------------------------------------------------------------------------
# Profiled configurations: how busy the GPU is, and whether the profile's roof holds.
# ------------------------------------------------------------------------------------------
def _same_except(frame: pd.DataFrame, row: Mapping, free: str) -> pd.DataFrame:
    match = frame
    for key in GROUP_KEYS:
        if key != free:
            match = match[match[key] == row[key]]
    return match


def remedy_evidence(profile: Mapping, summary: pd.DataFrame | None) -> list[str]:
    """What this study already measured that speaks for a remedy of a host-bound step: the
    same configuration at a larger batch size, or a variant that compiles the step, going
    faster than it."""
    ok = ok_configs(summary)
    base = _match(ok, profile) if not ok.empty else None
    if base is None:
        return []
    evidence = []
    larger = _same_except(ok, profile, "batch_size")
    larger = larger[larger["batch_size"].astype(int) > int(profile["batch_size"])]
    if not larger.empty:
        best = larger.loc[larger[MEAN].idxmax()]
        if best[MEAN] > base[MEAN]:
            evidence.append(
                f"batch {int(best['batch_size'])} already reaches {fmt(best[MEAN], 'img/s')}, "
                f"{fmt_times(best[MEAN] / base[MEAN])} batch {int(profile['batch_size'])}"
            )
    if "compile_time_s" in ok.columns:
        variants = _same_except(ok, profile, "variant")
        compiled = variants[pd.to_numeric(variants["compile_time_s"], errors="coerce") > 0]
        compiled = compiled[compiled["variant"] != profile["variant"]]
        if not compiled.empty:
            best = compiled.loc[compiled[MEAN].idxmax()]
            if best[MEAN] > base[MEAN]:
                evidence.append(
                    f"the compiled variant {best['variant']!r} reaches "
                    f"{fmt(best[MEAN], 'img/s')}, {fmt_times(best[MEAN] / base[MEAN])} "
                    f"{profile['variant']!r}"
                )
    return evidence


def busy_sentence(profile: Mapping, summary: pd.DataFrame | None = None) -> str:
    """What the GPU's busy share says about one profiled configuration (profiles.csv row):
    host-bound (with the remedies the data supports), device-bound, or neither."""
    head = f"{config_text(profile)} on {profile['machine']}: "
    verdict = str(profile.get("busy_verdict"))
    if verdict == "unknown" or missing(profile.get("busy_share_at_profiled_clock")):
        return head + (
            f"its profiled step has {fmt(float(profile['kernel_time_s']) * 1e3, 'ms')} of kernels "
            f"at {fmt_ghz(profile.get('profiled_sm_clock_hz'))}, but "
            + (
                "no timed step to compare them with, so the GPU's busy share is unknown."
                if missing(profile.get("step_time_s"))
                else "the timed windows recorded no SM clock (NVML, package nvidia-ml-py), so "
                f"only an upper estimate is known: the GPU is busy at most "
                f"{fmt_pct(profile['busy_share_at_profiled_clock'])} of the step."
            )
        )
    share = profile.get("busy_share")
    busy = (
        f"the GPU is busy {fmt_pct(share)} of the timed step "
        f"({fmt(float(profile['kernel_time_at_run_clock_s']) * 1e3, 'ms')} of kernels at the "
        f"runs' {fmt_ghz(profile['run_sm_clock_hz'])}, "
        f"{fmt(float(profile['kernel_time_s']) * 1e3, 'ms')} at the profiled "
        f"{fmt_ghz(profile['profiled_sm_clock_hz'])}, in a "
        f"{fmt(float(profile['step_time_s']) * 1e3, 'ms')} step)"
    )
    if verdict == "host-bound":
        text = (
            head
            + busy
            + (
                ": host-bound — for the rest of the step the GPU waits on Python, the framework "
                "and kernel launches, so faster kernels would not shorten it. Remedies: capture "
                "the step in CUDA graphs (variant setting compile: reduce-overhead) or raise the "
                "batch size (more work per launch)"
            )
        )
        evidence = remedy_evidence(profile, summary)
        if evidence:
            text += "; in this study " + " and ".join(evidence)
        return text + "."
    if verdict == "device-bound":
        return (
            head
            + busy
            + (
                ": device-bound — the kernels are the step; faster kernels (a lower precision, "
                "fusion, channels-last) shorten it, host-side tuning does not."
                + (
                    " A share above 100% means the profiled kernels ran slower than in the timed "
                    "runs (ncu flushes caches before each kernel; memory-bound kernels gain "
                    "less from the clock than the scaling assumes)."
                    if not missing(share) and float(share) > 1
                    else ""
                )
            )
        )
    return (
        head
        + busy
        + (
            f" and at most {fmt_pct(profile['busy_share_at_profiled_clock'])}: partly host-bound "
            "— some of the step is spent waiting on the host, some on the kernels."
        )
    )


def profile_check_notes(profiles: pd.DataFrame | None) -> list[str]:
    """One note per profile whose calibration GEMM contradicts its FLOP counters or its
    compute roof: such a profile's FLOPs or roof are wrong for this GPU."""
    if profiles is None or profiles.empty:
        return []
    low, high = roofline.CALIBRATION_ROOF_RANGE
    notes = []
    for row in sort_configs(profiles).to_dict("records"):
        where = f"{config_text(row)} on {row['machine']}"
        if missing(row.get("calibration_flops_measured")):
            notes.append(
                f"Profile unchecked: {where} — its export holds no calibration GEMM, so neither "
                "its FLOP counters nor its roof could be checked; profile again with `nnperf step`."
            )
            continue
        if not truthy(row.get("calibration_ok")):
            notes.append(
                f"FLOP counters off: {where} — the calibration GEMM counted "
                f"{fmt_times(row['calibration_ratio'])} its known FLOPs (allowed: within "
                f"{fmt_pct(CALIBRATION_TOLERANCE)}); the profile's FLOPs and "
                "every point made from them are suspect."
            )
        if not truthy(row.get("roof_ok")):
            notes.append(
                f"Profile roof flagged: {where} — its calibration GEMM reached "
                f"{fmt_pct(row['calibration_roof_fraction'])} of the profile's "
                f"{row['precision']} compute roof ({fmt_si(row['calibration_roof_flop_s'], 'FLOP/s')}"
                f" at {fmt_ghz(row['calibration_clock_hz'])}; allowed {fmt_pct(low)}–"
                f"{fmt_pct(high)}), so that roof ({row['roof_basis']}) is wrong for this GPU and "
                "no bound is read from it; the measured and datasheet roofs still apply."
            )
    return notes


# ------------------------------------------------------------------------------------------
# What limits a configuration.
# ------------------------------------------------------------------------------------------
def limiter_sentence(config: Mapping, phases: pd.DataFrame, verdicts: pd.DataFrame) -> str | None:
    """One sentence on what limits `config`, from its phase shares and roofline verdict."""
    phase_row = _match(phases, config)
    verdict = preferred_verdict(verdicts, config)
    head = f"What limits {config_text(config)} on {config['machine']}: "
    if phase_row is not None and phase_row["input_share"] >= INPUT_BOUND_SHARE:
        return head + (
            f"the input pipeline — data wait and host-to-device copies take "
            f"{fmt_pct(phase_row['input_share'])} of each step "
            f"({fmt(phase_row['phase_total_s'] * 1e3, 'ms')}); a device-resident "
            "dataset or more DataLoader workers attack that share first."
        )
    if verdict is not None and verdict["fraction_of_roof"] <= ROOF_TOLERANCE:
        level = LEVEL_LABELS.get(verdict["limit"], verdict["limit"])
        fraction = float(verdict["fraction_of_roof"])
        if fraction < FAR_FROM_ROOF:
            text = (
                f"overheads, not the roofs — the step reaches only {fmt_pct(fraction)} of "
                f"the {verdict['roof']} {'compute' if verdict['bound'] == 'compute' else level + ' bandwidth'} "
                f"roof above it ({fmt_si(verdict['performance_flop_s'], 'FLOP/s')} of "
                f"{fmt_si(verdict['attainable_flop_s'], 'FLOP/s')} attainable), so launch "
                "latency, small kernels and framework time dominate; larger batches, "
                "torch.compile or CUDA graphs address that."
            )
        elif verdict["bound"] == "compute":
            text = (
                f"compute — the step is right of the ridge point and reaches "
                f"{fmt_pct(verdict['fraction_of_peak'])} of the {verdict['roof']} "
                f"{config['precision']} peak; a faster precision or fewer FLOPs help most."
            )
        else:
            text = (
                f"memory bandwidth at {level} — the step is left of the ridge point and "
                f"reaches {fmt_pct(fraction)} of the {verdict['roof']} bandwidth roof; "
                "fusing kernels, channels-last or lower precision (fewer bytes) help most."
            )
        if phase_row is not None:
            phase, share = largest_phase(phase_row)
            text += f" The largest phase is {PHASE_LABELS[phase]} ({fmt_pct(share)})."
        return head + text
    if phase_row is not None:
        phase, share = largest_phase(phase_row)
        if verdict is not None:
            # A point above its roof says the roof is too low, not what binds the step.
            roofline = (
                f"no roofline reading (the step lies above the {verdict['roof']} roof, "
                "so that roof is too low; see Roofline)"
            )
        else:
            roofline = "no roofline point for it"
        return head + (
            f"{roofline}; the largest phase is {PHASE_LABELS[phase]} "
            f"({fmt_pct(share)} of {fmt(phase_row['phase_total_s'] * 1e3, 'ms')} "
            "per step)."
        )
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
    columns = [
        *GROUP_KEYS,
        "rank",
        "kernel_name",
        "kind",
        "launches",
        "duration_s",
        "share",
        "flops_total",
        "bytes_dram",
        "arithmetic_intensity_dram_flop_per_byte",
        "performance_flop_s",
    ]
    if kernels is None or kernels.empty:
        return pd.DataFrame(columns=columns)
    step = kernels[kernels["phase"].astype(str) != "calibration"] if "phase" in kernels else kernels
    step = step.assign(
        **{
            c: pd.to_numeric(step[c], errors="coerce") if c in step else math.nan
            for c in ("duration_s", "flops_total", "bytes_dram")
        }
    )
    rows = []
    for key, group in step.groupby(list(GROUP_KEYS), sort=True):
        total = group["duration_s"].sum()
        per_name = (
            group.groupby(["kernel_name", "kind"], sort=False, dropna=False)
            .agg(
                launches=("duration_s", "size"),
                duration_s=("duration_s", "sum"),
                flops_total=("flops_total", "sum"),
                bytes_dram=("bytes_dram", "sum"),
            )
            .reset_index()
            .sort_values("duration_s", ascending=False)
            .head(n)
        )
        for rank, k in enumerate(per_name.to_dict("records"), start=1):
            rows.append(
                {
                    **dict(zip(GROUP_KEYS, key)),
                    "rank": rank,
                    **k,
                    "share": k["duration_s"] / total if total else math.nan,
                    "arithmetic_intensity_dram_flop_per_byte": (
                        k["flops_total"] / k["bytes_dram"] if k["bytes_dram"] else math.nan
                    ),
                    "performance_flop_s": (
                        k["flops_total"] / k["duration_s"] if k["duration_s"] else math.nan
                    ),
                }
            )
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
    return sort_configs(kinds.sort_values("share", ascending=False))[columns]


def complexity_table(documents: Sequence[Mapping]) -> pd.DataFrame:
    """One row per model: parameters, FLOPs and bytes per image (complexity JSONs)."""
    rows = []
    for d in sorted(documents, key=lambda d: str(d.get("model"))):
        traffic = (d.get("traffic") or {}).get(REFERENCE_PRECISION) or {}
        rows.append(
            {
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
            }
        )
    return pd.DataFrame(rows)


def ceilings_table(ceilings: Sequence[Mapping]) -> pd.DataFrame:
    """Per machine and device: measured vs datasheet compute (per dtype) and bandwidth."""
    rows = []
    for c in sorted(ceilings, key=lambda c: (str(c.get("machine")), str(c.get("device")))):
        measured = c.get("measured") or {}
        datasheet = c.get("datasheet") or {}
        dtypes = list(
            dict.fromkeys([*(measured.get("gemm_flop_s") or {}), *(datasheet.get("flop_s") or {})])
        )
        dtypes.sort(key=precision_rank)
        for dtype in dtypes:
            m = _positive((measured.get("gemm_flop_s") or {}).get(dtype))
            s = _positive((datasheet.get("flop_s") or {}).get(dtype))
            rows.append(
                {
                    "machine": c.get("machine"),
                    "device": c.get("device"),
                    "roof": f"{dtype} GEMM",
                    "unit": "FLOP/s",
                    "measured": m,
                    "datasheet": s,
                    "measured_over_datasheet": m / s if m and s else None,
                }
            )
        m = _positive(measured.get("memory_bandwidth_bytes_s"))
        s = _positive(datasheet.get("memory_bandwidth_bytes_s"))
        rows.append(
            {
                "machine": c.get("machine"),
                "device": c.get("device"),
                "roof": "memory bandwidth",
                "unit": "B/s",
                "measured": m,
                "datasheet": s,
                "measured_over_datasheet": m / s if m and s else None,
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "machine",
            "device",
            "roof",
            "unit",
            "measured",
            "datasheet",
            "measured_over_datasheet",
        ],
    )


# ------------------------------------------------------------------------------------------
# Notes: skipped and flagged.
# ------------------------------------------------------------------------------------------
def configs_with_status(
    summary: pd.DataFrame | None, runs: pd.DataFrame | None, status: str
) -> pd.DataFrame:
    """One row per configuration whose measurement ended with `status` (summary.csv; from
    runs.csv, one row per process, only when there is no summary)."""
    frame = summary if summary is not None and "status" in summary.columns else runs
    if frame is None or frame.empty or "status" not in frame.columns:
        return pd.DataFrame(columns=[*GROUP_KEYS, "status"])
    chosen = frame[frame["status"].astype(str) == status]
    return sort_configs(chosen.drop_duplicates(list(GROUP_KEYS)))


def _error(row: Mapping) -> str | None:
    error = row.get("error")
    return error.strip().rstrip(".") if isinstance(error, str) and error.strip() else None


def oom_notes(summary: pd.DataFrame | None, runs: pd.DataFrame | None = None) -> list[str]:
    """One note per configuration that ran out of memory, with the error it raised."""
    notes = []
    for row in configs_with_status(summary, runs, "oom").to_dict("records"):
        text = f"Out of memory: {config_text(row)} on {row['machine']}"
        if _error(row):
            text += f": {_error(row)}"
        notes.append(text + ".")
    return notes


def over_budget_notes(summary: pd.DataFrame | None, runs: pd.DataFrame | None = None) -> list[str]:
    """One note per configuration whose step was too slow for its warm-up and minimal timed
    windows to fit in `timing.max_seconds`: it has no throughput, only the step time the
    runner measured (`single_step_time_s`; a lower bound when the worker was stopped
    mid-step, `single_step_time_is_lower_bound`)."""
    notes = []
    for row in configs_with_status(summary, runs, "over_budget").to_dict("records"):
        text = f"Over budget: {config_text(row)} on {row['machine']} was not measured"
        step = row.get("single_step_time_s")
        if not missing(step):
            at_least = "at least " if truthy(row.get("single_step_time_is_lower_bound")) else ""
            text += f" — one training step takes {at_least}{fmt(step, 's')}"
        error = _error(row)
        if error:
            # The runner's message starts with what this note already says.
            error = re.sub(r"^over budget:\s*", "", error, flags=re.IGNORECASE)
            text += f" ({error})"
        notes.append(text + "; raise timing.max_seconds to measure it.")
    return notes


def unstable_notes(summary: pd.DataFrame | None) -> list[str]:
    """One note per configuration flagged unstable (summary.csv `unstable`), with the
    reasons the runner gave (`unstable_reasons`, "; "-joined): windows disturbed by other
    processes, throttled clocks, a capped power limit."""
    if summary is None or summary.empty or "unstable" not in summary.columns:
        return []
    flagged = sort_configs(summary[summary["unstable"].map(truthy)])
    notes = []
    for row in flagged.to_dict("records"):
        reasons = row.get("unstable_reasons")
        reasons = reasons if isinstance(reasons, str) and reasons.strip() else "no reason recorded"
        notes.append(
            f"Unstable: {config_text(row)} on {row['machine']} — {reasons}; its throughput is "
            "marked unstable wherever it is quoted, and comparisons with it need care."
        )
    return notes


def roof_violation_notes(verdicts: pd.DataFrame) -> list[str]:
    """One note per machine, device, roof origin and precision whose roof some step points
    exceed: such a roof is wrong for the device (a benchmark that ran badly, a datasheet
    entry for another model) or the FLOPs are overcounted, and every reading against it is
    void. The worst point is quoted."""
    if verdicts.empty:
        return []
    above = verdicts[verdicts["fraction_of_roof"] > ROOF_TOLERANCE]
    notes = []
    keys = ["machine", "device", "roof", "precision"]
    for key, group in above.groupby(keys, sort=True):
        worst = group.loc[group["fraction_of_roof"].idxmax()]
        row = dict(zip(keys, key))
        notes.append(
            f"Roof too low: {len(group)} {row['precision']} step point"
            f"{'s lie' if len(group) != 1 else ' lies'} above the {row['roof']} roofs on "
            f"{row['machine']} "
            f"(worst: {config_text(worst)} at {fmt_si(worst['performance_flop_s'], 'FLOP/s')}, "
            f"{fmt_times(worst['fraction_of_roof'])} the {fmt_si(worst['attainable_flop_s'], 'FLOP/s')} "
            f"roof); check the {row['roof']} {row['precision']} ceiling of {row['device']}."
        )
    return notes


def variance_notes(summary: pd.DataFrame | None, cv_threshold: float) -> list[str]:
    """Configurations whose throughput varies across windows more than `cv_threshold` (CV)."""
    ok = ok_configs(summary)
    if ok.empty or "throughput_img_s_cv" not in ok.columns:
        return []
    cv = pd.to_numeric(ok["throughput_img_s_cv"], errors="coerce")
    flagged = cv > cv_threshold
    if "high_variance" in ok.columns:
        flagged = flagged | ok["high_variance"].map(truthy)
    notes = []
    for row in sort_configs(ok[flagged]).to_dict("records"):
        windows = count_of(row.get("n_windows"), "window")
        processes = count_of(row.get("n_processes"), "process")
        notes.append(
            f"High variance: {config_text(row)} on {row['machine']} — throughput CV "
            f"{fmt_pct(row['throughput_img_s_cv'])} across {windows} of {processes} "
            f"(threshold {fmt_pct(cv_threshold)}); treat its numbers and speedups with care."
        )
    return notes


def sort_notes(notes: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(notes))


# ------------------------------------------------------------------------------------------
# Measurement cost and quality.
# ------------------------------------------------------------------------------------------
STOP_LABELS = {
    "ci_target": "CI target reached",
    "budget": "time budget (timing.max_seconds)",
    "max_processes": "process limit (timing.max_processes)",
    "target_unreachable": "target out of reach (process spread)",
}
MEASUREMENT_COLUMNS = (
    "status",
    "n_processes",
    "n_windows",
    "ci_half_width_rel",
    "ci_target",
    "target_met",
    "stop_reason",
    "stop_detail",
    "dominant_level",
    "between_process_rsd",
    "within_process_rsd",
    "fixed_cost_s",
    "process_fixed_cost_s",
    "compile_time_s",
    "compile_time_s_later",
    "timed_window_s",
    "elapsed_s",
    "duty_cycle",
    "unstable",
    "unstable_reasons",
    "flagged_windows",
    "windows_recorded",
)
NUMERIC_MEASUREMENT_COLUMNS = (
    "n_processes",
    "n_windows",
    "ci_half_width_rel",
    "ci_target",
    "fixed_cost_s",
    "process_fixed_cost_s",
    "compile_time_s",
    "compile_time_s_later",
    "timed_window_s",
    "elapsed_s",
    "duty_cycle",
)


def union_seconds(intervals: Iterable[tuple[float, float]]) -> float:
    """Seconds covered by at least one (start, end) interval: how long something ran,
    counting jobs that overlapped (a complexity job beside a timed run) once."""
    total, covered_to = 0.0, None
    for start, end in sorted(intervals):
        if covered_to is None or start > covered_to:
            total += end - start
            covered_to = end
        elif end > covered_to:
            total += end - covered_to
            covered_to = end
    return total


def target_met(row: Mapping) -> bool | None:
    """Whether the CI reached its target (`ci_target_met`; from the half-width and the
    target where the table lacks it), None where neither says."""
    value = row.get("ci_target_met")
    if not missing(value):
        return truthy(value)
    half, target = row.get("ci_half_width_rel"), row.get("ci_target")
    if missing(half) or missing(target):
        return None
    return float(half) <= float(target)


def _rsd(variance, mean) -> float:
    """A variance component in (img/s)^2 as a standard deviation relative to the mean (a
    negative between-process estimate, possible with Kalibera & Jones' formula, is 0)."""
    if missing(variance) or missing(mean) or float(mean) <= 0:
        return math.nan
    return math.sqrt(max(float(variance), 0.0)) / float(mean)


def measurement_table(
    summary: pd.DataFrame | None, windows: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Per configuration (every status): how it was measured and how well.

    Processes and windows, the CI half-width against its target, why measurement stopped,
    which level dominates the variance and the two components as relative standard
    deviations (`between_process_rsd`, `within_process_rsd`), the fixed costs, compile time
    of the first and the later processes, timed seconds, elapsed seconds and duty cycle, the
    unstable flag with its reasons and, from windows.csv when given, how many windows were
    flagged.
    """
    columns = [*GROUP_KEYS, *MEASUREMENT_COLUMNS]
    if summary is None or summary.empty:
        return pd.DataFrame(columns=columns)
    frame = summary.copy()
    for name in (*NUMERIC_MEASUREMENT_COLUMNS, MEAN):
        frame[name] = pd.to_numeric(frame[name], errors="coerce") if name in frame else math.nan
    for name in ("status", "stop_reason", "stop_detail", "dominant_level", "unstable_reasons"):
        if name not in frame:
            frame[name] = None
    rows = frame.to_dict("records")
    frame["target_met"] = pd.array([target_met(r) for r in rows], dtype="boolean")
    frame["between_process_rsd"] = [
        _rsd(r.get("variance_between_processes"), r[MEAN]) for r in rows
    ]
    frame["within_process_rsd"] = [_rsd(r.get("variance_within_process"), r[MEAN]) for r in rows]
    frame["unstable"] = [truthy(r.get("unstable")) for r in rows]
    frame["flagged_windows"] = math.nan
    frame["windows_recorded"] = math.nan
    if windows is not None and not windows.empty and set(GROUP_KEYS) <= set(windows.columns):
        counted = windows.assign(
            _flagged=windows["flagged"].map(truthy) if "flagged" in windows else False
        )
        counts = (
            counted.groupby(list(GROUP_KEYS), sort=False)
            .agg(_flagged=("_flagged", "sum"), _recorded=("_flagged", "size"))
            .reset_index()
        )
        frame = frame.merge(counts, on=list(GROUP_KEYS), how="left")
        frame["flagged_windows"] = frame["_flagged"]
        frame["windows_recorded"] = frame["_recorded"]
    return sort_configs(frame[columns]).reset_index(drop=True)


def ci_target_counts(table: pd.DataFrame) -> tuple[int, int]:
    """(met, judged): measured configurations that reached their CI target, of those whose
    target and CI say either way."""
    measured = table[table["status"].astype(str) == "ok"]
    known = measured["target_met"].dropna()
    return int(known.sum()), len(known)


def ci_target_sentence(table: pd.DataFrame) -> str | None:
    """How many measured configurations reached their CI target."""
    met, judged = ci_target_counts(table)
    if not judged:
        return None
    text = (
        f"{met} of {judged} measured configuration{'s' if judged != 1 else ''} reached "
        f"{'their' if judged != 1 else 'its'} CI target (a 95% CI half-width of throughput "
        "within timing.target_ci of the estimate)"
    )
    if met < judged:
        text += f"; {judged - met} did not"
    return text + "."


def ci_missed_sentences(table: pd.DataFrame) -> list[str]:
    """One sentence per measured configuration whose CI is wider than its target, and why
    measurement stopped before reaching it (the budget, the process limit)."""
    measured = table[table["status"].astype(str) == "ok"]
    missed = measured[measured["target_met"].fillna(True).eq(False)]
    sentences = []
    for row in missed.to_dict("records"):
        shape = (
            f"{count_of(row['n_processes'], 'process')} and {count_of(row['n_windows'], 'window')}"
        )
        if missing(row["ci_half_width_rel"]):
            width = f"no CI could be made from {shape}"
        else:
            width = (
                f"its 95% CI half-width is {fmt_pct(row['ci_half_width_rel'])} against a "
                f"target of {fmt_pct(row['ci_target'])} after {shape}"
            )
        reason = row.get("stop_reason")
        if reason == "budget":
            why = (
                "the time budget ran out first (timing.max_seconds); a larger budget buys "
                "more processes and windows"
            )
        elif reason == "max_processes":
            why = "it reached the process limit first (timing.max_processes)"
        elif reason == "target_unreachable":
            detail = row.get("stop_detail")
            why = "it stopped early, the target out of reach" + (
                f": {detail}" if isinstance(detail, str) and detail else ""
            )
        elif isinstance(reason, str) and reason:
            why = f"it stopped on {STOP_LABELS.get(reason, reason)}"
        else:
            why = "no stop reason was recorded"
        sentences.append(
            f"{config_text(row)} on {row['machine']} missed its CI target: {width}; {why}."
        )
    return sentences


def dominant_level_sentences(table: pd.DataFrame) -> list[str]:
    """Per machine: which level of the measurement — between worker processes or between
    windows of one process — contributes more variance, and so what narrows the CI."""
    measured = table[
        (table["status"].astype(str) == "ok") & table["dominant_level"].isin(["process", "window"])
    ]
    sentences = []
    for machine, group in measured.groupby("machine", sort=True):
        by_process = int((group["dominant_level"] == "process").sum())
        by_window = len(group) - by_process
        if by_window == 0 or by_process == 0:
            level = "processes" if by_window == 0 else "windows of one process"
            counts = f"the spread between {level} dominates in all {len(group)} configurations"
        else:
            counts = (
                f"the spread between processes dominates in {by_process} of {len(group)} "
                f"configurations and the spread between windows of one process in {by_window}"
            )
        text = (
            f"On {machine}, {counts} (median relative standard deviations: "
            f"{fmt_pct(group['between_process_rsd'].median())} between processes, "
            f"{fmt_pct(group['within_process_rsd'].median())} within one)"
        )
        if by_process > by_window:
            text += (
                "; where processes dominate, more processes narrow the CI, more windows per "
                "process do not (Kalibera & Jones)"
            )
        sentences.append(text + ".")
    return sentences


def fixed_cost_sentences(table: pd.DataFrame) -> list[str]:
    """Per machine: the median cost of getting to the first warm-up step, for the job and
    for each further worker process, and of compilation where a variant compiles."""
    sentences = []
    for machine, group in table.groupby("machine", sort=True):
        fixed = group["fixed_cost_s"].dropna()
        if not fixed.empty:
            text = (
                f"On {machine}, a configuration's fixed cost — its job's start to the first "
                f"warm-up step — is {fmt(fixed.median(), 's')} (median of {len(fixed)})"
            )
            per_process = group["process_fixed_cost_s"].dropna()
            if not per_process.empty:
                text += (
                    f", and a worker process needs {fmt(per_process.median(), 's')} from its "
                    "start to its first step"
                )
            sentences.append(text + ".")
        compiled = group.dropna(subset=["compile_time_s"])
        if not compiled.empty:
            text = (
                f"On {machine}, compilation took {fmt(compiled['compile_time_s'].median(), 's')} "
                f"in the first process (median of {len(compiled)} compiled "
                f"configuration{'s' if len(compiled) != 1 else ''})"
            )
            later = compiled["compile_time_s_later"].dropna()
            if not later.empty:
                text += (
                    f" and {fmt(later.median(), 's')} in later processes, which reuse the "
                    "first one's caches"
                )
            sentences.append(text + ".")
    return sentences


def study_cost(
    jobs: pd.DataFrame | None, summary: pd.DataFrame | None, rendered_at_unix: float
) -> dict:
    """What the study cost in wall time.

    `span_s`: from the earliest recorded job start to `rendered_at_unix` (the report);
    `busy_s`: the union of the recorded job intervals; `timed_s`: the summed timed-window
    seconds of every configuration (summary.csv `timed_window_s`) and their shares of both.
    Times are None where no job recorded when it ran.
    """
    timed = 0.0
    if summary is not None and "timed_window_s" in summary.columns:
        timed = float(pd.to_numeric(summary["timed_window_s"], errors="coerce").fillna(0).sum())
    cost = {
        "jobs": 0,
        "first_start": None,
        "rendered_at": rendered_at_unix,
        "span_s": None,
        "busy_s": None,
        "timed_s": timed,
        "timed_share_of_span": None,
        "timed_share_of_busy": None,
    }
    if jobs is None or jobs.empty:
        return cost
    intervals = list(
        zip(jobs["started_at_unix"].astype(float), jobs["ended_at_unix"].astype(float))
    )
    first = min(start for start, _ in intervals)
    span = rendered_at_unix - first
    busy = union_seconds(intervals)
    cost.update(
        jobs=len(intervals),
        first_start=first,
        span_s=span,
        busy_s=busy,
        timed_share_of_span=timed / span if span > 0 else None,
        timed_share_of_busy=timed / busy if busy > 0 else None,
    )
    return cost


def cost_sentences(cost: Mapping) -> list[str]:
    if cost["first_start"] is None:
        return [
            "No job recorded when it ran (results from before jobs kept their start and end "
            f"times), so the study's wall time is unknown; its timed windows took "
            f"{fmt_duration(cost['timed_s'])}."
        ]
    return [
        f"The study spans {fmt_duration(cost['span_s'])}, from its first recorded job start "
        f"({fmt_utc(cost['first_start'])}) to this report ({fmt_utc(cost['rendered_at'])}); "
        f"its {cost['jobs']} recorded job{'s were' if cost['jobs'] != 1 else ' was'} busy for "
        f"{fmt_duration(cost['busy_s'])} (the union of their intervals).",
        f"The timed windows took {fmt_duration(cost['timed_s'])}: "
        f"{fmt_pct(cost['timed_share_of_span'])} of the span and "
        f"{fmt_pct(cost['timed_share_of_busy'])} of the busy time (the duty cycle); the rest "
        "went to starting processes, warm-up, compilation, the stages that time nothing "
        "(ceilings, complexity, profiles) and the gaps between jobs.",
    ]


# How the wall-time table names each kind of job (singular, plural), in this order.
JOB_LABELS = {
    "run": ("timed run", "timed runs"),
    "ceilings": ("ceilings job", "ceilings jobs"),
    "complexity": ("complexity job", "complexity jobs"),
}


def cost_by_folder(jobs: pd.DataFrame | None, summary: pd.DataFrame | None) -> pd.DataFrame:
    """Per results folder (one run of the study on one machine): its machines, the jobs that
    recorded when they ran, first start and last end, busy time (union of the intervals),
    timed-window seconds and their share of the busy time."""
    columns = [
        "results_dir",
        "machines",
        "jobs",
        "first_start",
        "last_end",
        "busy_s",
        "timed_s",
        "timed_share_of_busy",
    ]
    if jobs is None or jobs.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for folder, group in jobs.groupby("results_dir", sort=False):
        mine = None
        if summary is not None and "results_dir" in summary.columns:
            mine = summary[summary["results_dir"] == folder]
        timed = (
            float(pd.to_numeric(mine["timed_window_s"], errors="coerce").fillna(0).sum())
            if mine is not None and "timed_window_s" in mine.columns
            else math.nan
        )
        busy = union_seconds(zip(group["started_at_unix"], group["ended_at_unix"]))
        kinds = group["kind"].value_counts()
        ordered = [k for k in JOB_LABELS if k in kinds.index]
        ordered += sorted(k for k in kinds.index if k not in JOB_LABELS)
        jobs_text = ", ".join(
            f"{kinds[kind]} {JOB_LABELS.get(kind, (kind, kind))[int(kinds[kind] != 1)]}"
            for kind in ordered
        )
        rows.append(
            {
                "results_dir": folder,
                "machines": (
                    ", ".join(sorted(mine["machine"].dropna().unique()))
                    if mine is not None and "machine" in mine.columns
                    else ""
                ),
                "jobs": jobs_text,
                "first_start": float(group["started_at_unix"].min()),
                "last_end": float(group["ended_at_unix"].max()),
                "busy_s": busy,
                "timed_s": timed,
                "timed_share_of_busy": timed / busy if busy > 0 else math.nan,
            }
        )
    return pd.DataFrame(rows, columns=columns)
