"""The Key findings: the short list a newcomer reads first, above the sections.

Per machine and model the fastest configuration, what limits it (`limiter_sentence`), what
its operator profile says, the best precision and variant and the batch scaling; then
whether data loading limits any configuration (`input_pipeline.input_finding`), the
host-bound profiles, the runs that train faster but reach the target later, the machine
comparison, what the study cost and how many results the notes flag. Each sentence is
written by its section's module; only the limiter's, and the rankings', are written here.

"Fastest" and "best" follow one tie rule (`nnperf.report.comparisons.ranking`): a
configuration is named only where the ratio's 95% interval against the runner-up excludes 1;
otherwise the finding names the tie. A finding also says when a configuration it names
missed its CI target (`missed_target_note`).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import pandas as pd

from nnperf.core.vocab import REFERENCE_VARIANT
from nnperf.core.wording import missing
from nnperf.report import comparisons
from nnperf.report.bounds import (
    LEVEL_LABELS,
    ROOF_TOLERANCE,
    preferred_verdict,
    roofline_verdicts,
    study_readings,
)
from nnperf.report.configurations import (
    GROUP_KEYS,
    MEAN,
    estimate_text,
    match_config,
    ok_configs,
    sort_configs,
)
from nnperf.report.format import config_text, fmt, fmt_duration, fmt_pct, fmt_si, truthy
from nnperf.report.outline import Page
from nnperf.report.sections import accuracy, input_pipeline, notes, speedups
from nnperf.report.sections.breakdown import (
    INPUT_BOUND_SHARE,
    PHASE_LABELS,
    largest_phase,
    phase_shares,
)
from nnperf.report.sections.machines_compared import machine_comparison_findings
from nnperf.report.sections.measurement import ci_target_counts, page_cost, page_measurement
from nnperf.report.sections.operators import bound_sentence
from nnperf.report.sections.roofline import busy_sentence

# Below this fraction of the attainable roof a step is far from both roofs: its time goes
# to launch latency, small kernels and framework overhead rather than to arithmetic or
# memory traffic (the usual reading of a roofline; Williams et al., CACM 2009).
FAR_FROM_ROOF = 0.3


def limiter_sentence(config: Mapping, phases: pd.DataFrame, verdicts: pd.DataFrame) -> str | None:
    """One sentence on what limits `config`, from its phase shares and roofline verdict."""
    phase_row = match_config(phases, config)
    verdict = preferred_verdict(verdicts, config)
    head = f"What limits {config_text(config)} on {config['machine']}: "
    if phase_row is not None and phase_row["input_share"] >= INPUT_BOUND_SHARE:
        return head + (
            f"the input pipeline — data wait and host-to-device copies take "
            f"{fmt_pct(phase_row['input_share'])} of each step "
            f"({fmt(phase_row['phase_total_s'] * 1e3, 'ms')}); a device-resident "
            "dataset or more DataLoader workers attack that share first."
        )
    if verdict is not None and verdict["fraction_of_roof"] <= ROOF_TOLERANCE:
        level = LEVEL_LABELS.get(verdict["limit"], verdict["limit"])
        fraction = float(verdict["fraction_of_roof"])
        if fraction < FAR_FROM_ROOF:
            text = (
                f"overheads, not the roofs — the step reaches only {fmt_pct(fraction)} of "
                f"the {verdict['roof']} {'compute' if verdict['bound'] == 'compute' else level + ' bandwidth'} "
                f"roof above it ({fmt_si(verdict['performance_flop_s'], 'FLOP/s')} of "
                f"{fmt_si(verdict['attainable_flop_s'], 'FLOP/s')} attainable), so launch "
                "latency, small kernels and framework time dominate; larger batches, "
                "torch.compile or CUDA graphs address that."
            )
        elif verdict["bound"] == "compute":
            text = (
                f"compute — the step is right of the ridge point and reaches "
                f"{fmt_pct(verdict['fraction_of_peak'])} of the {verdict['roof']} "
                f"{config['precision']} peak; a faster precision or fewer FLOPs help most."
            )
        else:
            text = (
                f"memory bandwidth at {level} — the step is left of the ridge point and "
                f"reaches {fmt_pct(fraction)} of the {verdict['roof']} bandwidth roof; "
                "fusing kernels, channels-last or lower precision (fewer bytes) help most."
            )
        if phase_row is not None:
            phase, share = largest_phase(phase_row)
            text += f" The largest phase is {PHASE_LABELS[phase]} ({fmt_pct(share)})."
        return head + text
    if phase_row is not None:
        phase, share = largest_phase(phase_row)
        if verdict is not None:
            # A point above its roof says the roof is too low, not what binds the step.
            roofline = (
                f"no roofline reading (the step lies above the {verdict['roof']} roof, "
                "so that roof is too low; see Roofline)"
            )
        else:
            roofline = "no roofline point for it"
        return head + (
            f"{roofline}; the largest phase is {PHASE_LABELS[phase]} "
            f"({fmt_pct(share)} of {fmt(phase_row['phase_total_s'] * 1e3, 'ms')} "
            "per step)."
        )
    return None


def profile_to_quote(profiles: Sequence, group: pd.DataFrame, best: dict) -> dict | None:
    """The operator profile a key finding quotes for a machine and model: the fastest
    configuration's, or, when that one was not profiled, the profiled configuration that
    trained fastest (`group`: the machine's and model's measured configurations)."""
    candidates = [
        p.document
        for p in profiles
        if p.document.get("status") == "ok"
        and all(str(p.document.get(k)) == str(best[k]) for k in ("machine", "device", "model"))
    ]
    if not candidates:
        return None

    def speed(document: dict) -> float:
        match = group
        for k in GROUP_KEYS:
            match = match[match[k].astype(str) == str(document.get(k))]
        return float(match[MEAN].iloc[0]) if not match.empty else -1.0

    return max(candidates, key=speed)


# When nothing was measured, the key findings say so instead of staying empty.
NO_RESULTS = "No timed results yet: only the sections below with data were written."
# The notes the key findings count, by the prefix each starts with, and what they say.
COUNTED_NOTES = (
    ("Out of memory", "ran out of memory"),
    ("Over budget", "took too long per step to measure within the time budget"),
    ("Unstable", "flagged unstable"),
    ("High variance", "flagged for high variance"),
)


def missed_target_note(configs: Sequence[Mapping]) -> str:
    """`; X missed its CI target (±4.7% against ±3.0%)` for the named configurations whose
    interval is wider than their target, so a finding never hides that its numbers are."""
    missed = [
        c
        for c in configs
        if not missing(c.get("ci_target_met")) and not truthy(c.get("ci_target_met"))
    ]
    if not missed:
        return ""

    def width(c: Mapping) -> str:
        half, target = c.get("ci_half_width_rel"), c.get("ci_target")
        if missing(half) or missing(target):
            return "no CI"
        return f"\u00b1{fmt_pct(half)} against \u00b1{fmt_pct(target)}"

    named = [f"{config_text(c)} ({width(c)})" for c in missed]
    its = "its" if len(missed) == 1 else "their"
    return f"; {comparisons.names(named, str)} missed {its} CI target"


def named(ranked: comparisons.Ranking) -> list[dict]:
    """The configurations a ranking's sentence names: the tie, or the best and runner-up."""
    return list(ranked.tied) if ranked.best is None else list(ranked.order[:2])


