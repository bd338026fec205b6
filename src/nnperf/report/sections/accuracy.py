"""The Time to accuracy section: each training run's time to a target accuracy next to its
throughput, and the runs that train faster per image than the first at the target yet reach
it later or never: a lower precision or a larger batch can converge in more epochs, or not at
all (MLPerf Training and DAWNBench rank by time to accuracy for that reason)."""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from nnperf.core.wording import missing
from nnperf.report import comparisons
from nnperf.report.findings import Finding
from nnperf.report.format import cells, fmt, fmt_duration, fmt_pct, int_cell, key_columns, truthy
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


def faster_but_later(
    table: pd.DataFrame, throughput_column: str = "throughput_img_s", runs=None
) -> list[Finding]:
    """Each run faster per image than the first to reach the target, yet later or never. With
    the timed runs' processes (`runs`), "faster" is said only where the ratio's 95% CI
    separates the two; from one training run each there is no interval (`one_run`)."""
    timed = throughput_column == TIMED_THROUGHPUT
    interval = ("ci" if runs is not None else "no_runs") if timed else "one_run"
    records = []
    measured = table[table["status"].isin(MEASURED_STATUSES)]
    usable = measured.dropna(subset=["target_accuracy", throughput_column])
    keys = [key for key in ("machine", *COMPARISON_KEYS) if key in usable.columns]
    for _, group in usable.groupby(keys, sort=False, dropna=False):
        reached = group[[_reached(row) for row in group.to_dict("records")]]
        if reached.empty:
            continue
        first = reached.sort_values(["time_to_target_s", throughput_column]).iloc[0]
        for index, row in group.iterrows():
            rate, first_rate = float(row[throughput_column]), float(first[throughput_column])
            time_s = float(row["time_to_target_s"]) if _reached(row) else None
            later = time_s is None or time_s > float(first["time_to_target_s"])
            if index == first.name or rate <= first_rate or not later:
                continue
            ci = comparisons.ratio_between(runs, row, first) if interval == "ci" else None
            if ci is not None and not ci.separated:
                continue
            about = {"run": row.to_dict(), "first": first.to_dict(), "interval": interval}
            about.update(ci=ci, recipe=row["recipe"], device=row["device"])
            numbers = {"rate": rate, "first_rate": first_rate, "target": first["target_accuracy"]}
            numbers.update(time_s=time_s, first_time_s=first["time_to_target_s"])
            numbers.update(epochs=row["epochs_to_target"], first_epochs=first["epochs_to_target"])
            numbers.update(epochs_run=row["epochs_run"], best=row["best_test_top1"])
            records.append(Finding("faster_but_later", about, numbers))
    return records


def _reached(row: Mapping) -> bool:
    return truthy(row.get("reached")) and not missing(row.get("time_to_target_s"))


def _time_to_target(row: Mapping) -> str:
    if _reached(row):
        return fmt_duration(row["time_to_target_s"])
    return "n/a" if missing(row.get("target_accuracy")) else "not reached"


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
    return TIMED_THROUGHPUT if TIMED_THROUGHPUT in table.columns else "throughput_img_s"


def build(page: Page) -> Section | None:
    table = page.tables.training
    if table is None or table.empty:
        return None
    records = faster_but_later(table, throughput_column(table), page.tables.runs)
    return section(
        "accuracy",
        "Time to accuracy",
        intro=INTRO,
        findings=records,
        tables=[Table("Training runs", page.drop(training_display(table)))],
        figures=page.figures_of("accuracy"),
        sources=page.sources("training"),
    )
