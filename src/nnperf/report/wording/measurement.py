"""The Measurement and Environment sections' findings in words: what the study cost, what a
machine whose processes differ too much for the CI target allows, which configurations reached
their CI target (and why one missed it), what dominates the variance, the fixed costs, and the
settings every run shared."""

from __future__ import annotations

from nnperf.core.wording import count_of, missing, stop_sentence
from nnperf.report.findings import Finding
from nnperf.report.format import config_text, fmt, fmt_duration, fmt_pct, fmt_utc
from nnperf.report.wording.findings import missed_target
from nnperf.report.wording.noise import noise_text


def study_span(f: Finding, named=None) -> str:
    n = f.numbers
    jobs = f"{n['jobs']} recorded job{'s were' if n['jobs'] != 1 else ' was'}"
    return (
        f"The study spans {fmt_duration(n['span_s'])}, from its first recorded job start "
        f"({fmt_utc(n['first_start'])}) to this report ({fmt_utc(n['rendered_at'])}); its "
        f"{jobs} busy for {fmt_duration(n['busy_s'])} (the union of their intervals)."
    )


def study_span_unknown(f: Finding, named=None) -> str:
    return (
        "No job recorded when it ran (results from before jobs kept their start and end "
        f"times), so the study's wall time is unknown; its timed windows took "
        f"{fmt_duration(f.numbers['timed_s'])}."
    )


def duty_cycle(f: Finding, named=None) -> str:
    n = f.numbers
    return (
        f"The timed windows took {fmt_duration(n['timed_s'])}: "
        f"{fmt_pct(n['timed_share_of_span'])} of the span and "
        f"{fmt_pct(n['timed_share_of_busy'])} of the busy time (the duty cycle); the rest "
        "went to starting processes, warm-up, compilation, the stages that time nothing "
        "(ceilings, complexity, profiles) and the gaps between jobs."
    )


def ci_target_count(f: Finding, named=None) -> str:
    met, judged = f.numbers["met"], f.numbers["judged"]
    text = (
        f"{met} of {judged} measured configuration{'s' if judged != 1 else ''} reached "
        f"{'their' if judged != 1 else 'its'} CI target (a 95% CI half-width of throughput "
        "within timing.target_ci of the estimate)"
    )
    return text + (f"; {judged - met} did not." if met < judged else ".")


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
    """What a machine whose processes differ too much for the CI target allows: said once,
    in place of a missed target per configuration (`sections.measurement.machine_miss`)."""
    n = f.numbers
    needed = n.get("processes_needed")
    needed = "" if missing(needed) else f" (it would take ~{int(needed)} processes)"
    text = (
        f"On {f.about['machine']}, worker processes differ by ~{fmt_pct(n['between_rsd'])} "
        f"(median relative standard deviation between processes), too much for a "
        f"\u00b1{fmt_pct(n['target'])} CI of absolute throughput in the time budget{needed}: "
        f"{n['missed']} of {n['judged']} configurations missed that target for this reason"
    )
    if missing(n.get("half_width")):
        return text + "."
    text += (
        f". What this machine allows: absolute throughput to \u00b1{fmt_pct(n['half_width'])} "
        f"(their median 95% CI half-width; widest \u00b1{fmt_pct(n['half_width_max'])})"
    )
    if missing(n.get("paired_half_width")):
        return text + "; no paired comparison was made on it."
    return text + (
        f", the paired comparisons to \u00b1{fmt_pct(n['paired_half_width'])} (median of "
        f"{n['paired']}), which cancel what interleaved processes share: compare configurations "
        "by those."
    )


def dominant_level(f: Finding, named=None) -> str:
    n = f.numbers
    by_process, by_window, total = n["by_process"], n["by_window"], n["by_process"] + n["by_window"]
    if by_window == 0 or by_process == 0:
        level = "processes" if by_window == 0 else "windows of one process"
        counts = f"the spread between {level} dominates in all {total} configurations"
    else:
        counts = (
            f"the spread between processes dominates in {by_process} of {total} "
            f"configurations and the spread between windows of one process in {by_window}"
        )
    text = (
        f"On {f.about['machine']}, {counts} (median relative standard deviations: "
        f"{fmt_pct(n['between_rsd'])} between processes, {fmt_pct(n['within_rsd'])} within one)"
    )
    if by_process > by_window:
        text += (
            "; where processes dominate, more processes narrow the CI, more windows per "
            "process do not (Kalibera & Jones)"
        )
    return text + "."


def fixed_cost(f: Finding, named=None) -> str:
    n = f.numbers
    text = (
        f"On {f.about['machine']}, a configuration's fixed cost — its job's start to the first "
        f"warm-up step — is {fmt(n['fixed_s'], 's')} (median of {n['count']})"
    )
    if not missing(n.get("process_s")):
        text += (
            f", and a worker process needs {fmt(n['process_s'], 's')} from its start to its "
            "first step"
        )
    return text + "."


def compile_cost(f: Finding, named=None) -> str:
    n = f.numbers
    text = (
        f"On {f.about['machine']}, compilation took {fmt(n['first_s'], 's')} in the first "
        f"process (median of {n['count']} compiled configuration{'s' if n['count'] != 1 else ''})"
    )
    if not missing(n.get("later_s")):
        text += (
            f" and {fmt(n['later_s'], 's')} in later processes, which reuse the first one's caches"
        )
    return text + "."


def shared_settings(f: Finding, named=None) -> str:
    """`Every variant and precision ran with tf32 False, data path dataloader, ...`."""
    listed = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in f.about.items())
    return f"Every variant and precision ran with {listed}; the table shows what differs."


WORDING = {
    f.__name__: f
    for f in (
        study_span,
        study_span_unknown,
        duty_cycle,
        machine_allows,
        ci_target_count,
        ci_missed,
        dominant_level,
        fixed_cost,
        compile_cost,
        shared_settings,
    )
}
