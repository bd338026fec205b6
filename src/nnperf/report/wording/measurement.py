"""The Measurement, Environment and Notes sections in words: cost, CI targets and why one was
missed (the noise causes of `nnperf.report.noise` in summary.csv, one sentence each, then what
the target would take), the variance, the settings every run shared, and the Notes."""

from __future__ import annotations

from typing import Mapping

from nnperf.core.vocab import OVERLOAD_TOLERANCE_CORES, STEAL_LIMIT
from nnperf.core.wording import count_of, missing, stop_sentence
from nnperf.ncu.ranges import CALIBRATION_TOLERANCE
from nnperf.report.findings import Finding
from nnperf.report.format import config_text, fmt, fmt_duration, fmt_pct
from nnperf.report.noise import CAUSE_NUMBERS
from nnperf.report.wording.templates import CAUSE_LABELS, say
from nnperf.report.wording.findings import missed_target
from nnperf.roofline.points import CALIBRATION_ROOF_RANGE

# Each cause's sentence from its numbers (`numbers_of`); a clock cause without a clock range
# is worded by its throttled windows (`clock_throttled`).
CAUSES = {
    "shared_slowdown": "Shared slowdowns: its processes rose and fell with the "
    "{n[configurations]:count:other configuration} measured beside them over "
    "{n[rounds]:count:round} (r² {n[r2]:.2f}, {n[p]:p}; the group's slowest round {n[dip]:pct} "
    "under its median): the machine slowed under all of them; paired comparisons cancel this, "
    "its own CI cannot.",
    "drift": "Drift: throughput {way} {change} over the run (slope {n[per_minute]:signed}/min, "
    "{n[p]:p}).",
    "host_load": "Host load: other processes used up to {n[peak]:.1f} cores and throughput fell "
    "as they did (r² {n[r2]:.2f}, {n[p]:p}){slower}.",
    "steal": "Steal: the hypervisor took up to {n[peak]:pct} of the CPU time and throughput fell "
    "as it did (r² {n[r2]:.2f}, {n[p]:p}){slower}.",
    "clock": "Clock: the SM clock ranged {n[low_mhz]:.0f}–{n[high_mhz]:.0f} MHz{throttled} and "
    "throughput followed it (r² {n[r2]:.2f}, {n[p]:p}).",
    "clock_throttled": "Clock: {n[throttled]} windows were throttled and ran {n[slower]:pct} "
    "slower than the rest ({n[p]:p}).",
    "bimodal": "A process level split in two: {n[low_n]} processes at about {n[low_img_s]:.3g} "
    "img/s and {n[high_n]} at about {n[high_img_s]:.3g} ({n[gap]:pct} apart), as when cuDNN "
    "picks one of two algorithms.",
    "process_level": "Process level: the {n[n]} processes settle at "
    "{n[low_img_s]:.3g}–{n[high_img_s]:.3g} img/s, more apart than their windows explain "
    "(one-way ANOVA {n[p]:p}).",
    "window_noise": "No external cause found: windows of one process vary with a CV of "
    "{n[cv]:pct}, with no drift, load, steal or clock change behind it.",
    None: "No windows were recorded to read the noise from.",
}
# The windows slowed beside load or steal, where the cause counts them.
SLOWED = {
    "host_load": f"beside more than {OVERLOAD_TOLERANCE_CORES} of a core",
    "steal": f"with more than {fmt_pct(STEAL_LIMIT)} steal",
}
# The numbers a cause's sentence may go without: the windows slowed beside load or steal, and
# the clock's two forms (a range with r², or throttled windows). Lacking any other (a summary.csv
# from before causes carried their numbers), a cause is named alone.
OPTIONAL_NUMBERS = {"slower", "windows", "throttled", "low_mhz", "high_mhz", "r2"}
# What a machine whose spread put the CI target out of reach allows: its absolute intervals,
# then its paired comparisons, which cancel what interleaved processes share.
ALLOWED = (
    ". What this machine allows: absolute throughput to \u00b1{n[half_width]:pct} (their median "
    "95% CI half-width; widest \u00b1{n[half_width_max]:pct})"
)
PAIRED = {
    True: "; no paired comparison was made on it.",
    False: ", the paired comparisons to \u00b1{n[paired_half_width]:pct} (median of {n[paired]}), "
    "which cancel what interleaved processes share: compare configurations by those.",
}
# The kinds worded by template, the Notes' first (`findings.NOTE_KINDS`).
WORDING = {
    "oom": ("Out of memory: {a:where}", {"error": ": {a[error]}"}, "."),
    "host_busy": (
        "Host busy: {a:where} was not measured",
        {
            "discarded_windows": ": {n[discarded_windows]:count:window} ran beside other load "
            "and {n[discarded_windows]:pick:was|were} left out, {n[n_windows]:count:clean "
            "window} remained"
        },
        "; it has no point on a figure, no roofline point and no speedup. Run it again on a "
        "quieter machine.",
    ),
    "unstable": "Unstable: {a:where} — {a:unstable}; its throughput is marked unstable wherever "
    "it is quoted, and comparisons with it need care.",
    "high_variance": (
        "High variance: {a:where} — throughput CV {a[throughput_img_s_cv]:pct} across "
        "{a[n_windows]:count:window} of {a[n_processes]:count:process} (threshold "
        "{n[threshold]:pct})",
        {"noise_cause": ", likely cause: {a[noise_cause]:cause} (see Measurement)"},
        "; treat its numbers and speedups with care.",
    ),
    "roof_too_low": "Roof too low: {n[points]} {a[precision]} step "
    "point{n[points]:pick: lies|s lie} above the {a[roof]} roofs on {a[machine]} (worst: "
    "{a[worst]:config} at {a[worst][performance_flop_s]:si:FLOP/s}, "
    "{a[worst][fraction_of_roof]:x} the {a[worst][attainable_flop_s]:si:FLOP/s} roof); check the "
    "{a[roof]} {a[precision]} ceiling of {a[device]}.",
    "profile_unchecked": "Profile unchecked: {a:where} — its export holds no calibration GEMM, "
    "so neither its FLOP counters nor its roof could be checked; profile again with `nnperf step`.",
    "flop_counters_off": "FLOP counters off: {a:where} — the calibration GEMM counted "
    "{a[calibration_ratio]:x} its known FLOPs (allowed: within "
    + fmt_pct(CALIBRATION_TOLERANCE)
    + "); the profile's FLOPs and every point made from them are suspect.",
    "profile_roof_flagged": "Profile roof flagged: {a:where} — its calibration GEMM reached "
    "{a[calibration_roof_fraction]:pct} of the profile's {a[precision]} compute roof "
    "({a[calibration_roof_flop_s]:si:FLOP/s} at {a[calibration_clock_hz]:ghz}; allowed "
    + "–".join(map(fmt_pct, CALIBRATION_ROOF_RANGE))
    + "), so that roof ({a[roof_basis]}) is wrong for this GPU and no bound is read from it; "
    "the measured and datasheet roofs still apply.",
    "no_timed_runs": "No timed runs: results/tables/summary.csv was not part of this report, so "
    "there are no throughput, speedup or breakdown numbers.",
    "no_kernels": "No per-kernel table (kernels.csv) although CUDA runs were timed: Nsight "
    "Compute (ncu) was not part of this run, so CUDA rooflines are analytic.",
    "no_roofline_points": "No roofline points (roofline_points.csv) were part of this report.",
    "no_ceilings": "No ceilings JSON: there are no measured or datasheet roofs to read the "
    "roofline points against.",
    # The Measurement and Environment sections'.
    "study_span": "The study spans {n[span_s]:dur}, from its first recorded job start "
    "({n[first_start]:utc}) to this report ({n[rendered_at]:utc}); its {n[jobs]} recorded "
    "job{n[jobs]:pick: was|s were} busy for {n[busy_s]:dur} (the union of their intervals).",
    "study_span_unknown": "No job recorded when it ran (results from before jobs kept their start "
    "and end times), so the study's wall time is unknown; its timed windows took "
    "{n[timed_s]:dur}.",
    "duty_cycle": "The timed windows took {n[timed_s]:dur}: {n[timed_share_of_span]:pct} of the "
    "span and {n[timed_share_of_busy]:pct} of the busy time (the duty cycle); the rest went to "
    "starting processes, warm-up, compilation, the stages that time nothing (ceilings, "
    "complexity, profiles) and the gaps between jobs.",
    "fixed_cost": (
        "On {a[machine]}, a configuration's fixed cost — its job's start to the first warm-up "
        "step — is {n[fixed_s]:n:s} (median of {n[count]})",
        {
            "process_s": ", and a worker process needs {n[process_s]:n:s} from its start to its "
            "first step"
        },
        ".",
    ),
    "compile_cost": (
        "On {a[machine]}, compilation took {n[first_s]:n:s} in the first process (median of "
        "{n[count]} compiled configuration{n[count]:pick:|s})",
        {"later_s": " and {n[later_s]:n:s} in later processes, which reuse the first one's caches"},
        ".",
    ),
}


