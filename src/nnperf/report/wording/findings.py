"""The key findings and comparisons.csv's ratios in words (`findings.KEY_KINDS`). A finding
after its machine's and model's first names only what differs from the configuration that one
named (`differing`); ratios are worded by `comparisons.ratio_text` everywhere, and "missed its
CI target" here only (`missed_target`)."""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from nnperf.core.ratios import OUT_OF_REACH
from nnperf.core.wording import missing, out_of_reach_sentence
from nnperf.report.comparisons import ci_of, interval_cell, names, ratio_text
from nnperf.report.findings import LEADERS, Finding
from nnperf.report.format import GROUP_KEYS, config_text, estimate_text, fmt, fmt_pct
from nnperf.report.format import truthy
from nnperf.report.wording.templates import say

# What limits the fastest configuration, by kind (after "What limits X"), then its largest
# phase where the record names one.
PHASE = {"phase": " The largest phase is {a[phase]:phase} ({n[phase_share]:pct})."}
LIMITS = {
    "limit_input": ": the input pipeline — data wait and host-to-device copies take "
    "{n[input_share]:pct} of each step ({n[step_s]:ms}); a device-resident dataset or more "
    "DataLoader workers attack that share first.",
    "limit_overheads": ": overheads, not the roofs — the step reaches only "
    "{n[fraction_of_roof]:pct} of the {a[roof]} {kind} roof above it "
    "({n[performance_flop_s]:si:FLOP/s} of {n[attainable_flop_s]:si:FLOP/s} attainable), so "
    "launch latency, small kernels and framework time dominate; larger batches, torch.compile "
    "or CUDA graphs address that.",
    "limit_compute": ": compute — the step is right of the ridge point and reaches "
    "{n[fraction_of_peak]:pct} of the {a[roof]} {a[precision]} peak; a faster precision or "
    "fewer FLOPs help most.",
    "limit_memory": ": memory bandwidth at {a[level]} — the step is left of the ridge point and "
    "reaches {n[fraction_of_roof]:pct} of the {a[roof]} bandwidth roof; fusing kernels, "
    "channels-last or lower precision (fewer bytes) help most.",
    "limit_unread": ": {reading}; the largest phase is {a[phase]:phase} ({n[phase_share]:pct} of "
    "{n[step_s]:ms} per step).",
}
# What each count of `flagged_counts` says.
COUNTED = {
    "oom": "ran out of memory",
    "over_budget": "took too long per step to measure within the time budget",
    "host_busy": "had too few clean windows on a busy host",
    "unstable": "flagged unstable",
    "high_variance": "flagged for high variance",
}
# A batch size whose throughput is, over its whole 95% interval, at least this fraction of
# the top batch size's counts as saturated (a run-to-run spread of a few percent is normal,
# see the CV flag), so larger batches are not worth their memory.
SATURATION = 0.95


def differing(config: Mapping, named: Mapping | None) -> str:
    """`config` named by the keys in which it differs from `named` (all of them without;
    empty where it is `named`)."""
    if named is None or str(config.get("model")) != str(named.get("model")):
        return config_text(config)
    return " ".join(
        f"batch {int(config[k])}" if k == "batch_size" else str(config[k])
        for k in ("precision", "batch_size", "variant")
        if k in config and str(config.get(k)) != str(named.get(k))
    )


def _width(c: Mapping) -> str:
    half, target = c.get("ci_half_width_rel"), c.get("ci_target")
    if missing(half) or missing(target):
        return "no CI"
    return f"\u00b1{fmt_pct(half)} against \u00b1{fmt_pct(target)}"


def missed_target(configs: Sequence[Mapping], name: Callable[[Mapping], str] = config_text) -> str:
    """`X (±6.7% against ±6.0%) missed its CI target`, the configurations whose interval is
    wider than their target; empty where none did."""
    late = [c for c in configs if not missing(m := c.get("ci_target_met")) and not truthy(m)]
    if not late:
        return ""
    its = "its" if len(late) == 1 else "their"
    return f"{names(late, lambda c: f'{name(c)} ({_width(c)})')} missed {its} CI target"


def _with_missed(text: str, configs: Sequence[Mapping], name) -> str:
    note = missed_target(configs, name)
    return text + (f"; {note}" if note else "") + "."


