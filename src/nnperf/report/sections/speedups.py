"""The Speedups section: each precision against fp32 and each variant against the baseline
at the same batch size (`speedups`), and how throughput grows with batch size
(`batch_scaling`), with the sentences that state them."""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from nnperf.core.vocab import REFERENCE_PRECISION, REFERENCE_VARIANT
from nnperf.report.configurations import (
    CI_HIGH,
    CI_LOW,
    ESTIMATE,
    GROUP_KEYS,
    MEAN,
    REFERENCE,
    estimate_text,
    key_columns,
    ok_configs,
    sort_configs,
)
from nnperf.report.format import config_text, fmt, fmt_pct, fmt_times
from nnperf.report.outline import Page, Section, Table, section

# Throughput within 5% of the best batch size counts as saturated (a run-to-run spread of
# a few percent is normal, see the CV flag), so larger batches are not worth their memory.
SATURATION = 0.95


INTRO = (
    f"Ratios of mean throughputs: each precision against {REFERENCE_PRECISION} "
    f"and each variant against {REFERENCE_VARIANT} at the same batch size, and each "
    "configuration across batch sizes. Where the two 95% CIs overlap the difference is "
    "within the measured spread."
)


def speedups(summary: pd.DataFrame | None, column: str, reference: str) -> pd.DataFrame:
    """Each configuration's mean throughput over its counterpart with `column=reference`.

    `column` is `precision` (reference fp32) or `variant` (reference baseline). The result
    keeps both estimates (ESTIMATE, the reference's prefixed REFERENCE) and says whether
    the 95% CIs overlap: where they do, the difference is within the measured spread.
    """
    ok = ok_configs(summary)
    match = [k for k in GROUP_KEYS if k != column]
    columns = [
        *match,
        column,
        "reference",
        *ESTIMATE,
        *(REFERENCE + c for c in ESTIMATE),
        "speedup",
        "ci_overlap",
    ]
    if ok.empty:
        return pd.DataFrame(columns=columns)
    base = ok[ok[column] == reference][[*match, *ESTIMATE]].rename(
        columns={c: REFERENCE + c for c in ESTIMATE}
    )
    other = ok[ok[column] != reference][[*match, column, *ESTIMATE]]
    merged = other.merge(base, on=match, how="inner")
    merged["reference"] = reference
    merged["speedup"] = merged[MEAN] / merged[REFERENCE + MEAN]
    cis = [CI_LOW, CI_HIGH, REFERENCE + CI_LOW, REFERENCE + CI_HIGH]
    known = merged[cis].notna().all(axis=1)
    overlap = (merged[CI_LOW] <= merged[REFERENCE + CI_HIGH]) & (
        merged[REFERENCE + CI_LOW] <= merged[CI_HIGH]
    )
    merged["ci_overlap"] = overlap.where(known, other=pd.NA).astype("boolean")
    return sort_configs(merged[columns]).reset_index(drop=True)


def at_largest_batch(table: pd.DataFrame, column: str) -> pd.DataFrame:
    """One row per compared pair (machine, device, model, the other key, `column`): the one
    at the largest batch size both ran, where throughput differences matter most."""
    if table.empty:
        return table
    keys = [k for k in GROUP_KEYS if k != "batch_size"]
    largest = table.groupby(keys)["batch_size"].transform("max")
    return table[table["batch_size"] == largest]


def speedup_sentence(row: Mapping, column: str) -> str:
    """`bf16 is 1.80x faster than fp32 for resnet18_cifar at batch 256 (baseline) on M: ...`."""
    ratio = float(row["speedup"])
    factor = f"{max(ratio, 1 / ratio):.2f}x"
    if factor == "1.00x":
        how = "as fast as"  # "1.00x slower" would claim a difference its digits do not show
    else:
        how = f"{factor} {'faster' if ratio > 1 else 'slower'} than"
    if column == "precision":
        what = f"{row['precision']} is {how} {row['reference']} for " + config_text(
            row, precision=False
        )
    else:
        what = f"The {row['variant']} variant is {how} {row['reference']} for " + config_text(
            row, variant=False
        )
    text = f"{what} on {row['machine']}: {estimate_text(row)} vs {estimate_text(row, REFERENCE)}"
    if row.get("ci_overlap") is True:
        text += "; the 95% CIs overlap, so the difference is within the measured spread"
    return text + "."


