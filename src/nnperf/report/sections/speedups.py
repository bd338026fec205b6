"""The Speedups section: each precision against fp32 and each variant against the baseline
at the same batch size, and how throughput grows with batch size, with the sentences that
state them.

It reads comparisons.csv alone (`nnperf.report.comparisons.comparisons_table`): every ratio
there carries its 95% interval from the worker processes and a `verdict`, and a sentence says
the interval or "not separated" (`comparisons.describe`). A best batch size is named only where
the leader of its batch sizes is faster than every other (the tie rule), and a batch "already
reaches 95% of the best" only where the whole interval says so.
"""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from nnperf.core.vocab import REFERENCE_PRECISION, REFERENCE_VARIANT
from nnperf.core.wording import missing
from nnperf.report import comparisons
from nnperf.report.comparisons import PAIR_KEYS, ci_of, interval_cell
from nnperf.report.configurations import KEY_LABELS, sort_configs
from nnperf.report.format import config_text, fmt, fmt_pct, fmt_times
from nnperf.report.outline import Page, Section, Table, section

# A batch size whose throughput is, over its whole 95% interval, at least this fraction of
# the top batch size's counts as saturated (a run-to-run spread of a few percent is normal,
# see the CV flag), so larger batches are not worth their memory.
SATURATION = 0.95
SCALING_KEYS = [k for k in PAIR_KEYS if k != "batch_size"]

INTRO = (
    f"Throughput ratios: each precision against {REFERENCE_PRECISION} and each variant "
    f"against {REFERENCE_VARIANT} at the same batch size, and each configuration across batch "
    "sizes (comparisons.csv). Each ratio has its own 95% CI from the worker processes: paired "
    "by round where the two ran interleaved in one job, unpaired (Fieller's interval) "
    "otherwise. Where that CI includes 1 the two are not separated; a comparison whose CI is "
    "also wider than the CI target around 1 is unresolved."
)


def _side(row: Mapping, side: str) -> dict:
    """One side's keys of a comparisons.csv row (`a` or `b`), named as summary.csv names them."""
    return {k: row.get(f"{side}_{k}") for k in PAIR_KEYS}


def pairs(table: pd.DataFrame | None, kind: str) -> pd.DataFrame:
    """The `vs_reference` rows of `kind` (precision or variant) with A's keys as plain
    columns, the reference as `reference`, largest batch last within a pair."""
    if table is None or table.empty:
        return pd.DataFrame(columns=[*PAIR_KEYS, "reference"])
    rows = table[(table["kind"] == kind) & (table["pair"] == "vs_reference")]
    records = [{**r, **_side(r, "a"), "reference": r[f"b_{kind}"]} for r in rows.to_dict("records")]
    return sort_configs(pd.DataFrame(records, columns=[*table.columns, *PAIR_KEYS, "reference"]))


def at_largest_batch(table: pd.DataFrame) -> pd.DataFrame:
    """One row per compared pair: the one at the largest batch size both ran."""
    if table.empty:
        return table
    largest = table.groupby(SCALING_KEYS, dropna=False)["batch_size"].transform("max")
    return table[table["batch_size"] == largest]


def stated(table: pd.DataFrame) -> pd.DataFrame:
    """The pairs the section states: every one at its largest batch size, and below it those
    left unresolved."""
    if table.empty:
        return table
    largest = at_largest_batch(table)
    rest = table.drop(index=largest.index)
    return pd.concat([largest, rest[rest["verdict"] == "unresolved"]])


def _unresolved_text(row: Mapping) -> str:
    if row.get("verdict") != "unresolved":
        return ""
    return (
        f" Unresolved: its CI reaches beyond the ±{fmt_pct(row['ci_target'])} target around 1 "
        f"after {int(row['rounds'])} {'rounds' if row['method'] == 'paired' else 'processes'}."
    )


def speedup_sentence(row: Mapping, column: str) -> str:
    """`bf16 is 1.80x faster (95% CI 1.78-1.82) than fp32 for resnet18_cifar at batch 256
    (baseline) on M: ...`, or `bf16 vs fp32 for ...: not separated ...` where the
    interval includes 1."""
    ci, a = ci_of(row), _side(row, "a")
    if column == "precision":
        subject, config = a["precision"], config_text(a, precision=False)
    else:
        subject, config = f"The {a['variant']} variant", config_text(a, variant=False)
    means = f"{fmt(row['a_value'], 'img/s')} vs {fmt(row['b_value'], 'img/s')}"
    where = f"for {config} on {a['machine']}"
    if ci.separated:
        text = f"{subject} is {comparisons.ratio_text(ci)} than {row[f'b_{column}']} {where}: "
        text += f"{means}."
    else:
        text = f"{subject} vs {row[f'b_{column}']} {where}: {comparisons.ratio_text(ci)}; {means}."
    return text + _unresolved_text(row)


