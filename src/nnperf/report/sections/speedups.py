"""The Speedups section: each precision against fp32 and each variant against the baseline
at the same batch size (`speedups`), and how throughput grows with batch size
(`batch_scaling`), with the sentences that state them.

Every ratio carries its 95% interval from the worker processes (`nnperf.report.comparisons`:
paired by round where the two were interleaved in one job, Fieller's otherwise), and every
sentence says it or "not separated" (`comparisons.describe`). A best batch size is named only
where the tie rule separates it (`comparisons.ranking`), and a batch "already reaches 95% of
the best" only where the whole interval says so.
"""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from nnperf.core.vocab import REFERENCE_PRECISION, REFERENCE_VARIANT
from nnperf.report import comparisons, noise
from nnperf.report.comparisons import ci_from, interval_cell, method_label, separation_cell
from nnperf.report.configurations import (
    ESTIMATE,
    GROUP_KEYS,
    MEAN,
    REFERENCE,
    estimate_text,
    key_columns,
    ok_configs,
    sort_configs,
)
from nnperf.core.wording import missing
from nnperf.report.format import config_text, fmt, fmt_pct, fmt_times
from nnperf.report.outline import Page, Section, Table, section

# A batch size whose throughput is, over its whole 95% interval, at least this fraction of
# the top batch size's counts as saturated (a run-to-run spread of a few percent is normal,
# see the CV flag), so larger batches are not worth their memory.
SATURATION = 0.95
# Column prefixes of the ratios in the tables (`RatioCI.as_dict`).
SPEEDUP, GAIN, BEST, SATURATED = "speedup", "gain", "best_vs_next", "saturation"
# Why a pair's comparison stayed unresolved (`nnperf.report.noise.unresolved_comparison`).
UNRESOLVED = "speedup_unresolved"
TARGET = "ci_target"


INTRO = (
    f"Throughput ratios: each precision against {REFERENCE_PRECISION} "
    f"and each variant against {REFERENCE_VARIANT} at the same batch size, and each "
    "configuration across batch sizes. Each ratio has its own 95% CI, built from the worker "
    "processes: paired by round where the two configurations ran interleaved in one job (the "
    "ratio is then the geometric mean of the per-round ratios), unpaired (the ratio of the "
    "means, with Fieller's interval) otherwise. Where that CI includes 1 the two are not "
    "separated: no difference is detectable at the measured spread. A comparison left "
    "unresolved (not separated, and its CI wider than the CI target around 1) says why."
)


def ratio_columns(prefix: str) -> list[str]:
    return list(comparisons.RatioCI(1.0, None, None, None, 0).as_dict(prefix))


def _target(row: Mapping) -> float:
    """What counts as "no difference" for a pair: the stricter of the two CI targets
    (`nnperf.engine.interleave.tolerance`), the fallback where summary.csv has none."""
    targets = [row.get(TARGET), row.get(REFERENCE + TARGET)]
    known = [float(t) for t in targets if not missing(t) and float(t) > 0]
    return min(known) if known else noise.FALLBACK_TARGET


def _pair_ratio(row: Mapping, runs: pd.DataFrame | None, column: str) -> dict:
    """The ratio columns of one compared pair: the row's throughput over its reference's,
    and why it stayed unresolved where it did (`UNRESOLVED`)."""
    reference = {**row, column: row["reference"]}
    rates, reference_rates = (
        comparisons.process_rates(runs, row),
        comparisons.process_rates(runs, reference),
    )
    ci = comparisons.ratio_of_rates(rates, reference_rates)
    why = comparisons.unresolved_text(rates, reference_rates, ci, _target(row))
    ci = comparisons.with_mean_ratio(ci, row[MEAN] / row[REFERENCE + MEAN])
    return {**ci.as_dict(SPEEDUP), UNRESOLVED: why}


