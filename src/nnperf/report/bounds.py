"""What binds each training step: its roofline readings and verdicts.

`roofline_readings` reads every step-level roofline point against every roof origin (the
profile's own peaks, the ceilings stage's measured roofs, the datasheet's);
`roofline_verdicts` takes, per configuration, point source and origin, the lowest roof as
the one the step runs under; `preferred_verdict` is the one a sentence quotes. Frames in,
frames out: the sentences and the Roofline section are `nnperf.report.sections.roofline`,
the points themselves `nnperf.roofline.points`.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import pandas as pd

from nnperf.core.wording import missing
from nnperf.ncu.metrics import compute_peak_column
from nnperf.report.configurations import GROUP_KEYS, sort_configs
from nnperf.report.format import truthy
from nnperf.report.results import ResultSet
from nnperf.roofline import points as roofline_points

# A point may sit a little above a roof from timing noise; more than 5% above means the roof
# (or the point's FLOP count) is wrong, and no bound is read from that roof.
ROOF_TOLERANCE = 1.05


# A memory level as the page names it: `algorithmic` is the no-reuse traffic of an analytic
# point, main-memory traffic, which the ceilings JSON's bandwidth bounds (the figures and
# the tables say the same). The profile's own roofs cover every level.
LEVEL_LABELS = {
    "dram": "DRAM",
    "l2": "L2",
    "l1": "L1",
    "algorithmic": "main memory",
    "compute": "compute",
}


ROOF_ORIGINS = ("profile", "measured", "datasheet")


def positive(value) -> float | None:
    if missing(value):
        return None
    x = float(value)
    return x if x > 0 else None


def json_roofs(ceiling: Mapping | None, precision: str, origin: str) -> tuple[float | None, dict]:
    """(compute roof for `precision`, {memory level: bandwidth}) from a ceilings JSON."""
    section = (ceiling or {}).get(origin) or {}
    flop_s = section.get("gemm_flop_s" if origin == "measured" else "flop_s") or {}
    bandwidth = positive(section.get("memory_bandwidth_bytes_s"))
    levels = (
        {level: bandwidth for level in roofline_points.JSON_BANDWIDTH_LEVELS} if bandwidth else {}
    )
    return positive(flop_s.get(precision)), levels


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
            return positive(values.median()) if len(values) else None

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
        intensity = positive(point["arithmetic_intensity_flop_per_byte"])
        performance = positive(point["performance_flop_s"])
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
            ridge = roofline_points.ridge_point(peak, bandwidth) if peak and bandwidth else None
            attainable = None
            bound = None
            if intensity is not None and peak and bandwidth:
                attainable = roofline_points.attainable(intensity, peak, bandwidth)
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


def study_readings(tables: ResultSet) -> pd.DataFrame:
    """`roofline_readings` of a study's tables."""
    return roofline_readings(
        tables.roofline_points, tables.ceilings, tables.kernels, tables.profiles
    )


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
