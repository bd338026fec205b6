"""The key findings in words: one function per finding kind (`nnperf.report.findings.KEY_KINDS`),
record in, sentence out. A finding that follows its machine's and model's first finding names
only what differs from the configuration that one named (`differing`), so a configuration is
named once per list. "Missed its CI target" is worded here only (`missed_target`).
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from nnperf.core.wording import missing
from nnperf.report import comparisons
from nnperf.report.format import estimate_text
from nnperf.report.findings import Finding
from nnperf.report.format import config_text, fmt, fmt_duration, fmt_pct, fmt_si, truthy
from nnperf.report.sections.breakdown import PHASE_LABELS


def differing(config: Mapping, named: Mapping | None) -> str:
    """`config` named by the keys in which it differs from `named` (all of them without;
    empty where it is `named`)."""
    if named is None or str(config.get("model")) != str(named.get("model")):
        return config_text(config)
    keys = [k for k in ("precision", "batch_size", "variant") if k in config]
    parts = [
        f"batch {int(config[k])}" if k == "batch_size" else str(config[k])
        for k in keys
        if str(config.get(k)) != str(named.get(k))
    ]
    return " ".join(parts)


def missed(config: Mapping) -> bool:
    met = config.get("ci_target_met")
    return not missing(met) and not truthy(met)


def missed_target(configs: Sequence[Mapping], name: Callable[[Mapping], str] = config_text) -> str:
    """`X (±6.7% against ±6.0%) missed its CI target`, the configurations whose interval is
    wider than their target; empty where none did."""
    late = [c for c in configs if missed(c)]
    if not late:
        return ""

    def width(c: Mapping) -> str:
        half, target = c.get("ci_half_width_rel"), c.get("ci_target")
        if missing(half) or missing(target):
            return "no CI"
        return f"\u00b1{fmt_pct(half)} against \u00b1{fmt_pct(target)}"

    its = "its" if len(late) == 1 else "their"
    return f"{comparisons.names(late, lambda c: f'{name(c)} ({width(c)})')} missed {its} CI target"


def _with_missed(text: str, configs: Sequence[Mapping], name) -> str:
    note = missed_target(configs, name)
    return text + (f"; {note}" if note else "") + "."


def fastest(f: Finding, named: Mapping | None = None) -> str:
    a = f.about
    top, machine = a["order"][0], a["machine"]
    if f.kind == "only_configuration":
        text = f"Only configuration measured on {machine}: {config_text(top)}, {estimate_text(top)}"
        return _with_missed(text, [top], config_text)
    short = lambda c: differing(c, top)  # noqa: E731 - the runner-up named against the top
    if f.kind == "fastest":
        second = a["order"][1]
        text = (
            f"Fastest configuration on {machine}: {config_text(top)}, {estimate_text(top)}; "
            f"{comparisons.ratio_text(a['ci'])} than the runner-up, {short(second)}"
        )
        return _with_missed(text, [top, second], short)
    tied = [f"{config_text(c)} at {estimate_text(c)}" for c in a["tied"]]
    text = (
        f"No single fastest configuration on {machine}: {comparisons.names(tied, str)} are "
        f"{comparisons.ratio_text(a['ci'])}"
    )
    return _with_missed(text, a["tied"], config_text)


def best_setting(f: Finding, named: Mapping | None = None) -> str:
    a = f.about
    column, point = a["column"], a["point"]
    where = config_text(point, **{column: False})
    if named is None:
        where = f"for {where} on {point['machine']}"
    else:
        # The list's first finding named the model and the machine.
        where = where[len(str(point["model"])) :].strip()
        where = where if where.startswith("at ") else f"for {where}"
    if f.kind == "best_setting":
        top, second = a["order"][0], a["order"][1]
        text = (
            f"Best {column} {where}: {top[column]}, {comparisons.ratio_text(a['ci'])} than "
            f"{second[column]} ({estimate_text(top)} vs {estimate_text(second)})"
        )
        return _with_missed(text, [top, second], lambda c: str(c[column]))
    tied = [f"{c[column]} at {estimate_text(c)}" for c in a["tied"]]
    text = (
        f"No single best {column} {where}: {comparisons.names(tied, str)} are "
        f"{comparisons.ratio_text(a['ci'])}"
    )
    return _with_missed(text, a["tied"], lambda c: str(c[column]))


def limit(f: Finding, named: Mapping | None = None) -> str:
    a, n = f.about, f.numbers
    if named is None:
        head = f"What limits {config_text(a)} on {a['machine']}"
    else:
        head = f"What limits {differing(a, named) or 'it'}"
    phase = ""
    if a.get("phase"):
        phase = f" The largest phase is {PHASE_LABELS[a['phase']]} ({fmt_pct(n['phase_share'])})."
    if f.kind == "limit_input":
        return head + (
            f": the input pipeline — data wait and host-to-device copies take "
            f"{fmt_pct(n['input_share'])} of each step ({fmt(n['step_s'] * 1e3, 'ms')}); a "
            "device-resident dataset or more DataLoader workers attack that share first."
        )
    roof = a.get("roof")
    if f.kind == "limit_overheads":
        kind = "compute" if a["bound"] == "compute" else f"{a['level']} bandwidth"
        return head + (
            f": overheads, not the roofs — the step reaches only {fmt_pct(n['fraction_of_roof'])} "
            f"of the {roof} {kind} roof above it ({fmt_si(n['performance_flop_s'], 'FLOP/s')} "
            f"of {fmt_si(n['attainable_flop_s'], 'FLOP/s')} attainable), so launch latency, "
            "small kernels and framework time dominate; larger batches, torch.compile or CUDA "
            "graphs address that." + phase
        )
    if f.kind == "limit_compute":
        return head + (
            f": compute — the step is right of the ridge point and reaches "
            f"{fmt_pct(n['fraction_of_peak'])} of the {roof} {a['precision']} peak; a faster "
            "precision or fewer FLOPs help most." + phase
        )
    if f.kind == "limit_memory":
        return head + (
            f": memory bandwidth at {a['level']} — the step is left of the ridge point and "
            f"reaches {fmt_pct(n['fraction_of_roof'])} of the {roof} bandwidth roof; fusing "
            "kernels, channels-last or lower precision (fewer bytes) help most." + phase
        )
    reading = (
        f"no roofline reading (the step lies above the {roof} roof, so that roof is too low; "
        "see Roofline)"
        if roof
        else "no roofline point for it"
    )
    return head + (
        f": {reading}; the largest phase is {PHASE_LABELS[a['phase']]} "
        f"({fmt_pct(n['phase_share'])} of {fmt(n['step_s'] * 1e3, 'ms')} per step)."
    )


def measuring_cost(f: Finding, named: Mapping | None = None) -> str:
    n = f.numbers
    text = (
        f"Measuring took {fmt_duration(n['busy_s'])} of busy time, "
        f"{fmt_pct(n['timed_share_of_busy'])} of it in timed windows"
    )
    if n.get("judged"):
        text += f"; {n['met']} of {n['judged']} measured configurations reached their CI target"
    return text + " — see Measurement cost and quality."


# What each count of `flagged_counts` says.
COUNTED = {
    "oom": "ran out of memory",
    "over_budget": "took too long per step to measure within the time budget",
    "host_busy": "had too few clean windows on a busy host",
    "unstable": "flagged unstable",
    "high_variance": "flagged for high variance",
}


def flagged_counts(f: Finding, named: Mapping | None = None) -> str:
    counts = [
        f"{n} configuration{'s' if n != 1 else ''} {COUNTED[k]}"
        for k, n in f.numbers.items()
        if k in COUNTED and n
    ]
    roofs = f.numbers.get("roof_too_low")
    if roofs:
        counts.append(f"{roofs} roof{'s lie' if roofs != 1 else ' lies'} below measured points")
    text = "; ".join(counts)
    return text[0].upper() + text[1:] + " — see Notes."


WORDING = {
    **dict.fromkeys(("only_configuration", "fastest", "fastest_tied"), fastest),
    **dict.fromkeys(("best_setting", "best_setting_tied"), best_setting),
    **dict.fromkeys(
        ("limit_input", "limit_overheads", "limit_compute", "limit_memory", "limit_unread"), limit
    ),
    "measuring_cost": measuring_cost,
    "flagged_counts": flagged_counts,
}