def _at(ranked: comparisons.Ranking) -> list[str]:
    return [f"{config_text(c)} at {estimate_text(c)}" for c in ranked.tied]


def fastest_sentence(ranked: comparisons.Ranking, machine: str) -> str:
    """The tie rule on a machine's and model's configurations: the fastest is named only
    where separated from the runner-up; otherwise the tie is."""
    top = ranked.top
    if len(ranked.order) == 1:
        text = f"Only configuration measured on {machine}: {config_text(top)}, {estimate_text(top)}"
    elif ranked.best is not None:
        text = (
            f"Fastest configuration on {machine}: {config_text(top)}, {estimate_text(top)}; "
            f"{comparisons.describe(ranked.ci)} than the runner-up, "
            f"{config_text(ranked.order[1])}"
        )
    else:
        text = (
            f"No single fastest configuration on {machine}: "
            f"{comparisons.names(_at(ranked), str)} are tied ({comparisons.describe(ranked.ci)})"
        )
    return text + missed_target_note(named(ranked)) + "."


def _comparison_point(table: pd.DataFrame, best: Mapping, column: str) -> dict | None:
    """Where the best `column` is judged for one machine and model: the largest batch size
    compared, at the reference variant (for precisions) or at the fastest configuration's
    precision (for variants) where those were compared."""
    rows = table[(table["machine"] == best["machine"]) & (table["model"] == best["model"])]
    if rows.empty:
        return None
    at = rows[rows["batch_size"] == rows["batch_size"].max()]
    if column == "precision" and (at["variant"] == REFERENCE_VARIANT).any():
        at = at[at["variant"] == REFERENCE_VARIANT]
    if column == "variant" and (at["precision"] == best["precision"]).any():
        at = at[at["precision"] == best["precision"]]
    return at.iloc[0].to_dict()


def best_of_sentence(ranked: comparisons.Ranking, column: str, point: Mapping) -> str:
    """`Best precision for m at batch 64 (baseline) on M: bf16, 1.80x faster (95% CI ...)
    than fp32 ...`, or the tie where the tie rule names none."""
    where = config_text(point, **{column: False}) + f" on {point['machine']}"
    if ranked.best is not None:
        top, second = ranked.order[0], ranked.order[1]
        text = (
            f"Best {column} for {where}: {top[column]}, {comparisons.describe(ranked.ci)} than "
            f"{second[column]} ({estimate_text(top)} vs {estimate_text(second)})"
        )
    else:
        tied = [f"{c[column]} at {estimate_text(c)}" for c in ranked.tied]
        text = (
            f"No single best {column} for {where}: {comparisons.names(tied, str)} are tied "
            f"({comparisons.describe(ranked.ci)})"
        )
    return text + missed_target_note(named(ranked)) + "."


