"""The Time to accuracy section: each training run's time to a target accuracy next to its
throughput (the table), and the runs that train faster per image than the first at the
target yet reach it later or never (the findings).

A configuration that trains more images per second is not always the one that reaches a
target accuracy first: a lower precision or a larger batch can converge in more epochs, or
not at all. MLPerf Training and DAWNBench rank by time to accuracy for that reason.
"""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from nnperf.core.wording import missing
from nnperf.report import comparisons
from nnperf.report.configurations import key_columns
from nnperf.report.format import (
    cells,
    config_text,
    fmt,
    fmt_duration,
    fmt_pct,
    fmt_times,
    int_cell,
    truthy,
)
from nnperf.report.outline import Page, Section, Table, section

# Runs compared for "faster but later": one model trained with one recipe on one device and
# dataset; what differs is precision, batch size or variant.
COMPARISON_KEYS = ("dataset", "device", "model", "recipe", "target_accuracy")


# The statuses whose rows hold a complete account of the run's epochs.
MEASURED_STATUSES = ("ok", "over_budget")


# The timed runs' throughput of a training run's configuration (`add_timed_throughput`).
TIMED_THROUGHPUT = "timed_throughput_img_s"


INTRO = (
    "Each selected configuration trained under each recipe for some epochs or until "
    "its test top-1 reaches the target, evaluated on the test split every epoch. Time to "
    "target counts training seconds only (evaluation and checkpoints apart), as MLPerf "
    "Training and DAWNBench rank systems: a configuration that trains more images per "
    "second (timed runs) can still reach the target later, or not at all."
)


def faster_but_later_sentences(
    table: pd.DataFrame, throughput_column: str = "throughput_img_s", runs=None
) -> list[str]:
    """Each configuration that trains faster per image than the first to reach the target,
    yet reaches it later or not at all (per model, recipe, device and dataset).

    `throughput_column`: the training runs' own images/s (default) or the timed runs'
    (`timed_throughput_img_s`, after `add_timed_throughput`). With the timed runs' processes
    (`runs`), "faster" is said only where the ratio's 95% CI separates the two, and the
    sentence carries it; from one training run each there is no interval, and it says so.
    """
    sentences = []
    usable = table[
        table["status"].isin(MEASURED_STATUSES)
        & table["target_accuracy"].notna()
        & table[throughput_column].notna()
    ]
    # Tables of several machines (the report's) compare runs of one machine only.
    keys = [key for key in ("machine", *COMPARISON_KEYS) if key in usable.columns]
    for _, group in usable.groupby(keys, sort=False, dropna=False):
        reached = group[[_reached(row) for _, row in group.iterrows()]]
        if reached.empty:
            continue
        first_index = reached.sort_values(["time_to_target_s", throughput_column]).index[0]
        first = group.loc[first_index]
        first_rate = float(first[throughput_column])
        for index, row in group.iterrows():
            rate = float(row[throughput_column])
            if index == first_index or rate <= first_rate:
                continue
            interval = _faster_interval(row, first, throughput_column, runs)
            if interval is None:
                continue
            faster = (
                f"{config_text(row)} trains {fmt_times(rate / first_rate)} as many images per "
                f"second as {config_text(first)} ({fmt(rate, 'img/s')} vs "
                f"{fmt(first_rate, 'img/s')}; {interval})"
            )
            target = fmt_pct(first["target_accuracy"])
            if _reached(row):
                if float(row["time_to_target_s"]) <= float(first["time_to_target_s"]):
                    continue
                sentences.append(
                    f"{faster} but reaches {target} test top-1 later: after "
                    f"{fmt(row['time_to_target_s'], 's')} of training (epoch "
                    f"{int_cell(row['epochs_to_target'])}) against "
                    f"{fmt(first['time_to_target_s'], 's')} (epoch "
                    f"{int_cell(first['epochs_to_target'])}), recipe {row['recipe']} on "
                    f"{row['device']}."
                )
            else:
                sentences.append(
                    f"{faster} but does not reach {target} test top-1 in "
                    f"{_epochs(row['epochs_run'])} (best {fmt_pct(row['best_test_top1'])}), "
                    f"while {config_text(first)} reaches it in "
                    f"{fmt(first['time_to_target_s'], 's')} of training, recipe "
                    f"{row['recipe']} on {row['device']}."
                )
    return sentences


def _faster_interval(row: Mapping, first: Mapping, throughput_column: str, runs) -> str | None:
    """The ratio's interval as the sentence states it, or None where the timed runs do not
    separate the two (then nobody trains faster)."""
    if throughput_column != TIMED_THROUGHPUT:
        return "one training run each: no interval"
    if runs is None:
        return "no interval: the timed runs' processes are not at hand"
    ci = comparisons.ratio_between(runs, row, first)
    if not ci.separated:
        return None
    return f"95% CI of the ratio {comparisons.interval_cell(ci)}"


def _reached(row: Mapping) -> bool:
    return truthy(row.get("reached")) and not missing(row.get("time_to_target_s"))


def _epochs(value) -> str:
    n = 0 if missing(value) else int(value)
    return f"{n} epoch" + ("" if n == 1 else "s")


def _time_to_target(row: Mapping) -> str:
    if _reached(row):
        return fmt_duration(row["time_to_target_s"])
    return "n/a" if missing(row.get("target_accuracy")) else "not reached"


# One row per training run: its time to the target next to its throughput.
TRAINING_COLUMNS = {
    "Recipe": ("recipe", str),
    "Status": ("status", lambda status: str(status).replace("_", " ")),
    "Target": (("target_accuracy",), lambda t: "none" if missing(t) else fmt_pct(t)),
    "Time to target": (None, _time_to_target),
    "Epoch at target": (
        None,
        lambda row: int_cell(row.get("epochs_to_target"), "—") if _reached(row) else "—",
    ),
    "Best top-1": ("best_test_top1", fmt_pct),
    "Best epoch": ("best_epoch", int_cell),
    "Epochs": (
        ("epochs_run", "max_epochs"),
        lambda run, most: f"{int_cell(run, '0')} of {int_cell(most)}",
    ),
    "Training time": ("train_time_s", fmt_duration),
    "Training (img/s)": ("throughput_img_s", fmt),
    "Timed runs (img/s)": (TIMED_THROUGHPUT, fmt),
}


def training_display(table: pd.DataFrame) -> pd.DataFrame:
    return cells(table, TRAINING_COLUMNS, key_columns(table))


def throughput_column(table: pd.DataFrame) -> str:
    """The timed runs' throughput where the table has it, else the training runs' own."""
    return TIMED_THROUGHPUT if TIMED_THROUGHPUT in table.columns else "throughput_img_s"


def build(page: Page) -> Section | None:
    """Time to a target accuracy next to throughput, and where they disagree."""
    table = page.tables.training
    if table is None or table.empty:
        return None
    findings = faster_but_later_sentences(table, throughput_column(table), page.tables.runs)
    return section(
        "accuracy",
        "Time to accuracy",
        intro=INTRO,
        findings=findings,
        tables=[Table("Training runs", page.drop(training_display(table)))],
        figures=page.figures_of("accuracy"),
        sources=page.sources("training"),
    )
