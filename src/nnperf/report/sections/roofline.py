"""The Roofline section: what binds each configuration's step (`nnperf.report.bounds`
reads the points against the roofs) and, for the configurations profiled under Nsight
Compute, how busy the GPU is over the timed step and whether the profile's checks hold."""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from nnperf.core.wording import missing
from nnperf.report.bounds import (
    LEVEL_LABELS,
    ROOF_TOLERANCE,
    roofline_verdicts,
    study_readings,
)
from nnperf.report.configurations import (
    GROUP_KEYS,
    MEAN,
    key_columns,
    match_config,
    ok_configs,
    sort_configs,
)
from nnperf.report.format import (
    MS,
    cells,
    config_text,
    fmt,
    fmt_ghz,
    fmt_pct,
    fmt_si,
    fmt_times,
    si,
    truthy,
)
from nnperf.report.outline import Page, Section, Table, section
from nnperf.roofline.peaks import peak_origin
from nnperf.roofline.points import CALIBRATION_ROOF_RANGE

INTRO = (
    "Each training step as a point (FLOPs per byte moved, FLOP/s achieved) against "
    "the roofs: the compute peak of its precision and the bandwidth of each memory "
    "level. The lowest roof above the point binds it; left of the ridge point it is "
    "memory-bound, right of it compute-bound. Profile roofs are Nsight Compute's "
    "own peaks at the profiled clock, measured roofs the ceilings stage's "
    "benchmarks, datasheet roofs the vendor's numbers; a CPU without a datasheet entry gets a "
    "peak derived from cores x clock x FLOP/cycle, labelled derived. A point above a roof "
    "is flagged: a step cannot beat its roof, so that roof is under-measured. Analytic "
    "points (CPU, MPS) count FLOPs from the "
    "model and bytes as algorithmic no-reuse traffic, which overstates bytes: they sit "
    "left of where the hardware really is."
)


def roof_names(verdicts: pd.DataFrame, ceilings) -> list[str]:
    """Each verdict's roof origin as a reader should read it: `derived` where the ceilings
    JSON's datasheet entry is a CPU's derived peak (`peak_origin`), never `datasheet`."""
    derived = {
        (c.get("machine"), c.get("device"))
        for c in ceilings
        if peak_origin(c.get("datasheet")) == "derived"
    }
    return [
        (
            "derived"
            if r["roof"] == "datasheet" and (r["machine"], r["device"]) in derived
            else r["roof"]
        )
        for r in verdicts.to_dict("records")
    ]


def above_roof(verdicts: pd.DataFrame, ceilings=()) -> pd.DataFrame:
    """The verdicts with `roof_name` (`roof_names`), `above_roof` (the step reached more
    than 100% of the roof above it or of its compute peak), `above_fraction` (how far: 1.09
    is 109%) and `above_value` (the FLOP/s of the roof it beat)."""
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


def _measured_gemm_size(ceiling: Mapping | None, precision: str):
    """The GEMM size the ceilings stage's best measured roof of `precision` came from."""
    gemm = (((ceiling or {}).get("measured") or {}).get("gemm") or {}).get(precision) or {}
    return gemm.get("best_size")


def _why_under(row: Mapping, memory: bool, ceiling: Mapping | None) -> str:
    """Why a roof a step point beat is under-measured, by where the roof came from."""
    name = row["roof_name"]
    if memory:
        return (
            "caches serve part of the traffic the point's bytes count (analytic bytes assume "
            "no reuse), or the bandwidth benchmark under-measured the memory"
        )
    if name == "measured":
        size = _measured_gemm_size(ceiling, row["precision"])
        gemm = f"a {size}³ GEMM" if size else "the ceilings stage's GEMM"
        return f"{gemm} does not reach this {str(row['device']).upper()}'s peak"
    if name == "derived":
        sheet = (ceiling or {}).get("datasheet") or {}
        clock = sheet.get("clock_hz")
        used = f" ({fmt_ghz(clock)}, {sheet.get('clock_source')})" if clock else ""
        return (
            f"a derived peak is cores x clock x FLOP/cycle, and the clock it used{used} is "
            "below what the cores ran at"
        )
    if name == "datasheet":
        return "the config/peaks.yaml entry does not fit this device, or the FLOPs are overcounted"
    return "the profile's peak_sustained x clock is too low, or the FLOPs are overcounted"


