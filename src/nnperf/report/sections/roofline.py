"""The Roofline section: what binds each configuration's step (`nnperf.report.bounds`
reads the points against the roofs) and, for the configurations profiled under Nsight
Compute, how busy the GPU is over the timed step and whether the profile's checks hold."""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from nnperf.core.wording import missing
from nnperf.report.bounds import LEVEL_LABELS, ROOF_TOLERANCE, roofline_verdicts, study_readings
from nnperf.report.findings import Finding
from nnperf.report.format import GROUP_KEYS, MEAN, MS, cells, fmt, fmt_ghz, fmt_pct, fmt_times
from nnperf.report.format import key_columns, match_config, ok_configs, si, sort_configs, truthy
from nnperf.report.outline import Page, Section, Table, section
from nnperf.roofline.peaks import peak_origin
from nnperf.roofline.points import CALIBRATION_ROOF_RANGE

INTRO = (
    "Each training step as a point (FLOPs per byte moved, FLOP/s achieved) against the roofs: "
    "the compute peak of its precision and the bandwidth of each memory level. The lowest roof "
    "above the point binds it; left of the ridge point it is memory-bound, right of it "
    "compute-bound. Profile roofs are Nsight Compute's own peaks at the profiled clock, "
    "measured roofs the ceilings stage's benchmarks, datasheet roofs the vendor's numbers; a "
    "CPU without a datasheet entry gets a peak derived from cores x clock x FLOP/cycle, "
    "labelled derived. A point above a roof is flagged: a step cannot beat its roof, so that "
    "roof is under-measured. Analytic points (CPU, MPS) count FLOPs from the model and bytes "
    "as algorithmic no-reuse traffic, which overstates bytes: they sit left of where the "
    "hardware really is."
)


def roof_names(verdicts: pd.DataFrame, ceilings) -> list[str]:
    """Each verdict's roof origin: `derived` where the datasheet entry is a CPU's derived peak."""
    cpus = [c for c in ceilings if peak_origin(c.get("datasheet")) == "derived"]
    derived = {(c.get("machine"), c.get("device")) for c in cpus}
    roofs, devices = verdicts["roof"], zip(verdicts["machine"], verdicts["device"])
    return ["derived" if r == "datasheet" and d in derived else r for r, d in zip(roofs, devices)]


def above_roof(verdicts: pd.DataFrame, ceilings=()) -> pd.DataFrame:
    """The verdicts with `roof_name`, `above_roof` (the step beat its roof or its peak),
    `above_fraction` (1.09: by 9%) and `above_value` (the FLOP/s it beat)."""
    if verdicts.empty:
        return verdicts.assign(roof_name=[], above_roof=[], above_fraction=[], above_value=[])
    of_roof = pd.to_numeric(verdicts["fraction_of_roof"], errors="coerce")
    of_peak = pd.to_numeric(verdicts["fraction_of_peak"], errors="coerce")
    # The peak where no bandwidth roof gives an attainable value, or where it is beaten more.
    by_peak = of_roof.isna() | (of_peak > of_roof)
    fraction = of_peak.where(by_peak, of_roof)
    value = verdicts["peak_flop_s"].where(by_peak, verdicts["attainable_flop_s"])
    return verdicts.assign(
        roof_name=roof_names(verdicts, ceilings),
        above_roof=(fraction > 1).fillna(False).astype(bool),
        above_fraction=fraction,
        above_value=pd.to_numeric(value, errors="coerce"),
    )


def above_roof_records(flagged: pd.DataFrame, ceilings=()) -> list[Finding]:
    by_device = {(c.get("machine"), c.get("device")): c for c in ceilings}
    records = []
    for row in flagged[flagged["above_roof"]].to_dict("records"):
        ceiling = by_device.get((row["machine"], row["device"])) or {}
        sheet = ceiling.get("datasheet") or {}
        gemm = ((ceiling.get("measured") or {}).get("gemm") or {}).get(row["precision"]) or {}
        memory = row.get("bound") == "memory" and row["above_value"] != row["peak_flop_s"]
        about = {k: row[k] for k in GROUP_KEYS} | {"roof": row["roof_name"]}
        about["against"] = "bandwidth" if memory else "compute"
        about["level"] = LEVEL_LABELS.get(row["limit"], row["limit"])
        about["clock_source"] = sheet.get("clock_source")
        numbers = {k: row[k] for k in ("performance_flop_s", "above_fraction", "above_value")}
        numbers.update(gemm_size=gemm.get("best_size"), clock_hz=sheet.get("clock_hz"))
        records.append(Finding("above_roof", about, numbers))
    return records


def remedy_evidence(profile: Mapping, summary: pd.DataFrame | None) -> tuple[dict, dict]:
    """(about, numbers) of the same configuration going faster at a larger batch or compiled."""
    ok = ok_configs(summary)
    base = match_config(ok, profile)
    if base is None:
        return {}, {}
    same = [[k for k in GROUP_KEYS if k != free] for free in ("batch_size", "variant")]
    larger, compiled = (ok[(ok[k] == pd.Series(profile)[k]).all(axis=1)] for k in same)
    compile_s = pd.to_numeric(compiled.get("compile_time_s", pd.Series()), errors="coerce")
    candidates = {
        "larger": larger[larger["batch_size"].astype(int) > int(profile["batch_size"])],
        "compiled": compiled[(compile_s > 0) & (compiled["variant"] != profile["variant"])],
    }
    about, numbers = {}, {}
    for name, frame in candidates.items():
        if not frame.empty and frame[MEAN].max() > base[MEAN]:
            best = frame.loc[frame[MEAN].idxmax()]
            about[name] = {k: best[k] for k in GROUP_KEYS}
            numbers.update({f"{name}_img_s": best[MEAN], f"{name}_ratio": best[MEAN] / base[MEAN]})
    return about, numbers


