"""What binds each training step: every step-level roofline point read against every roof
origin (profile, measured, datasheet), and the lowest roof as the one the step runs under."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from nnperf.core.wording import missing
from nnperf.ncu.metrics import compute_peak_column
from nnperf.report.format import GROUP_KEYS, sort_configs, truthy
from nnperf.report.results import ResultSet
from nnperf.roofline import points as roofline_points

# A point may sit a little above a roof from timing noise; more than 5% above means the roof
# (or the point's FLOP count) is wrong, and no bound is read from that roof.
ROOF_TOLERANCE = 1.05

# A memory level as the page names it: `algorithmic` is the no-reuse traffic of an analytic
# point, main-memory traffic, which the ceilings JSON's bandwidth bounds.
LEVEL_LABELS = dict(dram="DRAM", l2="L2", l1="L1", algorithmic="main memory", compute="compute")

ROOF_ORIGINS = ("profile", "measured", "datasheet")
KEYS = [*GROUP_KEYS, "source", "roof"]
# What a reading and a verdict say of the step against its roof.
NUMBERS = [
    *("arithmetic_intensity_flop_per_byte", "ridge_flop_per_byte", "performance_flop_s"),
    *("peak_flop_s", "attainable_flop_s", "fraction_of_roof", "fraction_of_peak"),
]
READING_COLUMNS = [*KEYS, "memory_level", "bandwidth_bytes_s", "bound", *NUMBERS]
VERDICT_COLUMNS = [*KEYS, "limit", "bound", *NUMBERS, "levels"]


def positive(value) -> float | None:
    return None if missing(value) or float(value) <= 0 else float(value)


def json_roofs(ceiling: Mapping | None, precision: str, origin: str) -> tuple[float | None, dict]:
    section = (ceiling or {}).get(origin) or {}
    flop_s = section.get("gemm_flop_s" if origin == "measured" else "flop_s") or {}
    bandwidth = positive(section.get("memory_bandwidth_bytes_s"))
    levels = dict.fromkeys(roofline_points.JSON_BANDWIDTH_LEVELS, bandwidth) if bandwidth else {}
    return positive(flop_s.get(precision)), levels


def profile_roofs(kernels: pd.DataFrame | None, profiles: pd.DataFrame | None = None) -> dict:
    """Per configuration: the profile's own roofs, less those its calibration GEMM contradicts."""
    if kernels is None or kernels.empty:
        return {}
    flagged = set()
    if profiles is not None and "roof_ok" in profiles.columns:
        bad = profiles[~profiles["roof_ok"].map(truthy)].astype({"batch_size": int})
        flagged = set(bad[list(GROUP_KEYS)].itertuples(index=False, name=None))
    result = {}
    for key, group in kernels.groupby(list(GROUP_KEYS), sort=True):
        if tuple(int(v) if k == "batch_size" else v for k, v in zip(GROUP_KEYS, key)) in flagged:
            continue
        medians = group.apply(pd.to_numeric, errors="coerce").median()
        column = compute_peak_column(key[GROUP_KEYS.index("precision")])
        levels = {lv: positive(medians.get(f"peak_bytes_s_{lv}")) for lv in ("dram", "l2", "l1")}
        result[key] = (positive(medians.get(column)), {k: v for k, v in levels.items() if v})
    return result