def speedup_findings(
    best: Mapping,
    ok: pd.DataFrame,
    runs: pd.DataFrame | None,
    tables: Mapping[str, pd.DataFrame],
) -> list[str]:
    """The best precision (at the reference variant) and the best variant (at the fastest
    configuration's precision) at the largest batch size, for one machine and model, by the
    tie rule (`comparisons.ranking`); `tables` are the speedup tables by compared column."""
    findings = []
    for column, table in tables.items():
        point = _comparison_point(table, best, column)
        if point is None:
            continue
        candidates = ok
        for k in GROUP_KEYS:
            if k != column:
                candidates = candidates[candidates[k] == point[k]]
        ranked = comparisons.ranking(candidates, runs)
        if len(ranked.order) >= 2:
            findings.append(best_of_sentence(ranked, column, point))
    return findings


def fastest_findings(page: Page) -> list[str]:
    """Per machine and model: the fastest configuration (or the tie), what limits the top
    one, what its operator profile says, the best precision and variant, and its batch
    scaling."""
    summary, runs = page.tables.summary, page.tables.runs
    phases = phase_shares(summary)
    verdicts = roofline_verdicts(study_readings(page.tables))
    tables = {c: speedups.pairs(page.tables.comparisons, c) for c in ("precision", "variant")}
    scaling = speedups.scaling(page.tables.comparisons)
    ok = ok_configs(summary)
    findings = []
    for (machine, model), group in ok.groupby(["machine", "model"], sort=True):
        ranked = comparisons.ranking(group, runs)
        best = ranked.top
        findings.append(fastest_sentence(ranked, machine))
        limiter = limiter_sentence(best, phases, verdicts)
        if limiter:
            findings.append(limiter)
        profile = profile_to_quote(page.tables.opprofiles, group, best)
        if profile is not None:
            findings.extend(s for s in (bound_sentence(profile, machine),) if s is not None)
        findings += speedup_findings(best, ok, runs, tables)
        scale = scaling
        for k in ("machine", "device", "model", "precision", "variant"):
            scale = scale[scale[k] == best[k]]
        if not scale.empty and scale.iloc[0]["gain"] is not None:
            findings.append(speedups.scaling_sentence(scale.iloc[0].to_dict()))
    return findings


def host_bound_findings(page: Page) -> list[str]:
    """The busy-share sentence of every profiled configuration that is host-bound."""
    profiles = page.tables.profiles
    if profiles is None or "busy_verdict" not in profiles:
        return []
    host_bound = profiles[profiles["busy_verdict"] == "host-bound"]
    return [
        busy_sentence(row, page.tables.summary)
        for row in sort_configs(host_bound).to_dict("records")
    ]


def faster_but_later_findings(page: Page) -> list[str]:
    table = page.tables.training
    if table is None or table.empty:
        return []
    return accuracy.faster_but_later_sentences(
        table, accuracy.throughput_column(table), page.tables.runs
    )


def cost_finding(page: Page, ok: pd.DataFrame) -> list[str]:
    """What measuring cost and how many configurations reached their CI target."""
    cost = page_cost(page)
    if cost["first_start"] is None or ok.empty:
        return []
    text = (
        f"Measuring took {fmt_duration(cost['busy_s'])} of busy time, "
        f"{fmt_pct(cost['timed_share_of_busy'])} of it in timed windows"
    )
    met, judged = ci_target_counts(page_measurement(page))
    if judged:
        text += f"; {met} of {judged} measured configurations reached their CI target"
    return [text + " — see Measurement cost and quality."]


def flagged_count_finding(notes: Sequence[str]) -> list[str]:
    """How many configurations the notes flag, by kind, and how many roofs lie too low."""
    counts = []
    for prefix, what in COUNTED_NOTES:
        n = sum(1 for note in notes if note.startswith(prefix + ":"))
        if n:
            counts.append(f"{n} configuration{'s' if n != 1 else ''} {what}")
    n_roof = sum(1 for n in notes if n.startswith("Roof too low"))
    if n_roof:
        counts.append(f"{n_roof} roof{'s lie' if n_roof != 1 else ' lies'} below measured points")
    if not counts:
        return []
    text = "; ".join(counts)
    return [text[0].upper() + text[1:] + " — see Notes."]


def key_findings(page: Page) -> list[str]:
    """The short list a newcomer reads first (NO_RESULTS when there is nothing to say)."""
    ok = ok_configs(page.tables.summary)
    findings = (
        fastest_findings(page)
        + input_pipeline.input_finding(page.tables.summary)
        + host_bound_findings(page)
        + faster_but_later_findings(page)
        + machine_comparison_findings(ok, page.machines, page.tables.runs)
        + cost_finding(page, ok)
        + flagged_count_finding(notes.collect(page))
    )
    return findings or [NO_RESULTS]
