"""The Machines compared section: comparisons.csv's `machine` rows as a table, and per model
one sentence (the figure is `nnperf.report.plots.machines`').

comparisons.csv keeps a row for every configuration two or more machines ran (its fastest
machine against each other one), not only the one a sentence quotes: a user diffing two
studies compares machines configuration by configuration, and the table shows every row.
The sentence quotes, per model, the configuration most machines ran: fp32 first, then the
baseline, then the largest batch (`stated`). Machines are measured apart, so the ratios are
unpaired; a machine is called fastest only where the tie rule separated it from every
other (`verdict` faster on each row of its configuration), otherwise the tie is named.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import pandas as pd

from nnperf.core.vocab import REFERENCE_PRECISION, REFERENCE_VARIANT
from nnperf.report import comparisons
from nnperf.report.comparisons import ci_of
from nnperf.report.format import config_text, fmt
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
    """comparisons.csv's `machine` rows (none where the table is absent)."""
    if table is None or table.empty:
        return pd.DataFrame(columns=list(comparisons.COLUMNS))
    return table[table["kind"] == "machine"]


def stated(rows: pd.DataFrame) -> pd.DataFrame:
    """Of one model's `machine` rows, those of the configuration the sentence quotes."""
    first = (
        rows.assign(
            _others=rows.groupby(CONFIG)["kind"].transform("size"),
            _fp32=rows["a_precision"] != REFERENCE_PRECISION,
            _base=rows["a_variant"] != REFERENCE_VARIANT,
        )
        .sort_values(["_others", "_fp32", "_base", "a_batch_size"], ascending=[0, 1, 1, 0])
        .iloc[0]
    )
    return rows[(rows[CONFIG] == first[CONFIG]).all(axis=1)]


def _at(machine: object, value: object) -> str:
    return f"{machine} at {fmt(value, 'img/s')}"


def machine_sentence(rows: Sequence[Mapping]) -> str:
    """One configuration's rows (its fastest machine against each other one): the tie rule
    across machines, with the fastest-to-slowest ratio."""
    # The runner-up first, the slowest last; a row without a ratio goes last.
    rows = sorted(rows, key=lambda r: float(r["ratio"]) if pd.notna(r["ratio"]) else float("inf"))
    top, config = rows[0], config_text({k[2:]: rows[0][k] for k in CONFIG})
    fastest = _at(top["a_machine"], top["a_value"])
    tied = [r for r in rows if r["verdict"] != "faster"]
    if tied:
        names = [fastest, *(_at(r["b_machine"], r["b_value"]) for r in tied)]
        return (
            f"Across machines, {config} has no single fastest machine: "
            f"{comparisons.names(names, str)} are {comparisons.ratio_text(ci_of(top))}."
        )
    slow = rows[-1]
    text = (
        f"Across machines, {config} runs fastest on {fastest}, "
        f"{comparisons.ratio_text(ci_of(slow))} than the slowest machine, {slow['b_machine']}, "
        f"at {fmt(slow['b_value'], 'img/s')}"
    )
    if len(rows) > 1:
        text += f"; {comparisons.ratio_text(ci_of(top))} than the runner-up, {top['b_machine']}"
    return text + "."


def machine_comparison_findings(table: pd.DataFrame | None) -> list[str]:
    """Per model, the sentence on the configuration most machines share."""
    rows = machine_rows(table)
    return [
        machine_sentence(stated(group).to_dict("records"))
        for _, group in rows.groupby("a_model", sort=True)
    ]


def build(page: Page) -> Section | None:
    if len(page.machines) <= 1 and not page.figures_of("machines"):
        return None
    rows = machine_rows(page.tables.comparisons)
    findings = machine_comparison_findings(rows)
    return section(
        "machines",
        "Machines compared",
        intro=INTRO,
        findings=findings or ([NO_ROWS] if len(page.machines) > 1 else []),
        tables=(Table("Fastest machine against each other", ratio_display(rows, "machine")),),
        figures=page.figures_of("machines"),
        sources=page.sources("comparisons"),
    )
