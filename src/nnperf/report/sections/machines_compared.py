"""The Machines compared section: every `machine` row of comparisons.csv (a configuration's
fastest machine against each other one) as a table, and per model one finding on the
configuration most machines ran (`stated`). The ratios are unpaired: machines run apart.
"""

from __future__ import annotations

import pandas as pd

from nnperf.core.vocab import REFERENCE_PRECISION, REFERENCE_VARIANT
from nnperf.report import comparisons
from nnperf.report.findings import Finding
from nnperf.report.outline import Page, Section, Table, section
from nnperf.report.sections.speedups import ratio_display

INTRO = (
    "The same configurations on every machine whose results were merged (comparisons.csv): "
    "the fastest machine against each other one, each ratio with its 95% CI (unpaired: the "
    "machines were measured apart)."
)
# Several machines but no rows: said, so a hand-run render of folders whose comparisons.csv
# was written apart does not leave the section silently empty.
NO_ROWS = (
    "comparisons.csv compares no machines: they share no configuration, or it was written "
    "without the other machines' folders (report.extra_results, rule comparisons_table)."
)
CONFIG = ["a_model", "a_precision", "a_batch_size", "a_variant"]


def machine_rows(table: pd.DataFrame | None) -> pd.DataFrame:
    if table is None or table.empty:
        return pd.DataFrame(columns=list(comparisons.COLUMNS))
    return table[table["kind"] == "machine"]


def stated(rows: pd.DataFrame) -> pd.DataFrame:
    """Of one model's rows, those of the configuration most machines ran: fp32 first, then
    the baseline, then the largest batch."""
    ranked = rows.assign(
        _others=rows.groupby(CONFIG)["kind"].transform("size"),
        _fp32=rows["a_precision"] != REFERENCE_PRECISION,
        _base=rows["a_variant"] != REFERENCE_VARIANT,
    )
    order = ["_others", "_fp32", "_base", "a_batch_size"]
    first = ranked.sort_values(order, ascending=[0, 1, 1, 0]).iloc[0]
    return rows[(rows[CONFIG] == first[CONFIG]).all(axis=1)]


def machine_record(rows: pd.DataFrame) -> Finding:
    """One configuration's rows, the runner-up first and the slowest last (a row without a
    ratio last): fastest where every row's verdict is `faster`, else tied."""
    rows = rows.sort_values("ratio", na_position="last", kind="stable").to_dict("records")
    kind = "machine_tied" if any(r["verdict"] != "faster" for r in rows) else "machine_fastest"
    return Finding(kind, {"rows": rows})


def machine_comparison_findings(table: pd.DataFrame | None) -> list[Finding]:
    return [machine_record(stated(g)) for _, g in machine_rows(table).groupby("a_model", sort=True)]


def build(page: Page) -> Section | None:
    if len(page.machines) <= 1 and not page.figures_of("machines"):
        return None
    rows = machine_rows(page.tables.comparisons)
    return section(
        "machines",
        "Machines compared",
        intro=INTRO,
        findings=machine_comparison_findings(rows) or ([NO_ROWS] if len(page.machines) > 1 else []),
        tables=(Table("Fastest machine against each other", ratio_display(rows, "machine")),),
        figures=page.figures_of("machines"),
        sources=page.sources("comparisons"),
    )