def above_roof_sentence(row: Mapping, ceilings=()) -> str:
    """`... reached 181 GFLOP/s, 110% of the 165 GFLOP/s measured fp32 GEMM roof: the roof
    is under-measured (why)`, for a row of `above_roof` that is above its roof."""
    memory = row.get("bound") == "memory" and row["above_value"] != row["peak_flop_s"]
    if memory:
        level = LEVEL_LABELS.get(row["limit"], row["limit"])
        what = f"{row['roof_name']} {level} bandwidth roof at its intensity"
    else:
        kind = "GEMM roof" if row["roof_name"] == "measured" else "peak"
        what = f"{row['roof_name']} {row['precision']} {kind}"
    key = (row["machine"], row["device"])
    ceiling = next((c for c in ceilings if (c.get("machine"), c.get("device")) == key), None)
    return (
        f"{config_text(row)} on {row['machine']} reached "
        f"{fmt_si(row['performance_flop_s'], 'FLOP/s')}, {fmt_pct(row['above_fraction'])} of "
        f"the {fmt_si(row['above_value'], 'FLOP/s')} {what}: the roof is under-measured "
        f"({_why_under(row, memory, ceiling)})."
    )


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
    base = match_config(ok, profile) if not ok.empty else None
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


def roofline_bound_text(bound, fraction_of_roof, limit) -> str:
    """The Bound cell: compute, memory (level), or why no bound is read."""
    if bound is None or missing(bound):
        return "n/a (no bandwidth roof)"
    if fraction_of_roof > ROOF_TOLERANCE:
        return "void (point above the roof)"
    if bound == "compute":
        return "compute"
    return f"memory ({LEVEL_LABELS.get(limit, limit)})"


def above_roof_text(above, above_value, peak_flop_s, above_fraction) -> str:
    """The Above roof cell: `yes, 109% of peak` for a point above its roof, else empty."""
    if not truthy(above):
        return ""
    of = "peak" if above_value == peak_flop_s else "roof"
    return f"yes, {fmt_pct(above_fraction)} of {of}: roof under-measured"


# The reading per configuration, point source and roof origin (a derived peak named
# `derived`, a point above its roof flagged: `above_roof`).
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
    "Above roof": (
        ("above_roof", "above_value", "peak_flop_s", "above_fraction"),
        above_roof_text,
    ),
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


# One row per profiled configuration: the GPU's busy share of the timed step with both
# clocks beside it, and the checks the calibration GEMM made of the profile.
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


def profiled_configs(profiles: pd.DataFrame | None) -> pd.DataFrame | None:
    """profiles.csv in the report's order (None: no profile)."""
    return sort_configs(profiles) if profiles is not None else None


def roofline_findings(verdicts: pd.DataFrame, profiled, summary, ceilings=()) -> list[str]:
    """Every point above one of its roofs (no such point goes unremarked), then what each
    profile's busy share says; each configuration's bound is the reading table's."""
    flagged = above_roof(verdicts, ceilings)
    findings = [
        above_roof_sentence(row, ceilings)
        for row in flagged[flagged["above_roof"]].to_dict("records")
    ]
    return findings + [
        busy_sentence(row, summary)
        for row in (profiled.to_dict("records") if profiled is not None else [])
    ]


def build(page: Page) -> Section:
    readings = study_readings(page.tables)
    verdicts = roofline_verdicts(readings)
    flagged = above_roof(verdicts, page.tables.ceilings)
    profiled = profiled_configs(page.tables.profiles)
    if profiled is None:
        profiled = pd.DataFrame()
    return section(
        "roofline",
        "Roofline",
        intro=INTRO,
        findings=roofline_findings(verdicts, profiled, page.tables.summary, page.tables.ceilings),
        tables=(
            Table(
                "Reading per configuration",
                page.drop(cells(flagged, READING_COLUMNS, key_columns(flagged))),
            ),
            Table(
                "Profiled configurations: GPU busy share, clocks and checks",
                page.drop(cells(profiled, PROFILE_COLUMNS, key_columns(profiled))),
            ),
        ),
        figures=page.figures_of("roofline"),
        sources=page.sources("roofline_points", "profiles", "ceilings", "kernels"),
    )
