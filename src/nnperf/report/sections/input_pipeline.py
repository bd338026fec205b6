"""The Input pipeline section: each configuration's loader rate beside its training rate, its
data-wait share and whether the input pipeline limits it (`nnperf.report.input_verdict`)."""

from __future__ import annotations

import pandas as pd

from nnperf.report.findings import Finding
from nnperf.report.format import MEAN, cells, fmt, fmt_pct, fmt_times, key_columns, ok_configs
from nnperf.report.input_verdict import DATA_WAIT_LIMIT, INPUT_BOUND, LOADER_HEADROOM
from nnperf.report.input_verdict import NOT_INPUT_BOUND, UNDETERMINED
from nnperf.report.outline import Page, Section, Table, section
from nnperf.report.wording.details import loader_text

INTRO = (
    "Can the input pipeline feed the step? After its timed windows, every worker process "
    "iterated its configuration's own feeder (the variant's DataLoader with its workers, "
    "pinned memory and prefetching, or the device-resident data) with no training: the "
    "same number of batches as a timed window, each drawn and handed to the device as the "
    "step gets it. Its rate is estimated like the throughput (processes x windows, 95% CI). "
    f"A configuration is input-bound when its step waits for data more than "
    f"{fmt_pct(DATA_WAIT_LIMIT)} of its time, or when even the loader's upper bound (its "
    "interval's upper end, or its fastest window where lower) is below "
    f"{LOADER_HEADROOM:g}x the training rate (a loader running beside training shares the "
    "host, so it must be faster than the step alone); it is not when the data wait is at "
    f"most {fmt_pct(DATA_WAIT_LIMIT)} and the loader's lower bound (the interval's lower end, "
    f"or its slowest window where higher) is at least {LOADER_HEADROOM:g}x; otherwise (no "
    "loader rate, bounds across the line) it is undetermined."
)

VERDICT_WORDS = {INPUT_BOUND: "yes", NOT_INPUT_BOUND: "no", UNDETERMINED: "undetermined"}
# A key finding names at most this many input-bound configurations, then counts the rest.
NAMED_AT_MOST = 4


def judged(summary: pd.DataFrame | None) -> pd.DataFrame:
    """Measured configurations with an input verdict (older summaries have none)."""
    ok = ok_configs(summary)
    return ok if "input_bound" in ok.columns else ok.iloc[0:0]


INPUT_COLUMNS = {
    "Training (img/s)": (MEAN, fmt),
    "Loader alone": (None, loader_text),
    "Loader / training": ("loader_headroom", fmt_times),
    "Data wait (share of step)": ("data_wait_share", fmt_pct),
    "Input-bound": ("input_bound", lambda verdict: VERDICT_WORDS.get(str(verdict), "undetermined")),
}


def input_table(summary: pd.DataFrame | None) -> pd.DataFrame:
    table = judged(summary)
    return cells(table, INPUT_COLUMNS, key_columns(table))


def input_record(summary: pd.DataFrame | None) -> Finding | None:
    """Whether data loading limits any measured configuration: the input-bound ones (at most
    NAMED_AT_MOST, most waiting first), the counts, and the others' margin: a key finding."""
    table = judged(summary)
    if table.empty:
        return None
    verdicts = table["input_bound"].astype(str)
    bound, free = (table[verdicts == verdict] for verdict in (INPUT_BOUND, NOT_INPUT_BOUND))
    unknown = table[~verdicts.isin([INPUT_BOUND, NOT_INPUT_BOUND])]
    rates = pd.to_numeric(unknown.get("loader_rate_img_s", pd.Series(dtype=float)), errors="coerce")
    ordered = bound.sort_values("data_wait_share", ascending=False, na_position="last")
    about = {"named": ordered.head(NAMED_AT_MOST).to_dict("records")}
    about["why"] = "no_rate" if rates.isna().all() else "unsettled"
    numbers = {"total": len(table), "bound": len(bound), "free": len(free), "unknown": len(unknown)}
    numbers["machines"] = table["machine"].nunique()
    numbers["headroom"] = pd.to_numeric(free["loader_headroom"], errors="coerce").min()
    numbers["wait"] = pd.to_numeric(free["data_wait_share"], errors="coerce").max()
    return Finding("input_verdicts", about, numbers)


def build(page: Page) -> Section:
    summary = page.tables.summary
    return section(
        "input",
        "Input pipeline",
        intro=INTRO,
        findings=[f for f in (input_record(summary),) if f is not None],
        tables=[Table("Loader rate beside training rate", page.drop(input_table(summary)))],
        sources=page.sources("summary"),
    )
