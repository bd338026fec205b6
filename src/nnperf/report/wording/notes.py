"""The Notes in words: what was skipped, what was flagged and what the report lacks."""

from __future__ import annotations

from nnperf.core.wording import count_of, stop_sentence, unstable_text
from nnperf.ncu.ranges import CALIBRATION_TOLERANCE
from nnperf.report.findings import Finding
from nnperf.report.format import config_text, fmt, fmt_ghz, fmt_pct, fmt_si, fmt_times
from nnperf.report.wording.noise import CAUSE_LABELS
from nnperf.roofline.points import CALIBRATION_ROOF_RANGE


def _where(row) -> str:
    return f"{config_text(row)} on {row['machine']}"


def oom(f: Finding, named=None) -> str:
    error = f.about.get("error")
    return f"Out of memory: {_where(f.about)}" + (f": {error}." if error else ".")


def over_budget(f: Finding, named=None) -> str:
    a, step = f.about, f.about.get("step_s")
    text = f"Over budget: {_where(a)} was not measured"
    if f.numbers:
        text += " — " + stop_sentence("over_budget", f.numbers, a.get("phase"))
    elif step is not None:
        text += (
            f" — one training step takes {'at least ' if a['lower_bound'] else ''}{fmt(step, 's')}"
        )
    return text + "; raise timing.max_seconds to measure it."


def host_busy(f: Finding, named=None) -> str:
    n = f.numbers
    counted = ""
    if n.get("discarded_windows") is not None and n.get("n_windows") is not None:
        counted = (
            f": {count_of(int(n['discarded_windows']), 'window')} ran beside other load and "
            f"{'was' if int(n['discarded_windows']) == 1 else 'were'} left out, "
            f"{count_of(int(n['n_windows']), 'clean window')} remained"
        )
    return (
        f"Host busy: {_where(f.about)} was not measured{counted}; it has no point on a "
        "figure, no roofline point and no speedup. Run it again on a quieter machine."
    )


def unstable(f: Finding, named=None) -> str:
    return (
        f"Unstable: {_where(f.about)} — {unstable_text(f.about) or 'no reason recorded'}; its "
        "throughput is marked unstable wherever it is quoted, and comparisons with it need care."
    )


def high_variance(f: Finding, named=None) -> str:
    a, cause = f.about, CAUSE_LABELS.get(f.about.get("noise_cause"))
    return (
        f"High variance: {_where(a)} — throughput CV {fmt_pct(a['throughput_img_s_cv'])} "
        f"across {count_of(a.get('n_windows'), 'window')} of "
        f"{count_of(a.get('n_processes'), 'process')} (threshold {fmt_pct(f.numbers['threshold'])})"
        + (f", likely cause: {cause} (see Measurement)" if cause else "")
        + "; treat its numbers and speedups with care."
    )


def roof_too_low(f: Finding, named=None) -> str:
    a, n, worst = f.about, f.numbers, f.about["worst"]
    points = f"{n['points']} {a['precision']} step point{'s lie' if n['points'] != 1 else ' lies'}"
    return (
        f"Roof too low: {points} above the {a['roof']} roofs on {a['machine']} (worst: "
        f"{config_text(worst)} at {fmt_si(worst['performance_flop_s'], 'FLOP/s')}, "
        f"{fmt_times(worst['fraction_of_roof'])} the "
        f"{fmt_si(worst['attainable_flop_s'], 'FLOP/s')} roof); check the {a['roof']} "
        f"{a['precision']} ceiling of {a['device']}."
    )


def profile_unchecked(f: Finding, named=None) -> str:
    return (
        f"Profile unchecked: {_where(f.about)} — its export holds no calibration GEMM, so "
        "neither its FLOP counters nor its roof could be checked; profile again with `nnperf step`."
    )


def flop_counters_off(f: Finding, named=None) -> str:
    return (
        f"FLOP counters off: {_where(f.about)} — the calibration GEMM counted "
        f"{fmt_times(f.about['calibration_ratio'])} its known FLOPs (allowed: within "
        f"{fmt_pct(CALIBRATION_TOLERANCE)}); the profile's FLOPs and every point made from "
        "them are suspect."
    )


def profile_roof_flagged(f: Finding, named=None) -> str:
    a, (low, high) = f.about, CALIBRATION_ROOF_RANGE
    return (
        f"Profile roof flagged: {_where(a)} — its calibration GEMM reached "
        f"{fmt_pct(a['calibration_roof_fraction'])} of the profile's {a['precision']} compute "
        f"roof ({fmt_si(a['calibration_roof_flop_s'], 'FLOP/s')} at "
        f"{fmt_ghz(a['calibration_clock_hz'])}; allowed {fmt_pct(low)}–{fmt_pct(high)}), so that "
        f"roof ({a['roof_basis']}) is wrong for this GPU and no bound is read from it; the "
        "measured and datasheet roofs still apply."
    )


LACKING = {
    "no_timed_runs": "No timed runs: results/tables/summary.csv was not part of this report, "
    "so there are no throughput, speedup or breakdown numbers.",
    "no_kernels": "No per-kernel table (kernels.csv) although CUDA runs were timed: Nsight "
    "Compute (ncu) was not part of this run, so CUDA rooflines are analytic.",
    "no_roofline_points": "No roofline points (roofline_points.csv) were part of this report.",
    "no_ceilings": "No ceilings JSON: there are no measured or datasheet roofs to read the "
    "roofline points against.",
}

WORDING = {
    **{kind: (lambda f, named=None: LACKING[f.kind]) for kind in LACKING},
    **{
        f.__name__: f
        for f in (
            oom,
            over_budget,
            host_busy,
            unstable,
            high_variance,
            roof_too_low,
            profile_unchecked,
            flop_counters_off,
            profile_roof_flagged,
        )
    },
}
