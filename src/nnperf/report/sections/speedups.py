"""The Speedups section: each precision against fp32 and each variant against the baseline at
the same batch size, and how throughput grows with batch size, from comparisons.csv alone."""

from __future__ import annotations

import pandas as pd

from nnperf.core.ratios import OUT_OF_REACH
from nnperf.core.vocab import REFERENCE_PRECISION, REFERENCE_VARIANT
from nnperf.report.comparisons import ci_of, interval_cell
from nnperf.report.findings import Finding
from nnperf.report.format import GROUP_KEYS, KEY_LABELS, fmt, fmt_times, sort_configs
from nnperf.report.outline import Page, Section, Table, section
from nnperf.report.wording.findings import side

SCALING_KEYS = [k for k in GROUP_KEYS if k != "batch_size"]

INTRO = (
    f"Throughput ratios: each precision against {REFERENCE_PRECISION} and each variant "
    f"against {REFERENCE_VARIANT} at the same batch size, and each configuration across batch "
    "sizes (comparisons.csv). Each ratio has its own 95% CI from the worker processes: paired "
    "by round where the two ran interleaved in one job, unpaired (Fieller's interval) "
    "otherwise. Where that CI includes 1 the two are not separated; a comparison whose CI is "
    "also wider than the CI target around 1 is unresolved, and out of reach where the rounds "
    "both configurations' budgets still fit could not have resolved it (the measurement "
    "stopped there)."
)


def pairs(table: pd.DataFrame | None, kind: str) -> pd.DataFrame:
    """The `vs_reference` rows of `kind` (precision or variant), A's keys as plain columns."""
    if table is None or table.empty:
        return pd.DataFrame(columns=[*GROUP_KEYS, "reference"])
    rows = table[(table["kind"] == kind) & (table["pair"] == "vs_reference")]
    records = [{**r, **side(r, "a"), "reference": r[f"b_{kind}"]} for r in rows.to_dict("records")]
    return sort_configs(pd.DataFrame(records, columns=[*table.columns, *GROUP_KEYS, "reference"]))


def stated(table: pd.DataFrame, column: str) -> list[Finding]:
    """Every pair at its largest batch size, and below it those unresolved or out of reach."""
    if table.empty:
        return []
    most = table.groupby(SCALING_KEYS, dropna=False)["batch_size"].transform("max")
    largest = table["batch_size"] == most
    left_open = table["verdict"].isin(["unresolved", OUT_OF_REACH])
    rows = pd.concat([table[largest], table[~largest & left_open]])
    return [Finding("speedup", {"row": r, "column": column}) for r in rows.to_dict("records")]


def scaling(table: pd.DataFrame | None) -> list[Finding]:
    """Per (machine, device, model, precision, variant) that ran several batch sizes: the
    largest against the smallest (`gain`) and the leader against every other (`tops`)."""
    batch = pd.DataFrame() if table is None or table.empty else table[table["kind"] == "batch"]
    groups: dict[tuple, dict] = {}
    for row in batch.to_dict("records"):
        a = {k: side(row, "a")[k] for k in SCALING_KEYS}
        entry = groups.setdefault(tuple(map(str, a.values())), {**a, "gain": None, "tops": []})
        if row["pair"] == "largest_vs_smallest":
            entry["gain"] = row
        else:
            entry["tops"].append(row)
    found = pd.DataFrame(list(groups.values()), columns=[*SCALING_KEYS, "gain", "tops"])
    rows = sort_configs(found).to_dict("records")
    return [Finding("batch_scaling", r) for r in rows if r["gain"] is not None]


def ratio_display(table: pd.DataFrame, column: str) -> pd.DataFrame:
    if table.empty:
        return pd.DataFrame()
    records = table.to_dict("records")
    return pd.DataFrame(
        {
            **{KEY_LABELS[k]: [side(r, "a")[k] for r in records] for k in GROUP_KEYS},
            f"Against {KEY_LABELS[column].lower()}": [r[f"b_{column}"] for r in records],
            "Ratio": [fmt_times(r["ratio"]) for r in records],
            "95% CI": [interval_cell(ci_of(r)) for r in records],
            "CI from": table["method"].tolist(),
            "Verdict": table["verdict"].tolist(),
            **{f"{s} (img/s)": [fmt(v) for v in table[f"{s.lower()}_value"]] for s in "AB"},
        }
    )


def build(page: Page) -> Section:
    table = page.tables.comparisons
    precision, variant = pairs(table, "precision"), pairs(table, "variant")
    batch = pd.DataFrame() if table is None else table[table["kind"] == "batch"]
    # The largest against the smallest is often also the leader against the smallest.
    batch = batch.drop_duplicates([c for c in batch.columns if c.startswith(("a_", "b_"))])
    shown = {
        f"Precisions against {REFERENCE_PRECISION}": ratio_display(precision, "precision"),
        f"Variants against {REFERENCE_VARIANT}": ratio_display(variant, "variant"),
        "Batch-size scaling": ratio_display(batch, "batch_size"),
    }
    return section(
        "speedups",
        "Speedups",
        intro=INTRO,
        findings=stated(precision, "precision") + stated(variant, "variant") + scaling(table),
        tables=[Table(caption, page.drop(frame)) for caption, frame in shown.items()],
        figures=page.figures_of("speedups"),
        sources=page.sources("comparisons"),
    )