def scaling(table: pd.DataFrame | None) -> pd.DataFrame:
    """Per (machine, device, model, precision, variant) that ran several batch sizes: the
    largest against the smallest (`gain`) and the leader against every other (`tops`),
    both comparisons.csv rows."""
    columns = [*SCALING_KEYS, "gain", "tops"]
    if table is None or table.empty:
        return pd.DataFrame(columns=columns)
    batch = table[table["kind"] == "batch"].to_dict("records")
    groups: dict[tuple, dict] = {}
    for row in batch:
        a = _side(row, "a")
        entry = groups.setdefault(
            tuple(str(a[k]) for k in SCALING_KEYS),
            {**{k: a[k] for k in SCALING_KEYS}, "gain": None, "tops": []},
        )
        if row["pair"] == "largest_vs_smallest":
            entry["gain"] = row
        else:
            entry["tops"].append(row)
    return sort_configs(pd.DataFrame(list(groups.values()), columns=columns))


def _best_batch_text(tops: list[Mapping], largest: int) -> str:
    """What the tie rule allows to be said of the best batch size."""
    if not tops:
        return ""
    top = int(tops[0]["a_batch_size"])
    tied = sorted({top, *(int(r["b_batch_size"]) for r in tops if r["verdict"] != "faster")})
    closest = min(tops, key=lambda r: float(r["ratio"]))
    ratio = f"batch {top} vs {int(closest['b_batch_size'])}: {comparisons.ratio_text(ci_of(closest))}"
    if len(tied) > 1:
        names = ", ".join(str(b) for b in tied[:-1])
        return f"; no best batch size: batch {names} and {tied[-1]} are tied ({ratio})"
    if top == largest:
        return f"; it is still rising at the largest batch size that ran ({ratio})"
    return f"; batch {top} is the best, at {fmt(tops[0]['a_value'], 'img/s')} ({ratio})"


def _saturation_text(tops: list[Mapping]) -> str:
    """The smallest batch size whose whole interval reaches SATURATION of the leader's."""
    reaching = [
        r for r in tops if not missing(r["ci95_high"]) and float(r["ci95_high"]) <= 1 / SATURATION
    ]
    if not reaching:
        return ""
    row = min(reaching, key=lambda r: int(r["b_batch_size"]))
    return (
        f"; batch {int(row['b_batch_size'])} already reaches {fmt_pct(SATURATION)} of batch "
        f"{int(row['a_batch_size'])} (that one is {fmt_times(row['ratio'])} of it, 95% CI "
        f"{interval_cell(ci_of(row))})"
    )


def scaling_sentence(row: Mapping) -> str:
    gain, tops = row["gain"], list(row["tops"])
    largest = int(gain["a_batch_size"])
    text = (
        f"For {config_text(row, batch=False)} on {row['machine']}, batch {largest} against "
        f"batch {int(gain['b_batch_size'])} ({fmt(gain['a_value'], 'img/s')} vs "
        f"{fmt(gain['b_value'], 'img/s')}): {comparisons.ratio_text(ci_of(gain), 'higher')}"
    )
    return text + _best_batch_text(tops, largest) + _saturation_text(tops) + "."


def ratio_display(table: pd.DataFrame, column: str) -> pd.DataFrame:
    """comparisons.csv rows as a table: A's keys, what B is, the ratio and its interval."""
    if table.empty:
        return pd.DataFrame()
    records = table.to_dict("records")
    cis = [ci_of(r) for r in records]
    return pd.DataFrame(
        {
            **{KEY_LABELS[k]: [_side(r, "a")[k] for r in records] for k in PAIR_KEYS},
            f"Against {KEY_LABELS[column].lower()}": [r[f"b_{column}"] for r in records],
            "Ratio": [fmt_times(r["ratio"]) for r in records],
            "95% CI": [interval_cell(ci) for ci in cis],
            "CI from": table["method"].tolist(),
            "Verdict": table["verdict"].tolist(),
            "A (img/s)": [fmt(v) for v in table["a_value"]],
            "B (img/s)": [fmt(v) for v in table["b_value"]],
        }
    )


def build(page: Page) -> Section:
    table = page.tables.comparisons
    precision, variant = pairs(table, "precision"), pairs(table, "variant")
    findings = [speedup_sentence(r, "precision") for r in stated(precision).to_dict("records")]
    findings += [speedup_sentence(r, "variant") for r in stated(variant).to_dict("records")]
    findings += [
        scaling_sentence(r) for r in scaling(table).to_dict("records") if r["gain"] is not None
    ]
    batch = pd.DataFrame() if table is None else table[table["kind"] == "batch"]
    # The largest against the smallest is often also the leader against the smallest.
    batch = batch.drop_duplicates([c for c in batch.columns if c.startswith(("a_", "b_"))])
    return section(
        "speedups",
        "Speedups",
        intro=INTRO,
        findings=findings,
        tables=(
            Table(
                f"Precisions against {REFERENCE_PRECISION}",
                page.drop(ratio_display(precision, "precision")),
            ),
            Table(
                f"Variants against {REFERENCE_VARIANT}",
                page.drop(ratio_display(variant, "variant")),
            ),
            Table(
                "Batch-size scaling",
                page.drop(ratio_display(batch, "batch_size")),
            ),
        ),
        figures=page.figures_of("speedups"),
        sources=page.sources("comparisons"),
    )
