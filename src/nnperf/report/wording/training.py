"""A training step and run in words: whether data loading limits the measured
configurations (Input pipeline), the largest phase and the steps waiting on input (Time
breakdown), and the runs faster per image yet later at the target (Time to accuracy)."""

from __future__ import annotations

from typing import Mapping

from nnperf.core.wording import missing
from nnperf.report import comparisons
from nnperf.report.format import estimate_text
from nnperf.report.findings import Finding
from nnperf.report.format import config_text, fmt, fmt_pct, fmt_times, int_cell, throughput_text

PHASE_LABELS = {
    "data_wait": "data wait",
    "h2d": "host-to-device",
    "forward": "forward",
    "backward": "backward",
    "optimizer": "optimizer",
}


def loader_text(row: Mapping) -> str:
    """`12,300 img/s (95% CI 11,900–12,700)`, or `not measured`."""
    if missing(row.get("loader_rate_img_s")):
        return "not measured"
    return throughput_text(
        row.get("loader_rate_img_s"),
        row.get("loader_rate_img_s_ci95_low"),
        row.get("loader_rate_img_s_ci95_high"),
        n_windows=row.get("loader_n_windows"),
        n_processes=row.get("loader_n_processes"),
        method=row.get("loader_ci_method"),
    )


def input_verdicts(f: Finding) -> str:
    """One sentence: the input-bound configurations once each with both rates and the data
    wait, then the margin of the others and how many are undetermined."""
    a, n = f.about, f.numbers
    total, bound, free, unknown = (int(n[k]) for k in ("total", "bound", "free", "unknown"))

    def where(row: Mapping) -> str:
        return config_text(row) + (f" on {row['machine']}" if n["machines"] > 1 else "")

    named = [
        f"{where(r)} (loader alone {loader_text(r)} against {estimate_text(r)} training; data "
        f"wait {fmt_pct(r.get('data_wait_share'))} of the step)"
        for r in a["named"]
    ]
    if bound > len(a["named"]):
        named.append(f"{bound - len(a['named'])} more (see Input pipeline)")
    parts = []
    if bound:
        parts.append(
            f"Data loading limits {bound} of {total} measured configurations: "
            + comparisons.names(named, str)
        )
    margin = (
        f"the loader alone delivers at least {fmt_times(n['headroom'])} the training rate and "
        f"the step waits for data at most {fmt_pct(n['wait'])} of its time"
    )
    if free and bound:
        parts.append(f"it does not limit the other {free} ({margin})")
    elif free == total:
        parts.append(f"Data loading limits none of the {total} measured configurations: {margin}")
    elif free:
        parts.append(
            f"Data loading does not limit {free} of {total} measured configurations ({margin})"
        )
    why = {
        "no_rate": "no loader rate was measured",
        "unsettled": "the loader's interval does not settle it",
    }.get(a.get("why"))
    if unknown and parts:
        parts.append(f"for {unknown} it is undetermined ({why})")
    elif unknown:
        parts.append(
            f"Whether data loading limits the {total} measured configurations is "
            f"undetermined: {why}"
        )
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


def largest_phase(f: Finding) -> str:
    a, n = f.about, f.numbers
    return (
        f"On {a['machine']}, {PHASE_LABELS[a['phase']]} is the largest phase in {n['count']} of "
        f"{n['total']} configurations (e.g. {fmt_pct(n['share'])} of the step for "
        f"{config_text(a)})."
    )


def waits_on_input(f: Finding) -> str:
    n = f.numbers
    return (
        f"{config_text(f.about)} on {f.about['machine']} waits on input for "
        f"{fmt_pct(n['input_share'])} of each step (data wait {fmt_pct(n['data_wait_share'])}, "
        f"host-to-device {fmt_pct(n['h2d_share'])})."
    )


def more_waiting(f: Finding) -> str:
    return (
        f"… and {f.numbers['count']} more input-bound configurations on {f.about['machine']} "
        "(see the table)."
    )


def _epochs(value) -> str:
    n = 0 if missing(value) else int(value)
    return f"{n} epoch" + ("" if n == 1 else "s")


def faster_but_later(f: Finding) -> str:
    """`X trains 1.5x as many images per second as Y (...) but reaches 90% later` (or not
    at all); `about['ci']` the timed runs' ratio, None where it has no interval."""
    a, n = f.about, f.numbers
    run, first = a["run"], a["first"]
    interval = {
        "one_run": "one training run each: no interval",
        "no_runs": "no interval: the timed runs' processes are not at hand",
    }.get(a["interval"]) or f"95% CI of the ratio {comparisons.interval_cell(a['ci'])}"
    text = (
        f"{config_text(run)} trains {fmt_times(n['rate'] / n['first_rate'])} as many images per "
        f"second as {config_text(first)} ({fmt(n['rate'], 'img/s')} vs "
        f"{fmt(n['first_rate'], 'img/s')}; {interval}) but "
    )
    target = fmt_pct(n["target"])
    where = f"recipe {a['recipe']} on {a['device']}"
    if n["time_s"] is not None:
        return text + (
            f"reaches {target} test top-1 later: after {fmt(n['time_s'], 's')} of training "
            f"(epoch {int_cell(n['epochs'])}) against {fmt(n['first_time_s'], 's')} (epoch "
            f"{int_cell(n['first_epochs'])}), {where}."
        )
    return text + (
        f"does not reach {target} test top-1 in {_epochs(n['epochs_run'])} (best "
        f"{fmt_pct(n['best'])}), while {config_text(first)} reaches it in "
        f"{fmt(n['first_time_s'], 's')} of training, {where}."
    )


def sentence(f: Finding) -> str:
    """`f` in words: each kind is worded by the function of its name."""
    return globals()[f.kind](f)