def _tied(f: Finding, what: str, name: Callable[[Mapping], str]) -> str:
    tied, ratio = f.about["tied"], ratio_text(f.about["ci"])
    listed = names([f"{name(c)} at {estimate_text(c)}" for c in tied], str)
    return _with_missed(f"No single {what}: {listed} are {ratio}", tied, name)


def fastest(f: Finding, named: Mapping | None = None) -> str:
    a = f.about
    top, machine = a["order"][0], a["machine"]
    if f.kind == "fastest_tied":
        return _tied(f, f"fastest configuration on {machine}", config_text)
    text = f"{config_text(top)}, {estimate_text(top)}"
    if f.kind == "only_configuration":
        return _with_missed(f"Only configuration measured on {machine}: {text}", [top], config_text)
    second = a["order"][1]
    short = lambda c: differing(c, top)  # noqa: E731 - the runner-up named against the top
    text = f"Fastest configuration on {machine}: {text}; {ratio_text(a['ci'])} than the runner-up"
    return _with_missed(f"{text}, {short(second)}", [top, second], short)


def best_setting(f: Finding, named: Mapping | None = None) -> str:
    a = f.about
    column, point = a["column"], a["point"]
    name = lambda c: str(c[column])  # noqa: E731 - a setting named by its value alone
    where = config_text(point, **{column: False})
    if named is None:
        where = f"for {where} on {point['machine']}"
    else:
        # The list's first finding named the model and the machine.
        where = where[len(str(point["model"])) :].strip()
        where = where if where.startswith("at ") else f"for {where}"
    if f.kind == "best_setting_tied":
        return _tied(f, f"best {column} {where}", name)
    top, second = a["order"][0], a["order"][1]
    text = f"Best {column} {where}: {top[column]}, {ratio_text(a['ci'])} than {second[column]} "
    text += f"({estimate_text(top)} vs {estimate_text(second)})"
    return _with_missed(text, [top, second], name)


def limit(f: Finding, named: Mapping | None = None) -> str:
    a, roof = f.about, f.about.get("roof")
    if named is None:
        head = say("What limits {a:config} on {a[machine]}", f)
    else:
        head = f"What limits {differing(a, named) or 'it'}"
    reading = "no roofline reading (the step lies above the {a[roof]} roof, so that roof is too "
    reading += "low; see Roofline)" if roof else ""
    return head + say(
        (LIMITS[f.kind], {} if f.kind in ("limit_input", "limit_unread") else PHASE),
        f,
        kind="compute" if a.get("bound") == "compute" else f"{a.get('level')} bandwidth",
        reading=say(reading, f) if roof else "no roofline point for it",
    )


def flagged_counts(f: Finding, named: Mapping | None = None) -> str:
    counts = [
        f"{n} configuration{'s' if n != 1 else ''} {COUNTED[k]}"
        for k, n in f.numbers.items()
        if k in COUNTED and n
    ]
    if roofs := f.numbers.get("roof_too_low"):
        counts.append(f"{roofs} roof{'s lie' if roofs != 1 else ' lies'} below measured points")
    text = "; ".join(counts)
    return text[0].upper() + text[1:] + " — see Notes."


def side(row: Mapping, side: str) -> dict:
    """One side's keys of a comparisons.csv row (`a` or `b`), named as summary.csv names them."""
    return {k: row.get(f"{side}_{k}") for k in GROUP_KEYS}


def speedup(f: Finding, named=None) -> str:
    """`bf16 is 1.80x faster (95% CI 1.78-1.82) than fp32 for resnet18_cifar at batch 256
    (baseline) on M: ...`, or `bf16 vs fp32 for ...: not separated ...`."""
    row, column = f.about["row"], f.about["column"]
    ci, a = ci_of(row), side(row, "a")
    means = "{row[a_value]:n:img/s} vs {row[b_value]:n:img/s}."
    text = "{subject} is {ratio} than {b} {where}: " + means
    if not ci.separated:
        text = "{subject} vs {b} {where}: {ratio}; " + means
    if row.get("verdict") == "unresolved":
        text += " Unresolved: its CI reaches beyond the ±{row[ci_target]:pct} target around 1 "
        text += "after {row[rounds]:int} {per}."
    if row.get("verdict") == OUT_OF_REACH:
        text += " Unresolved (its CI reaches beyond the ±{row[ci_target]:pct} target around 1), "
        text += f"and {out_of_reach_sentence(row.get('rounds'))}."
    return say(
        text,
        row=row,
        subject=a["precision"] if column == "precision" else f"The {a['variant']} variant",
        b=row[f"b_{column}"],
        where=f"for {config_text(a, **{column: False})} on {a['machine']}",
        ratio=ratio_text(ci),
        per="rounds" if row.get("method") == "paired" else "processes",
    )


