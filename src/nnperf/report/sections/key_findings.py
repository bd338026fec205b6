"""The Key findings: the short list a newcomer reads first, above the sections.

Per machine and model the fastest configuration, what limits it (`limiter_sentence`), what
its operator profile says, the best precision and variant and the batch scaling; then the
host-bound profiles, the runs that train faster but reach the target later, the machine
comparison, what the study cost and how many results the notes flag. Each sentence is
written by its section's module; only the limiter's is written here.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import pandas as pd

from nnperf.core.vocab import REFERENCE_VARIANT
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
from nnperf.report.format import config_text, fmt, fmt_duration, fmt_pct, fmt_si
from nnperf.report.outline import Page
from nnperf.report.sections import accuracy, notes, speedups
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


def speedup_findings(
    best: Mapping,
    precision_table: pd.DataFrame,
    variant_table: pd.DataFrame,
) -> list[str]:
    """The best precision (at the reference variant) and the best variant (at the fastest
    configuration's precision) at the largest batch size, for one machine and model."""
    machine, model = best["machine"], best["model"]
    findings = []
    for table, column in ((precision_table, "precision"), (variant_table, "variant")):
        rows = table[(table["machine"] == machine) & (table["model"] == model)]
        if rows.empty:
            continue
        at = rows[rows["batch_size"] == rows["batch_size"].max()]
        if column == "precision" and (at["variant"] == REFERENCE_VARIANT).any():
            at = at[at["variant"] == REFERENCE_VARIANT]
        if column == "variant" and (at["precision"] == best["precision"]).any():
            at = at[at["precision"] == best["precision"]]
        findings.append(speedups.speedup_sentence(at.loc[at["speedup"].idxmax()].to_dict(), column))
    return findings


def fastest_findings(page: Page) -> list[str]:
    """Per machine and model: the fastest configuration, what limits it, what its operator
    profile says, the best precision and variant, and its batch scaling."""
    summary = page.tables.summary
    phases = phase_shares(summary)
    verdicts = roofline_verdicts(study_readings(page.tables))
    precision_table = speedups.precision_speedups(summary)
    variant_table = speedups.variant_speedups(summary)
    scaling = speedups.batch_scaling(summary)
    findings = []
    for (machine, model), group in ok_configs(summary).groupby(["machine", "model"], sort=True):
        best = group.loc[group[MEAN].idxmax()].to_dict()
        findings.append(
            f"Fastest configuration on {machine}: {config_text(best)}, {estimate_text(best)}."
        )
        limiter = limiter_sentence(best, phases, verdicts)
        if limiter:
            findings.append(limiter)
        profile = profile_to_quote(page.tables.opprofiles, group, best)
        if profile is not None:
            findings.extend(s for s in (bound_sentence(profile, machine),) if s is not None)
        findings += speedup_findings(best, precision_table, variant_table)
        scale = scaling
        for k in ("machine", "device", "model", "precision", "variant"):
            scale = scale[scale[k] == best[k]]
        if not scale.empty:
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
    return accuracy.faster_but_later_sentences(table, accuracy.throughput_column(table))


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
        + host_bound_findings(page)
        + faster_but_later_findings(page)
        + machine_comparison_findings(ok, page.machines)
        + cost_finding(page, ok)
        + flagged_count_finding(notes.collect(page))
    )
    return findings or [NO_RESULTS]
