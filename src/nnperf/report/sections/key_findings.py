"""The Key findings: the short list a newcomer reads first, above the sections. Per machine and
model the fastest configuration (by `comparisons.ranking`, the report's one tie rule: named only
where the ratio's 95% interval against the runner-up excludes 1), then what the sections say
about it; then the study-wide findings, what the study cost and how many results the notes
flag."""

from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

import pandas as pd

from nnperf.core.vocab import REFERENCE_VARIANT
from nnperf.report import comparisons
from nnperf.report.bounds import roofline_verdicts, study_readings
from nnperf.report.format import GROUP_KEYS, MEAN, match_config, ok_configs, sort_configs
from nnperf.report.findings import LEADERS, Finding
from nnperf.report.outline import Page
from nnperf.report.sections import accuracy, breakdown, input_pipeline, machines_compared
from nnperf.report.sections import measurement, notes, operators, roofline, speedups

# When nothing was measured, the key findings say so instead of staying empty.
NO_RESULTS = "No timed results yet: only the sections below with data were written."


def profile_to_quote(profiles: Sequence, group: pd.DataFrame, best: Mapping) -> dict | None:
    """The profile quoted for a machine and model (`group`): its fastest profiled configuration."""
    ok = [p.document for p in profiles if p.document.get("status") == "ok"]
    where = ("machine", "device", "model")
    same = [d for d in ok if all(str(d.get(k)) == str(best[k]) for k in where)]
    configs = group[list(GROUP_KEYS)].astype(str).itertuples(index=False, name=None)
    speeds = dict(zip(configs, group[MEAN]))

    def speed(document: Mapping) -> float:
        return float(speeds.get(tuple(str(document.get(k)) for k in GROUP_KEYS), -1.0))

    return max(same, key=speed, default=None)


def ranking_record(ranked: comparisons.Ranking, about: Mapping, kinds: Sequence[str]) -> Finding:
    """A ranking as a finding: `kinds` are its kind with one candidate, separated, tied."""
    kind = kinds[0] if len(ranked.order) == 1 else kinds[1] if ranked.best else kinds[2]
    about = {**about, "order": ranked.order[:2], "tied": ranked.tied, "ci": ranked.ci}
    return Finding(kind, about, {"throughput_img_s": ranked.top.get(MEAN)})


def best_setting(best: Mapping, stated: Sequence[Finding], ok: pd.DataFrame, runs) -> list:
    """The best precision or variant for the fastest configuration `best`, chosen from the
    Speedups section's records (`stated`, one compared column): at the largest batch size
    they compare, at the reference variant (precisions) or at `best`'s precision (variants)
    where they compare it. A record holds a candidate against the reference with its interval;
    where two candidates beat the reference, the leader's interval against the runner-up,
    which no record holds, is the tie rule's (`comparisons.ratio_between`)."""
    if not stated:
        return []
    column = stated[0].about["column"]
    rows = pd.DataFrame([f.about["row"] for f in stated])
    rows = rows[(rows["machine"] == best["machine"]) & (rows["model"] == best["model"])]
    rows = rows[rows["batch_size"] == rows["batch_size"].max()]
    fixed = "variant" if column == "precision" else "precision"
    value = REFERENCE_VARIANT if column == "precision" else best["precision"]
    rows = rows[rows[fixed] == value] if (rows[fixed] == value).any() else rows
    if rows.empty:
        return []
    point = rows.iloc[0].to_dict()
    same = [k for k in GROUP_KEYS if k != column]
    rows = rows[(rows[same] == rows[same].iloc[0]).all(axis=1)].to_dict("records")
    configs = [match_config(ok, c) for c in ({**point, column: point["reference"]}, *rows)]
    if any(c is None for c in configs):
        return []
    ratios = [1.0, *(float(r["ratio"]) for r in rows)]
    ranked = sorted(range(len(configs)), key=lambda i: -ratios[i])
    lead, second = ranked[:2]
    if lead == 0:  # the reference leads: the runner-up's record, turned over
        ci = comparisons.ci_of(rows[second - 1])
        turned = {k: None if b is None else 1 / b for k, b in (("low", ci.high), ("high", ci.low))}
        ci = dataclasses.replace(ci, ratio=1 / ci.ratio, **turned)
    elif second == 0:
        ci = comparisons.ci_of(rows[lead - 1])
    else:
        ci = comparisons.ratio_between(runs, configs[lead], configs[second])
    order = tuple(configs[i] for i in ranked)
    tied = order[:1] if ci.separated and ci.ratio > 1 else order[:2]
    about = {"column": column, "point": point, **{k: point[k] for k in GROUP_KEYS}}
    kinds = ("best_setting", "best_setting", "best_setting_tied")
    return [ranking_record(comparisons.Ranking(order, tied, ci), about, kinds)]


def fastest_findings(page: Page) -> list[Finding | str]:
    """Per machine and model: the fastest configuration (or the tie), what limits it, what
    its operator profile says, the best precision and variant, and its batch scaling."""
    summary, runs, table = page.tables.summary, page.tables.runs, page.tables.comparisons
    phases = breakdown.phase_shares(summary)
    verdicts = roofline_verdicts(study_readings(page.tables))
    stated = [speedups.stated(speedups.pairs(table, c), c) for c in ("precision", "variant")]
    scaling = speedups.scaling(table)
    ok = ok_configs(summary)
    findings: list[Finding | str] = []
    for (machine, model), group in ok.groupby(["machine", "model"], sort=True):
        ranked = comparisons.ranking(group, runs)
        best = ranked.top
        about = {**{k: best[k] for k in GROUP_KEYS}, "machine": machine}
        findings.append(ranking_record(ranked, about, LEADERS))
        findings.append(breakdown.limit_record(best, phases, verdicts))
        profile = profile_to_quote(page.tables.opprofiles, group, best)
        findings.append(profile and operators.bound_record(profile, machine))
        findings += [r for records in stated for r in best_setting(best, records, ok, runs)]
        keys = ("machine", "device", "model", "precision", "variant")
        findings += [r for r in scaling if all(r.about[k] == best[k] for k in keys)][:1]
    return [f for f in findings if f is not None]


def key_findings(page: Page) -> list[Finding | str]:
    """The short list a newcomer reads first (NO_RESULTS when there is nothing to say)."""
    tables = page.tables
    findings = [*fastest_findings(page), input_pipeline.input_record(tables.summary)]
    if tables.profiles is not None and "busy_verdict" in tables.profiles:
        host_bound = tables.profiles[tables.profiles["busy_verdict"] == "host-bound"]
        rows = sort_configs(host_bound).to_dict("records")
        findings += [roofline.busy_record(row, tables.summary) for row in rows]
    if tables.training is not None and not tables.training.empty:
        rate = accuracy.throughput_column(tables.training)
        findings += accuracy.faster_but_later(tables.training, rate, tables.runs)
    findings += machines_compared.machine_comparison_findings(tables.comparisons)
    measured = not ok_configs(tables.summary).empty
    findings += [measured and measurement.cost_record(page), notes.flag_counts(page)]
    return [f for f in findings if f] or [NO_RESULTS]