def roofline_readings(
    points: pd.DataFrame | None,
    ceilings: Sequence[Mapping],
    kernels: pd.DataFrame | None = None,
    profiles: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per step-level roofline point and roof origin: its peak, bandwidth, ridge,
    bound, attainable min(peak, intensity x bandwidth) and the fractions of both reached."""
    if points is None or points.empty:
        return pd.DataFrame(columns=READING_COLUMNS)
    if "granularity" in points:
        points = points[points["granularity"].astype(str) == "step"]
    by_device = {(c.get("machine"), c.get("device")): c for c in ceilings}
    own = profile_roofs(kernels, profiles)
    rows = []
    for point in points.to_dict("records"):
        key = tuple(point[k] for k in GROUP_KEYS)
        for origin in ROOF_ORIGINS:
            if origin != "profile":
                ceiling = by_device.get((point["machine"], point["device"]))
                peak, levels = json_roofs(ceiling, str(point["precision"]), origin)
            elif str(point.get("source")) == "ncu" and key in own:
                peak, levels = own[key]
            else:
                continue
            level = str(point["memory_level"])
            roofs = dict(roof=origin, peak_flop_s=peak, bandwidth_bytes_s=levels.get(level))
            if peak is not None or roofs["bandwidth_bytes_s"] is not None:
                rows.append({**point, "memory_level": level, **roofs})
    frame = pd.DataFrame(rows, columns=READING_COLUMNS)
    intensity = frame["arithmetic_intensity_flop_per_byte"].map(positive).astype(float)
    performance = frame["performance_flop_s"].map(positive).astype(float)
    peak, bandwidth = frame["peak_flop_s"].astype(float), frame["bandwidth_bytes_s"].astype(float)
    ridge = peak / bandwidth
    attainable = np.fmin(peak, intensity * bandwidth).where(ridge.notna() & intensity.notna())
    return frame.assign(
        arithmetic_intensity_flop_per_byte=intensity,
        performance_flop_s=performance,
        ridge_flop_per_byte=ridge,
        bound=np.where(attainable.isna(), None, np.where(intensity < ridge, "memory", "compute")),
        attainable_flop_s=attainable,
        fraction_of_roof=performance / attainable,
        fraction_of_peak=performance / peak,
    ).astype({"bound": object})


def study_readings(t: ResultSet) -> pd.DataFrame:
    return roofline_readings(t.roofline_points, t.ceilings, t.kernels, t.profiles)


def roofline_verdicts(readings: pd.DataFrame) -> pd.DataFrame:
    """Per configuration, point source and roof origin: the lowest of the compute peak and
    every level's intensity x bandwidth binds the step (`limit`). A compute peak without any
    bandwidth roof reads no bound (limit `unknown`), but the fraction of the peak still."""
    if readings.empty:
        return pd.DataFrame(columns=VERDICT_COLUMNS)
    readings = readings.assign(
        _roof=readings["arithmetic_intensity_flop_per_byte"] * readings["bandwidth_bytes_s"]
    )
    usable = readings.dropna(subset=["attainable_flop_s"])
    lowest = usable.loc[usable.groupby(KEYS, sort=False)["_roof"].idxmin()]
    memory = lowest["_roof"] < lowest["peak_flop_s"]
    levels = usable.groupby(KEYS)["memory_level"].transform(lambda s: " ".join(sorted(s)))
    lowest = lowest.assign(
        limit=lowest["memory_level"].where(memory, "compute"),
        bound=np.where(memory, "memory", "compute"),
        attainable_flop_s=lowest["_roof"].where(memory, lowest["peak_flop_s"]),
        levels=levels.loc[lowest.index],
    )
    peaks_only = readings[~readings.set_index(KEYS).index.isin(lowest.set_index(KEYS).index)]
    peaks_only = peaks_only.dropna(subset=["peak_flop_s", "performance_flop_s"])
    unknown = dict(limit="unknown", bound=None, ridge_flop_per_byte=np.nan, levels="")
    peaks_only = peaks_only.groupby(KEYS, sort=False).head(1).assign(**unknown)
    verdicts = pd.concat([lowest, peaks_only]).assign(
        fraction_of_roof=lambda f: f["performance_flop_s"] / f["attainable_flop_s"],
        fraction_of_peak=lambda f: f["performance_flop_s"] / f["peak_flop_s"],
    )
    verdicts = verdicts.sort_values(KEYS, kind="stable")[VERDICT_COLUMNS]
    return sort_configs(verdicts).reset_index(drop=True)


def preferred_verdict(verdicts: pd.DataFrame, row: Mapping) -> Mapping | None:
    """The verdict a finding quotes for one config: one whose point is not above its roof,
    ncu over analytic points, and the profile's own roofs over measured over datasheet ones."""
    if verdicts.empty:
        return None
    keys = (verdicts[list(GROUP_KEYS)] == pd.Series(row)[list(GROUP_KEYS)]).all(axis=1)
    match = verdicts[keys & verdicts["bound"].notna()]
    if match.empty:
        return None
    rank = match.assign(
        _above=(match["fraction_of_roof"] > ROOF_TOLERANCE).astype(int),
        _source=(match["source"].astype(str) != "ncu").astype(int),
        _roof=match["roof"].map({o: i for i, o in enumerate(ROOF_ORIGINS)}),
    ).sort_values(["_above", "_source", "_roof"])
    return rank.iloc[0].drop(["_above", "_source", "_roof"]).to_dict()