def numbers_of(row: Mapping, code: str) -> dict:
    """One cause's numbers from a summary row's `{cause}_{number}` columns (None: unknown)."""
    values = {n: row.get(f"{code}_{n}") for n in CAUSE_NUMBERS.get(code, ())}
    return {n: None if missing(v) else v for n, v in values.items()}


def cause_sentence(code: str, n: Mapping) -> str:
    slower, change = "", n.get("change")
    if code in SLOWED and n["slower"] is not None and n["windows"] is not None:
        slower = "; the {n[windows]:count:window} " + SLOWED[code] + " ran {n[slower]:pct} slower"
        slower = say(slower, n=n)
    if code == "clock" and n["low_mhz"] is None:
        code = "clock_throttled"
    return say(
        CAUSES.get(code, CAUSES[None]),
        n=n,
        slower=slower,
        way="fell" if change is not None and change < 0 else "rose",
        change=fmt_pct(abs(change)) if change is not None else "",
        throttled=f", {n['throttled']} windows throttled" if n.get("throttled") else "",
    )


def target_sentence(row: Mapping) -> str | None:
    target, needed = row.get("ci_target"), row.get("processes_needed")
    measured = row.get("n_processes")
    if missing(target):
        return None
    if missing(needed):
        unmeasured = f"with {count_of(measured, 'process')} the process spread is unmeasured"
        return f"The {fmt_pct(target)} target needs at least two processes: {unmeasured}."
    needed = int(needed)
    text = f"At the process spread (RSD {fmt_pct(row.get('process_rsd'))}) the "
    text += f"{fmt_pct(target)} target would take {needed} processes"
    if missing(measured) or needed <= int(measured):
        return text + ", no more than measured: the windows within them are the noise."
    more = needed - int(measured)
    text += f", {more} more than the {int(measured)} measured"
    cost = row.get("process_cost_s")
    if not missing(cost) and cost > 0:
        text += f" (about {fmt_duration(more * cost)} at {fmt_duration(cost)} per process)"
    return text + "."