def _best_batch(tops: list[Mapping], largest: int) -> str:
    """What the tie rule allows to be said of the best batch size."""
    if not tops:
        return ""
    top = int(tops[0]["a_batch_size"])
    tied = sorted({top, *(int(r["b_batch_size"]) for r in tops if r["verdict"] != "faster")})
    closest = min(tops, key=lambda r: float(r["ratio"]))
    ratio = f"batch {top} vs {int(closest['b_batch_size'])}: {ratio_text(ci_of(closest))}"
    if len(tied) > 1:
        return f"; no best batch size: batch {names(tied, str)} are tied ({ratio})"
    if top == largest:
        return f"; it is still rising at the largest batch size that ran ({ratio})"
    return f"; batch {top} is the best, at {fmt(tops[0]['a_value'], 'img/s')} ({ratio})"


def _saturation(tops: list[Mapping]) -> str:
    """The smallest batch size whose whole interval reaches SATURATION of the leader's."""
    reaching = [
        r for r in tops if not missing(r["ci95_high"]) and float(r["ci95_high"]) <= 1 / SATURATION
    ]
    if not reaching:
        return ""
    return say(
        "; batch {r[b_batch_size]:int} already reaches {share:pct} of batch {r[a_batch_size]:int} "
        "(that one is {r[ratio]:x} of it, 95% CI {interval})",
        r=(row := min(reaching, key=lambda r: int(r["b_batch_size"]))),
        share=SATURATION,
        interval=interval_cell(ci_of(row)),
    )


def batch_scaling(f: Finding, named=None) -> str:
    """The largest batch size against the smallest (`about["gain"]`), then the best batch
    size and saturation from the leader's rows (`about["tops"]`); after the list named the
    configuration, only what differs from it."""
    a, gain, tops = f.about, f.about["gain"], list(f.about["tops"])
    largest = int(gain["a_batch_size"])
    against = f"batch {largest} against batch {int(gain['b_batch_size'])} "
    against += f"({fmt(gain['a_value'], 'img/s')} vs {fmt(gain['b_value'], 'img/s')}): "
    against += ratio_text(ci_of(gain), "higher")
    if named is None:
        text = f"For {config_text(a, batch=False)} on {a['machine']}, {against}"
    else:
        short = differing(a, named)
        text = f"For {short}, {against}" if short else against[0].upper() + against[1:]
    return text + _best_batch(tops, largest) + _saturation(tops) + "."


def _at(row: Mapping, side: str) -> str:
    return f"{row[side + '_machine']} at {fmt(row[side + '_value'], 'img/s')}"


def machine(f: Finding, named=None) -> str:
    """One configuration across machines (`about["rows"]`: its fastest machine against each
    other one, the runner-up first): the tie rule, with the fastest-to-slowest ratio."""
    rows = f.about["rows"]
    top, slow, config = rows[0], rows[-1], config_text(side(rows[0], "a"))
    if f.kind == "machine_tied":
        tied = [_at(top, "a"), *(_at(r, "b") for r in rows if r["verdict"] != "faster")]
        return (
            f"Across machines, {config} has no single fastest machine: {names(tied, str)} are "
            f"{ratio_text(ci_of(top))}."
        )
    text = f"Across machines, {config} runs fastest on {_at(top, 'a')}, {ratio_text(ci_of(slow))} "
    text += f"than the slowest machine, {slow['b_machine']}, at {fmt(slow['b_value'], 'img/s')}"
    if len(rows) > 1:
        text += f"; {ratio_text(ci_of(top))} than the runner-up, {top['b_machine']}"
    return text + "."


WORDING = {
    **dict.fromkeys(LEADERS, fastest),
    **dict.fromkeys(("best_setting", "best_setting_tied"), best_setting),
    **dict.fromkeys(LIMITS, limit),
    "measuring_cost": (
        "Measuring took {n[busy_s]:dur} of busy time, {n[timed_share_of_busy]:pct} of it in "
        "timed windows",
        {"judged": "; {n[met]} of {n[judged]} measured configurations reached their CI target"},
        " — see Measurement cost and quality.",
    ),
    **dict.fromkeys(("machine_fastest", "machine_tied"), machine),
}