def speedups(
    summary: pd.DataFrame | None,
    column: str,
    reference: str,
    runs: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Each configuration's throughput over its counterpart with `column=reference`.

    `column` is `precision` (reference fp32) or `variant` (reference baseline). The result
    keeps both estimates (ESTIMATE, the reference's prefixed REFERENCE) and the ratio with
    its interval from the processes of `runs` (`speedup`, `speedup_ci_low`, ...,
    `speedup_separated`); without runs the ratio is that of the means, with no interval.
    """
    ok = ok_configs(summary)
    match = [k for k in GROUP_KEYS if k != column]
    columns = [
        *match,
        column,
        "reference",
        *ESTIMATE,
        *(REFERENCE + c for c in ESTIMATE),
        *ratio_columns(SPEEDUP),
        UNRESOLVED,
    ]
    if ok.empty:
        return pd.DataFrame(columns=columns)
    estimate = [*ESTIMATE, *([TARGET] if TARGET in ok.columns else [])]
    base = ok[ok[column] == reference][[*match, *estimate]].rename(
        columns={c: REFERENCE + c for c in estimate}
    )
    other = ok[ok[column] != reference][[*match, column, *estimate]]
    merged = other.merge(base, on=match, how="inner")
    merged["reference"] = reference
    if merged.empty:
        return pd.DataFrame(columns=columns)
    ratios = pd.DataFrame(
        [_pair_ratio(r, runs, column) for r in merged.to_dict("records")], index=merged.index
    )
    merged = pd.concat([merged, ratios], axis=1)
    return sort_configs(merged[columns]).reset_index(drop=True)


def at_largest_batch(table: pd.DataFrame, column: str) -> pd.DataFrame:
    """One row per compared pair (machine, device, model, the other key, `column`): the one
    at the largest batch size both ran, where throughput differences matter most."""
    if table.empty:
        return table
    keys = [k for k in GROUP_KEYS if k != "batch_size"]
    largest = table.groupby(keys)["batch_size"].transform("max")
    return table[table["batch_size"] == largest]


def unresolved_below_largest(table: pd.DataFrame, column: str) -> pd.DataFrame:
    """The pairs below the largest batch size whose comparison stayed unresolved: the
    findings quote every pair at the largest batch, and these too, with why."""
    if table.empty:
        return table
    largest = at_largest_batch(table, column)
    rest = table.drop(index=largest.index)
    return rest[~rest[UNRESOLVED].map(missing).astype(bool)]


def speedup_sentence(row: Mapping, column: str) -> str:
    """`bf16 is 1.80x faster (95% CI 1.78-1.82) than fp32 for resnet18_cifar at batch 256
    (baseline) on M: ...`, or `bf16 vs fp32 for ...: no difference detectable: within ±4%
    (...)` where the interval includes 1."""
    ci = ci_from(row, SPEEDUP)
    if column == "precision":
        subject, config = row["precision"], config_text(row, precision=False)
    else:
        subject, config = f"The {row['variant']} variant", config_text(row, variant=False)
    if ci.separated:
        text = f"{subject} is {comparisons.describe(ci)} than {row['reference']} for {config}"
        text += f" on {row['machine']}: "
    else:
        text = f"{subject} vs {row['reference']} for {config} on {row['machine']}: "
        text += f"{comparisons.describe(ci)}; "
    text += f"{estimate_text(row)} vs {estimate_text(row, REFERENCE)}."
    why = row.get(UNRESOLVED)
    return text if missing(why) else f"{text} {why}"


def _batches_with(statuses: pd.DataFrame, keys: list, key: tuple, status: str) -> str:
    """The batch sizes of one scaling group (`keys` = `key`) whose runs ended in `status`."""
    same = statuses
    for k, v in zip(keys, key):
        same = same[same[k] == v]
    chosen = same.loc[same["_status"] == status, "batch_size"]
    return " ".join(str(b) for b in sorted(int(b) for b in chosen))


def _saturation(group: pd.DataFrame, top: Mapping, runs: pd.DataFrame | None) -> dict:
    """The smallest batch size below the top one whose throughput is, over its whole
    interval, at least SATURATION of the top's, with that ratio (None where none is)."""
    for row in group.to_dict("records"):
        if int(row["batch_size"]) >= int(top["batch_size"]):
            break
        ci = comparisons.ratio_between(runs, row, top)
        if ci.bounded and ci.low >= SATURATION:
            return {"saturation_batch_size": int(row["batch_size"]), **ci.as_dict(SATURATED)}
    return {"saturation_batch_size": None, **dict.fromkeys(ratio_columns(SATURATED))}


def _scaling_row(group: pd.DataFrame, runs: pd.DataFrame | None) -> dict:
    """The ratios of one (machine, device, model, precision, variant) across batch sizes."""
    smallest, largest = group.iloc[0].to_dict(), group.iloc[-1].to_dict()
    gain = comparisons.ratio_between(runs, largest, smallest)
    gain = comparisons.with_mean_ratio(gain, largest[MEAN] / smallest[MEAN])
    ranked = comparisons.ranking(group, runs)
    top, runner_up = ranked.order[0], ranked.order[1]
    best_ci = ranked.ci if ranked.ci is not None else comparisons.RatioCI(1.0, None, None, None, 0)
    best_ci = comparisons.with_mean_ratio(best_ci, top[MEAN] / runner_up[MEAN])
    return {
        "smallest_batch_size": int(smallest["batch_size"]),
        "largest_batch_size": int(largest["batch_size"]),
        "smallest_mean": float(smallest[MEAN]),
        "largest_mean": float(largest[MEAN]),
        **gain.as_dict(GAIN),
        "best_batch_size": int(top["batch_size"]) if ranked.best is not None else None,
        "tied_batch_sizes": (
            " ".join(str(b) for b in sorted(int(r["batch_size"]) for r in ranked.tied))
            if ranked.best is None
            else ""
        ),
        "top_batch_size": int(top["batch_size"]),
        "top_mean": float(top[MEAN]),
        "next_batch_size": int(runner_up["batch_size"]),
        **best_ci.as_dict(BEST),
        **_saturation(group, top, runs),
    }


def batch_scaling(summary: pd.DataFrame | None, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (machine, device, model, precision, variant): how throughput grows with batch size.

    `gain` is the throughput at the largest batch that ran over that at the smallest, with
    its interval (`gain_ci_low`, ...); `top_batch_size` has the highest mean, and is the
    `best_batch_size` only where separated from the runner-up (`next_batch_size`, ratio
    `best_vs_next`), else `tied_batch_sizes` lists the tie; `saturation_batch_size` is the
    smallest batch whose whole interval against the top reaches SATURATION (None: none
    does); `oom_batch_sizes` ran out of memory and `over_budget_batch_sizes` were too slow
    to measure within `timing.max_seconds`.
    """
    keys = [k for k in GROUP_KEYS if k != "batch_size"]
    columns = [
        *keys,
        *("smallest_batch_size", "largest_batch_size", "smallest_mean", "largest_mean"),
        *ratio_columns(GAIN),
        *("best_batch_size", "tied_batch_sizes", "top_batch_size", "top_mean"),
        "next_batch_size",
        *ratio_columns(BEST),
        "saturation_batch_size",
        *ratio_columns(SATURATED),
        "oom_batch_sizes",
        "over_budget_batch_sizes",
    ]
    ok = ok_configs(summary)
    if summary is None or ok.empty:
        return pd.DataFrame(columns=columns)
    statuses = summary.assign(_status=summary.get("status", "ok").astype(str))
    rows = []
    for key, group in ok.groupby(keys, sort=True):
        if len(group) < 2:
            continue
        rows.append(
            {
                **dict(zip(keys, key)),
                **_scaling_row(group.sort_values("batch_size"), runs),
                "oom_batch_sizes": _batches_with(statuses, keys, key, "oom"),
                "over_budget_batch_sizes": _batches_with(statuses, keys, key, "over_budget"),
            }
        )
    return sort_configs(pd.DataFrame(rows, columns=columns))


def _best_batch_text(row: Mapping) -> str:
    """What the tie rule allows to be said of the best batch size (the ratio of the top to
    the runner-up, unless it is the smallest-to-largest ratio the sentence just stated)."""
    top, runner_up = int(row["top_batch_size"]), int(row["next_batch_size"])
    stated = {top, runner_up} == {int(row["smallest_batch_size"]), int(row["largest_batch_size"])}
    ratio = f"batch {top} vs {runner_up}: {comparisons.describe(ci_from(row, BEST))}"
    if row.get("tied_batch_sizes"):
        tied = row["tied_batch_sizes"].split()
        text = f"no best batch size: batch {', '.join(tied[:-1])} and {tied[-1]} are tied"
    elif top == int(row["largest_batch_size"]):
        text = "it is still rising at the largest batch size that ran"
    else:
        text = f"batch {top} is the best, at {fmt(row['top_mean'], 'img/s')}"
    return text if stated else f"{text} ({ratio})"


def scaling_sentence(row: Mapping) -> str:
    gain = ci_from(row, GAIN)
    text = (
        f"For {config_text(row, batch=False)} on {row['machine']}, batch "
        f"{row['largest_batch_size']} against batch {row['smallest_batch_size']} "
        f"({fmt(row['largest_mean'], 'img/s')} vs {fmt(row['smallest_mean'], 'img/s')}): "
        f"{comparisons.describe(gain, 'higher')}; {_best_batch_text(row)}"
    )
    saturation = ci_from(row, SATURATED)
    if not missing(row.get("saturation_batch_size")) and saturation.bounded:
        text += (
            f"; batch {int(row['saturation_batch_size'])} already reaches "
            f"{fmt_pct(SATURATION)} of batch {row['top_batch_size']} ({saturation.ratio:.2f}x "
            f"of it, 95% CI {saturation.low:.2f}-{saturation.high:.2f})"
        )
    if row["oom_batch_sizes"]:
        text += f"; batch {row['oom_batch_sizes'].replace(' ', ', ')} ran out of memory"
    if row.get("over_budget_batch_sizes"):
        text += (
            f"; batch {row['over_budget_batch_sizes'].replace(' ', ', ')} was too slow to "
            "measure within the time budget"
        )
    return text + "."


def _ratio_cells(table: pd.DataFrame, prefix: str) -> tuple[list, list, list]:
    """(95% CI, pairing, separated or not) cells of the ratios under `prefix`."""
    cis = [ci_from(r, prefix) for r in table.to_dict("records")]
    return (
        [interval_cell(ci) for ci in cis],
        [method_label(ci) for ci in cis],
        [separation_cell(ci) for ci in cis],
    )


def speedup_display(table: pd.DataFrame, column: str) -> pd.DataFrame:
    if table.empty:
        return pd.DataFrame()
    keys = [k for k in GROUP_KEYS if k in table.columns]
    interval, pairing, separated = _ratio_cells(table, SPEEDUP)
    return pd.DataFrame(
        {
            **key_columns(table, keys),
            "Against": table["reference"].astype(str),
            "Speedup": [fmt_times(v) for v in table[SPEEDUP]],
            "95% CI": interval,
            "CI from": pairing,
            "Difference": separated,
            "Mean (img/s)": [
                estimate_text(r).replace(" img/s", "") for r in table.to_dict("records")
            ],
            "Reference mean (img/s)": [
                estimate_text(r, REFERENCE).replace(" img/s", "") for r in table.to_dict("records")
            ],
        }
    )


def _best_cell(row: Mapping) -> str:
    if row.get("tied_batch_sizes"):
        return "tied: " + row["tied_batch_sizes"].replace(" ", ", ")
    return str(int(row["best_batch_size"]))


def scaling_display(table: pd.DataFrame) -> pd.DataFrame:
    if table.empty:
        return pd.DataFrame()
    keys = [k for k in GROUP_KEYS if k != "batch_size"]
    interval, _, separated = _ratio_cells(table, GAIN)
    records = table.to_dict("records")
    return pd.DataFrame(
        {
            **key_columns(table, keys),
            "Batch range": [
                f"{a}–{b}"
                for a, b in zip(table["smallest_batch_size"], table["largest_batch_size"])
            ],
            "Mean throughput (img/s)": [
                f"{fmt(a)} → {fmt(b)}"
                for a, b in zip(table["smallest_mean"], table["largest_mean"])
            ],
            "Gain": [fmt_times(v) for v in table[GAIN]],
            "Gain 95% CI": interval,
            "Gain difference": separated,
            "Best batch": [_best_cell(r) for r in records],
            "95% of best from batch": [
                "n/a" if missing(v) else str(int(v)) for v in table["saturation_batch_size"]
            ],
            "OOM batches": table["oom_batch_sizes"].astype(str),
            "Over-budget batches": table["over_budget_batch_sizes"].astype(str),
        }
    )


def precision_speedups(summary: pd.DataFrame | None, runs: pd.DataFrame | None) -> pd.DataFrame:
    return speedups(summary, "precision", REFERENCE_PRECISION, runs)


def variant_speedups(summary: pd.DataFrame | None, runs: pd.DataFrame | None) -> pd.DataFrame:
    return speedups(summary, "variant", REFERENCE_VARIANT, runs)


def build(page: Page) -> Section:
    summary, runs = page.tables.summary, page.tables.runs
    precision_table = precision_speedups(summary, runs)
    variant_table = variant_speedups(summary, runs)
    scaling = batch_scaling(summary, runs)
    findings = [
        speedup_sentence(r, "precision")
        for r in at_largest_batch(precision_table, "precision").to_dict("records")
    ]
    findings += [
        speedup_sentence(r, "variant")
        for r in at_largest_batch(variant_table, "variant").to_dict("records")
    ]
    findings += [
        speedup_sentence(r, column)
        for column, table in (("precision", precision_table), ("variant", variant_table))
        for r in unresolved_below_largest(table, column).to_dict("records")
    ]
    findings += [scaling_sentence(r) for r in scaling.to_dict("records")]
    return section(
        "speedups",
        "Speedups",
        intro=INTRO,
        findings=findings,
        tables=(
            Table(
                f"Precisions against {REFERENCE_PRECISION}",
                page.drop(speedup_display(precision_table, "precision")),
            ),
            Table(
                f"Variants against {REFERENCE_VARIANT}",
                page.drop(speedup_display(variant_table, "variant")),
            ),
            Table("Batch-size scaling", page.drop(scaling_display(scaling))),
        ),
        figures=page.figures_of("speedups"),
        sources=page.sources("summary", "runs"),
    )