def noise_text(row: Mapping) -> str:
    """Every cause a summary row names (`noise_causes`, ranked), then what the target would
    take; empty where the row names none."""
    if missing(row.get("noise_cause")):
        return ""
    sentences = []
    for code in filter(None, str(row.get("noise_causes") or row["noise_cause"]).split(";")):
        n = numbers_of(row, code)
        optional = OPTIONAL_NUMBERS if code == "clock" else OPTIONAL_NUMBERS - {"r2"}
        named_alone = any(v is None for name, v in n.items() if name not in optional)
        alone = f"{CAUSE_LABELS.get(code, code).capitalize()}."
        sentences.append(alone if named_alone else cause_sentence(code, n))
    return " ".join(s for s in [*sentences, target_sentence(row)] if s)


def over_budget(f: Finding, named=None) -> str:
    a, step = f.about, f.about.get("step_s")
    text = say("Over budget: {a:where} was not measured", f)
    if f.numbers:
        text += " — " + stop_sentence("over_budget", f.numbers, a.get("phase"))
    elif step is not None:
        least = "at least " if a["lower_bound"] else ""
        text += f" — one training step takes {least}{fmt(step, 's')}"
    return text + "; raise timing.max_seconds to measure it."


def ci_target_count(f: Finding, named=None) -> str:
    met, judged = f.numbers["met"], f.numbers["judged"]
    return say(
        "{n[met]} of {n[judged]} measured configuration{n[judged]:pick:|s} reached "
        "{n[judged]:pick:its|their} CI target (a 95% CI half-width of throughput within "
        "timing.target_ci of the estimate)" + ("; {missed} did not." if met < judged else "."),
        f,
        missed=judged - met,
    )


