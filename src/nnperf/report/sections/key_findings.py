"""The Key findings: the short list a newcomer reads first, above the sections.

Per machine and model the fastest configuration, what limits it, what its operator profile
says, the best precision and variant and the batch scaling; then the input pipeline, the
host-bound profiles, the runs that train faster but reach the target later, the machine
comparison, what the study cost and how many results the notes flag. "Fastest" and "best"
follow one tie rule (`comparisons.ranking`): a configuration is named only where the ratio's
95% interval against the runner-up excludes 1; otherwise the finding names the tie.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import pandas as pd

from nnperf.core.vocab import CONFIG_KEYS, REFERENCE_VARIANT
from nnperf.report import comparisons
from nnperf.report.bounds import (
    LEVEL_LABELS,
    ROOF_TOLERANCE,
    preferred_verdict,
    roofline_verdicts,
    study_readings,
)
from nnperf.report.format import GROUP_KEYS, MEAN, match_config, ok_configs, sort_configs
from nnperf.report.findings import Finding
from nnperf.report.outline import Page
from nnperf.report.sections import accuracy, input_pipeline, notes, speedups
from nnperf.report.sections.breakdown import INPUT_BOUND_SHARE, largest_phase, phase_shares
from nnperf.report.sections.machines_compared import machine_comparison_findings
from nnperf.report.sections.measurement import cost_record
from nnperf.report.sections.operators import bound_record
from nnperf.report.sections.roofline import busy_record

# Below this fraction of the attainable roof a step is far from both roofs: its time goes
# to launch latency, small kernels and framework overhead rather than to arithmetic or
# memory traffic (the usual reading of a roofline; Williams et al., CACM 2009).
FAR_FROM_ROOF = 0.3


def _keys(config: Mapping) -> dict:
    return {k: config[k] for k in ("machine", *CONFIG_KEYS) if k in config}


def limit_record(config: Mapping, phases: pd.DataFrame, verdicts: pd.DataFrame) -> Finding | None:
    """What limits `config`, from its phase shares and roofline verdict: the input pipeline,
    overheads far below the roofs, compute, memory, or only its largest phase."""
    phase_row = match_config(phases, config)
    verdict = preferred_verdict(verdicts, config)
    about, numbers = _keys(config), {}
    if phase_row is not None:
        phase, share = largest_phase(phase_row)
        about["phase"] = phase
        numbers.update(
            phase_share=share,
            input_share=phase_row["input_share"],
            step_s=phase_row["phase_total_s"],
        )
        if phase_row["input_share"] >= INPUT_BOUND_SHARE:
            return Finding("limit_input", about, numbers)
    if verdict is not None:
        about.update(roof=verdict["roof"], bound=verdict["bound"])
        about["level"] = LEVEL_LABELS.get(verdict["limit"], verdict["limit"])
        for name in ("fraction_of_roof", "fraction_of_peak", "performance_flop_s"):
            numbers[name] = float(verdict[name])
        numbers["attainable_flop_s"] = float(verdict["attainable_flop_s"])
    if verdict is not None and verdict["fraction_of_roof"] <= ROOF_TOLERANCE:
        if verdict["fraction_of_roof"] < FAR_FROM_ROOF:
            return Finding("limit_overheads", about, numbers)
        kind = "limit_compute" if verdict["bound"] == "compute" else "limit_memory"
        return Finding(kind, about, numbers)
    if phase_row is None:
        return None
    return Finding("limit_unread", about, numbers)


def profile_to_quote(profiles: Sequence, group: pd.DataFrame, best: dict) -> dict | None:
    """The operator profile quoted for a machine and model (`group`): the profiled
    configuration that trained fastest."""
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


def ranking_record(ranked: comparisons.Ranking, about: Mapping, kinds: Sequence[str]) -> Finding:
    """A ranking as a finding: `kinds` are its kind with one candidate, separated, tied."""
    kind = kinds[0] if len(ranked.order) == 1 else kinds[1] if ranked.best else kinds[2]
    about = {**about, "order": ranked.order[:2], "tied": ranked.tied, "ci": ranked.ci}
    return Finding(kind, about, {"throughput_img_s": ranked.top.get(MEAN)})


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


def speedup_records(best: Mapping, ok: pd.DataFrame, runs, tables: Mapping) -> list[Finding]:
    """The best precision and the best variant at `_comparison_point`, by the tie rule;
    `tables` are the Speedups section's pairs by compared column."""
    found = []
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
            about = {"column": column, "point": point, **_keys(point)}
            kinds = ("best_setting", "best_setting", "best_setting_tied")
            found.append(ranking_record(ranked, about, kinds))
    return found


def fastest_findings(page: Page) -> list[Finding | str]:
    """Per machine and model: the fastest configuration (or the tie), what limits it, what
    its operator profile says, the best precision and variant, and its batch scaling."""
    summary, runs = page.tables.summary, page.tables.runs
    phases = phase_shares(summary)
    verdicts = roofline_verdicts(study_readings(page.tables))
    tables = {c: speedups.pairs(page.tables.comparisons, c) for c in ("precision", "variant")}
    scaling = speedups.scaling(page.tables.comparisons)
    ok = ok_configs(summary)
    findings: list[Finding | str] = []
    for (machine, model), group in ok.groupby(["machine", "model"], sort=True):
        ranked = comparisons.ranking(group, runs)
        best = ranked.top
        kinds = ("only_configuration", "fastest", "fastest_tied")
        findings.append(ranking_record(ranked, {**_keys(best), "machine": machine}, kinds))
        findings += [r for r in (limit_record(best, phases, verdicts),) if r is not None]
        profile = profile_to_quote(page.tables.opprofiles, group, best)
        if profile is not None:
            findings += [r for r in (bound_record(profile, machine),) if r is not None]
        findings += speedup_records(best, ok, runs, tables)
        keys = ("machine", "device", "model", "precision", "variant")
        findings += [r for r in scaling if all(r.about[k] == best[k] for k in keys)][:1]
    return findings


def key_findings(page: Page) -> list[Finding | str]:
    """The short list a newcomer reads first (NO_RESULTS when there is nothing to say)."""
    tables = page.tables
    findings = fastest_findings(page)
    findings += [r for r in (input_pipeline.input_record(tables.summary),) if r]
    if tables.profiles is not None and "busy_verdict" in tables.profiles:
        host_bound = tables.profiles[tables.profiles["busy_verdict"] == "host-bound"]
        rows = sort_configs(host_bound).to_dict("records")
        findings += [busy_record(row, tables.summary) for row in rows]
    if tables.training is not None and not tables.training.empty:
        rate = accuracy.throughput_column(tables.training)
        findings += accuracy.faster_but_later(tables.training, rate, tables.runs)
    findings += machine_comparison_findings(tables.comparisons)
    measured = not ok_configs(tables.summary).empty
    findings += [r for r in (measured and cost_record(page), notes.flag_counts(page)) if r]
    return findings or [NO_RESULTS]