BUSY_NUMBERS = (
    *("kernel_time_s", "profiled_sm_clock_hz", "run_sm_clock_hz", "kernel_time_at_run_clock_s"),
    *("step_time_s", "busy_share", "busy_share_at_profiled_clock"),
)


def busy_record(profile: Mapping, summary: pd.DataFrame | None = None) -> Finding:
    """What the GPU's busy share says of a profiles.csv row, with a host-bound step's remedies."""
    unread = missing(profile.get("busy_share_at_profiled_clock"))
    verdict = "unknown" if unread else str(profile.get("busy_verdict"))
    about = {**{k: profile[k] for k in GROUP_KEYS}, "verdict": verdict}
    numbers = {k: profile.get(k) for k in BUSY_NUMBERS}
    if verdict == "host-bound":
        evidence, counted = remedy_evidence(profile, summary)
        about.update(evidence)
        numbers.update(counted)
    return Finding("gpu_busy", about, numbers)


def roofline_bound_text(bound, fraction_of_roof, limit) -> str:
    if missing(bound):
        return "n/a (no bandwidth roof)"
    if fraction_of_roof > ROOF_TOLERANCE:
        return "void (point above the roof)"
    return "compute" if bound == "compute" else f"memory ({LEVEL_LABELS.get(limit, limit)})"


def above_roof_text(row: Mapping) -> str:
    if not truthy(row.get("above_roof")):
        return ""
    of = "peak" if row.get("above_value") == row.get("peak_flop_s") else "roof"
    return f"yes, {fmt_pct(row.get('above_fraction'))} of {of}: roof under-measured"


READING_COLUMNS = {
    "Point": ("source", str),
    "Roofs": ("roof_name", str),
    "Bound": (("bound", "fraction_of_roof", "limit"), roofline_bound_text),
    "Intensity (FLOP/B)": ("arithmetic_intensity_flop_per_byte", fmt),
    "Ridge (FLOP/B)": ("ridge_flop_per_byte", fmt),
    "Achieved": ("performance_flop_s", si("FLOP/s")),
    "Attainable": ("attainable_flop_s", si("FLOP/s")),
    "Of roof": ("fraction_of_roof", fmt_pct),
    "Of peak": ("fraction_of_peak", fmt_pct),
    "Peak": ("peak_flop_s", si("FLOP/s")),
    "Above roof": (None, above_roof_text),
    "Levels with a roof": ("levels", str),
}


def _calibration_flops(ratio, ok) -> str:
    if missing(ratio):
        return "n/a"
    return fmt_times(ratio) + ("" if truthy(ok) else " FLAGGED")


def _calibration_gemm(fraction, roof_ok) -> str:
    if missing(fraction):
        return "unchecked (no calibration GEMM)"
    low, high = CALIBRATION_ROOF_RANGE
    verdict = "ok" if truthy(roof_ok) else f"FLAGGED (allowed {low:.0%}–{high:.0%})"
    return f"{fmt_pct(fraction)} of roof: {verdict}"


PROFILE_COLUMNS = {
    "Kernels": ("kernels", int),
    "Kernel time (ms) at profiled clock": ("kernel_time_s", MS),
    "Profiled SM clock (ncu)": ("profiled_sm_clock_hz", fmt_ghz),
    "Runs' SM clock": ("run_sm_clock_hz", fmt_ghz),
    "Kernel time (ms) at runs' clock": ("kernel_time_at_run_clock_s", MS),
    "Timed step (ms)": ("step_time_s", MS),
    "GPU busy": ("busy_share", fmt_pct),
    "GPU busy, upper": ("busy_share_at_profiled_clock", fmt_pct),
    "Step is": ("busy_verdict", str),
    "ncu / analytic FLOPs": ("ratio_ncu_to_analytic", fmt_times),
    "Calibration FLOPs": (("calibration_ratio", "calibration_ok"), _calibration_flops),
    "Calibration GEMM": (("calibration_roof_fraction", "roof_ok"), _calibration_gemm),
    "Compute roof": ("roof_basis", str),
}


def roofline_findings(verdicts: pd.DataFrame, profiled, summary, ceilings=()) -> list[Finding]:
    rows = profiled.to_dict("records") if profiled is not None else []
    flagged = above_roof_records(above_roof(verdicts, ceilings), ceilings)
    return flagged + [busy_record(row, summary) for row in rows]


def build(page: Page) -> Section:
    verdicts = roofline_verdicts(study_readings(page.tables))
    flagged = above_roof(verdicts, page.tables.ceilings)
    profiles = page.tables.profiles
    profiled = pd.DataFrame() if profiles is None else sort_configs(profiles)
    readings = page.drop(cells(flagged, READING_COLUMNS, key_columns(flagged)))
    checks = page.drop(cells(profiled, PROFILE_COLUMNS, key_columns(profiled)))
    return section(
        "roofline",
        "Roofline",
        intro=INTRO,
        findings=roofline_findings(verdicts, profiled, page.tables.summary, page.tables.ceilings),
        tables=(
            Table("Reading per configuration", readings),
            Table("Profiled configurations: GPU busy share, clocks and checks", checks),
        ),
        figures=page.figures_of("roofline"),
        sources=page.sources("roofline_points", "profiles", "ceilings", "kernels"),
    )