def ci_missed(f: Finding, named=None) -> str:
    """Which configuration missed its CI target, why measurement stopped first and the
    likely cause (`about["row"]`: its summary row, the stop and noise columns)."""
    row = f.about["row"]
    shape = f"{count_of(row['n_processes'], 'process')} and {count_of(row['n_windows'], 'window')}"
    name = f"{config_text(row)} on {row['machine']}"
    if missing(row["ci_half_width_rel"]):
        text = f"{name} missed its CI target: no CI could be made from {shape}"
    else:
        text = missed_target([{**row, "ci_target_met": False}], lambda c: name) + f" after {shape}"
    why = stop_sentence(row.get("stop_reason"), f.numbers) or "no stop reason was recorded"
    cause = noise_text(row)
    return f"{text}; {why}." + (f" Likely cause: {cause}" if cause else "")


def machine_allows(f: Finding, named=None) -> str:
    """Said once, in place of a missed target per configuration
    (`sections.measurement.MACHINE_MISS`)."""
    n, needed = f.numbers, f.numbers.get("processes_needed")
    text = "On {a[machine]}, worker processes differ by ~{n[between_rsd]:pct} (median relative "
    text += "standard deviation between processes), too much for a \u00b1{n[target]:pct} CI of "
    text += "absolute throughput in the time budget{needed}: {n[missed]} of {n[judged]} "
    text += "configurations missed that target for this reason"
    paired = PAIRED[missing(n.get("paired_half_width"))]
    text += "." if missing(n.get("half_width")) else ALLOWED + paired
    needed = "" if missing(needed) else f" (it would take ~{int(needed)} processes)"
    return say(text, f, needed=needed)


def dominant_level(f: Finding, named=None) -> str:
    by_process, by_window = f.numbers["by_process"], f.numbers["by_window"]
    if by_window == 0 or by_process == 0:
        level = "processes" if by_window == 0 else "windows of one process"
        counts = "the spread between " + level + " dominates in all {total} configurations"
    else:
        counts = "the spread between processes dominates in {n[by_process]} of {total} "
        counts += "configurations and the spread between windows of one process in {n[by_window]}"
    text = "On {a[machine]}, " + counts + " (median relative standard deviations: "
    text += "{n[between_rsd]:pct} between processes, {n[within_rsd]:pct} within one)"
    if by_process > by_window:
        text += "; where processes dominate, more processes narrow the CI, more windows per "
        text += "process do not (Kalibera & Jones)"
    return say(text + ".", f, total=by_process + by_window)


def shared_settings(f: Finding, named=None) -> str:
    listed = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in f.about.items())
    return f"Every variant and precision ran with {listed}; the table shows what differs."