def batch_scaling(summary: pd.DataFrame | None) -> pd.DataFrame:
    """Per (machine, device, model, precision, variant): how throughput grows with batch size.

    `gain` is the mean throughput at the largest batch that ran over that at the smallest;
    `saturation_batch_size` the smallest batch reaching 95% of the best throughput;
    `oom_batch_sizes` the batch sizes that ran out of memory and `over_budget_batch_sizes`
    those whose step was too slow to measure within `timing.max_seconds`.
    """
    keys = [k for k in GROUP_KEYS if k != "batch_size"]
    columns = [
        *keys,
        "smallest_batch_size",
        "largest_batch_size",
        "smallest_mean",
        "largest_mean",
        "gain",
        "best_batch_size",
        "best_mean",
        "saturation_batch_size",
        "oom_batch_sizes",
        "over_budget_batch_sizes",
    ]
    ok = ok_configs(summary)
    rows = []
    if summary is None or ok.empty:
        return pd.DataFrame(columns=columns)
    statuses = summary.assign(_status=summary.get("status", "ok").astype(str))
    for key, group in ok.groupby(keys, sort=True):
        group = group.sort_values("batch_size")
        if len(group) < 2:
            continue
        best = group.loc[group[MEAN].idxmax()]
        saturated = group[group[MEAN] >= SATURATION * best[MEAN]]
        same = statuses
        for k, v in zip(keys, key):
            same = same[same[k] == v]

        def batches(status: str) -> str:
            return " ".join(
                str(b)
                for b in sorted(int(b) for b in same.loc[same["_status"] == status, "batch_size"])
            )

        rows.append(
            {
                **dict(zip(keys, key)),
                "smallest_batch_size": int(group["batch_size"].iloc[0]),
                "largest_batch_size": int(group["batch_size"].iloc[-1]),
                "smallest_mean": float(group[MEAN].iloc[0]),
                "largest_mean": float(group[MEAN].iloc[-1]),
                "gain": float(group[MEAN].iloc[-1] / group[MEAN].iloc[0]),
                "best_batch_size": int(best["batch_size"]),
                "best_mean": float(best[MEAN]),
                "saturation_batch_size": int(saturated["batch_size"].iloc[0]),
                "oom_batch_sizes": batches("oom"),
                "over_budget_batch_sizes": batches("over_budget"),
            }
        )
    return sort_configs(pd.DataFrame(rows, columns=columns))


def scaling_sentence(row: Mapping) -> str:
    text = (
        f"For {config_text(row, batch=False)} on {row['machine']}, throughput changes "
        f"{fmt_times(row['gain'])} from batch {row['smallest_batch_size']} "
        f"({fmt(row['smallest_mean'], 'img/s')}) to batch {row['largest_batch_size']} "
        f"({fmt(row['largest_mean'], 'img/s')})"
    )
    if row["saturation_batch_size"] == row["largest_batch_size"]:
        text += "; it is still rising at the largest batch size that ran"
    else:
        text += (
            f"; batch {row['saturation_batch_size']} already reaches "
            f"{fmt_pct(SATURATION)} of the best ({fmt(row['best_mean'], 'img/s')} at "
            f"batch {row['best_batch_size']})"
        )
    if row["oom_batch_sizes"]:
        text += f"; batch {row['oom_batch_sizes'].replace(' ', ', ')} ran out of memory"
    if row.get("over_budget_batch_sizes"):
        text += (
            f"; batch {row['over_budget_batch_sizes'].replace(' ', ', ')} was too slow to "
            "measure within the time budget"
        )
    return text + "."


def speedup_display(table: pd.DataFrame, column: str) -> pd.DataFrame:
    if table.empty:
        return pd.DataFrame()
    keys = [k for k in GROUP_KEYS if k in table.columns]
    return pd.DataFrame(
        {
            **key_columns(table, keys),
            "Against": table["reference"].astype(str),
            "Speedup": [fmt_times(v) for v in table["speedup"]],
            "Mean (img/s)": [
                estimate_text(r).replace(" img/s", "") for r in table.to_dict("records")
            ],
            "Reference mean (img/s)": [
                estimate_text(r, REFERENCE).replace(" img/s", "") for r in table.to_dict("records")
            ],
            "CIs overlap": [
                "yes" if v is True else "no" if v is False else "n/a"
                for v in table["ci_overlap"].astype(object)
            ],
        }
    )


def scaling_display(table: pd.DataFrame) -> pd.DataFrame:
    if table.empty:
        return pd.DataFrame()
    keys = [k for k in GROUP_KEYS if k != "batch_size"]
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
            "Gain": [fmt_times(v) for v in table["gain"]],
            "Best batch": table["best_batch_size"].astype(int),
            "95% of best from batch": table["saturation_batch_size"].astype(int),
            "OOM batches": table["oom_batch_sizes"].astype(str),
            "Over-budget batches": table["over_budget_batch_sizes"].astype(str),
        }
    )


def precision_speedups(summary: pd.DataFrame | None) -> pd.DataFrame:
    return speedups(summary, "precision", REFERENCE_PRECISION)


def variant_speedups(summary: pd.DataFrame | None) -> pd.DataFrame:
    return speedups(summary, "variant", REFERENCE_VARIANT)


def build(page: Page) -> Section:
    summary = page.tables.summary
    precision_table = precision_speedups(summary)
    variant_table = variant_speedups(summary)
    scaling = batch_scaling(summary)
    findings = [
        speedup_sentence(r, "precision")
        for r in at_largest_batch(precision_table, "precision").to_dict("records")
    ]
    findings += [
        speedup_sentence(r, "variant")
        for r in at_largest_batch(variant_table, "variant").to_dict("records")
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
        sources=page.sources("summary"),
    )
