"""The Input pipeline section: for every configuration, its loader's own rate (the feeder
iterated with no training, `nnperf.engine.loader`) beside its training rate, the share of
the step spent waiting for data, and whether the input pipeline limits it
(`nnperf.report.input_verdict` has the rule); and the one key finding that says so."""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from nnperf.core.wording import missing
from nnperf.report import comparisons
from nnperf.report.configurations import MEAN, estimate_text, key_columns, ok_configs
from nnperf.report.format import cells, config_text, fmt, fmt_pct, fmt_times, throughput_text
from nnperf.report.input_verdict import (
    DATA_WAIT_LIMIT,
    INPUT_BOUND,
    LOADER_HEADROOM,
    NOT_INPUT_BOUND,
    UNDETERMINED,
)
from nnperf.report.outline import Page, Section, Table, section

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
    """Measured configurations with their input verdict (summaries written before the
    loader windows have none: nothing is said about them)."""
    ok = ok_configs(summary)
    if ok.empty or "input_bound" not in ok.columns:
        return ok.iloc[0:0]
    return ok


def loader_text(row: Mapping) -> str:
    """`12,300 img/s (95% CI 11,900–12,700)`, or `not measured`."""
    if missing(row.get("loader_rate_img_s")):
        return "not measured"
    return throughput_text(
        row.get("loader_rate_img_s"),
        row.get("loader_rate_img_s_ci95_low"),
        row.get("loader_rate_img_s_ci95_high"),
        n_windows=row.get("loader_n_windows"),
        n_processes=row.get("loader_n_processes"),
        method=row.get("loader_ci_method"),
    )


INPUT_COLUMNS = {
    "Training (img/s)": (MEAN, fmt),
    "Loader alone": (None, loader_text),
    "Loader / training": ("loader_headroom", fmt_times),
    "Data wait (share of step)": ("data_wait_share", fmt_pct),
    "Input-bound": ("input_bound", lambda verdict: VERDICT_WORDS.get(str(verdict), "undetermined")),
}


def input_table(summary: pd.DataFrame | None) -> pd.DataFrame:
    """The loader's rate beside training's, per judged configuration."""
    table = judged(summary)
    return cells(table, INPUT_COLUMNS, key_columns(table))


def _where(row: Mapping, machines: int) -> str:
    return config_text(row) + (f" on {row['machine']}" if machines > 1 else "")


def _input_bound_text(row: Mapping, machines: int) -> str:
    return (
        f"{_where(row, machines)} (loader alone {loader_text(row)} against "
        f"{estimate_text(row)} training; data wait {fmt_pct(row.get('data_wait_share'))} "
        "of the step)"
    )


def input_finding(summary: pd.DataFrame | None) -> list[str]:
    """One sentence: whether data loading limits any measured configuration, naming the
    input-bound ones once with both rates and the data-wait share, and the margin of the
    others."""
    table = judged(summary)
    if table.empty:
        return []
    machines = table["machine"].nunique()
    verdicts = table["input_bound"].astype(str)
    bound = table[verdicts == INPUT_BOUND]
    free = table[verdicts == NOT_INPUT_BOUND]
    unknown = table[~verdicts.isin([INPUT_BOUND, NOT_INPUT_BOUND])]
    total = len(table)
    parts = []
    if len(bound):
        ordered = bound.sort_values("data_wait_share", ascending=False, na_position="last")
        named = [
            _input_bound_text(r, machines) for r in ordered.head(NAMED_AT_MOST).to_dict("records")
        ]
        if len(bound) > NAMED_AT_MOST:
            named.append(f"{len(bound) - NAMED_AT_MOST} more (see Input pipeline)")
        parts.append(
            f"Data loading limits {len(bound)} of {total} measured configurations: "
            + comparisons.names(named, str)
        )
    if len(free):
        headroom = pd.to_numeric(free["loader_headroom"], errors="coerce").min()
        wait = pd.to_numeric(free["data_wait_share"], errors="coerce").max()
        margin = (
            f"the loader alone delivers at least {fmt_times(headroom)} the training rate and "
            f"the step waits for data at most {fmt_pct(wait)} of its time"
        )
        if len(bound):
            parts.append(f"it does not limit the other {len(free)} ({margin})")
        elif len(free) == total:
            parts.append(
                f"Data loading limits none of the {total} measured configurations: {margin}"
            )
        else:
            parts.append(
                f"Data loading does not limit {len(free)} of {total} measured configurations "
                f"({margin})"
            )
    if len(unknown):
        rates = unknown.get("loader_rate_img_s")
        no_rate = rates is None or pd.to_numeric(rates, errors="coerce").isna().all()
        why = (
            "no loader rate was measured" if no_rate else "the loader's interval does not settle it"
        )
        if parts:
            parts.append(f"for {len(unknown)} it is undetermined ({why})")
        else:
            parts.append(
                f"Whether data loading limits the {total} measured configurations is "
                f"undetermined: {why}"
            )
    text = "; ".join(parts)
    return [text[0].upper() + text[1:] + "."]


def build(page: Page) -> Section:
    summary = page.tables.summary
    return section(
        "input",
        "Input pipeline",
        intro=INTRO,
        findings=input_finding(summary),
        tables=[Table("Loader rate beside training rate", page.drop(input_table(summary)))],
        sources=page.sources("summary"),
    )
