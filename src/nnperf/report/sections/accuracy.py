"""The Time to accuracy section: each training run's time to a target accuracy next to its
throughput, and where the two disagree.

A configuration that trains more images per second is not always the one that reaches a
target accuracy first: a lower precision or a larger batch can converge in more epochs, or
not at all. MLPerf Training and DAWNBench rank by time to accuracy for that reason. The
sentences state what the training table (`nnperf.report.training_table`) says:

* `time_to_accuracy_sentences()`: per run, the time to the target (or that it was not
  reached), its best accuracy and its throughput;
* `faster_but_later_sentences()`: each configuration that trains faster per image than the
  one first at the target, yet reaches the target later or never.
"""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from nnperf.core.wording import missing
from nnperf.report import comparisons
from nnperf.report.configurations import GROUP_KEYS, KEY_LABELS
from nnperf.report.format import (
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


def run_text(row: Mapping) -> str:
    """`resnet18_cifar bf16 at batch 256 (baseline), recipe default`."""
    return f"{config_text(row)}, recipe {row['recipe']}"


def time_to_accuracy_sentences(
    table: pd.DataFrame, throughput_column: str = "throughput_img_s"
) -> list[str]:
    """One sentence per training run: time to target (or not reached), best accuracy,
    throughput."""
    sentences = []
    for _, row in table.iterrows():
        rate = fmt(row.get(throughput_column), "img/s")
        epoch = int_cell(row["best_epoch"])
        best = f"best {fmt_pct(row['best_test_top1'])} test top-1 (epoch {epoch})"
        if row["status"] not in MEASURED_STATUSES:
            sentences.append(
                f"{run_text(row)}: {_status_text(row['status'])} after "
                f"{_epochs(row['epochs_run'])}; {best}."
            )
            continue
        target = row["target_accuracy"]
        if missing(target):
            sentences.append(
                f"{run_text(row)}: {best} after {_epochs(row['epochs_run'])} "
                f"({fmt_duration(row['train_time_s'])} of training) at {rate}; no target set."
            )
        elif _reached(row):
            sentences.append(
                f"{run_text(row)}: reaches {fmt_pct(target)} test top-1 in "
                f"{fmt_duration(row['time_to_target_s'])} of training (epoch "
                f"{int_cell(row['epochs_to_target'])}) at {rate}; {best}."
            )
        else:
            budget = " (stopped by its time budget)" if row["status"] == "over_budget" else ""
            sentences.append(
                f"{run_text(row)}: does not reach {fmt_pct(target)} test top-1 in "
                f"{_epochs(row['epochs_run'])}{budget} "
                f"({fmt_duration(row['train_time_s'])} of training) at {rate}; {best}."
            )
    return sentences


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
    value = row.get("reached")
    return (not missing(value)) and bool(value) and not missing(row.get("time_to_target_s"))


def _epochs(value) -> str:
    n = 0 if missing(value) else int(value)
    return f"{n} epoch" + ("" if n == 1 else "s")


def _status_text(status: str) -> str:
    return {"oom": "ran out of memory", "diverged": "diverged (NaN/inf loss)"}.get(
        status, f"ended with status {status}"
    )


def training_display(table: pd.DataFrame) -> pd.DataFrame:
    """One row per training run: its time to the target next to its throughput."""
    rows = []
    for row in table.to_dict("records"):
        reached = truthy(row.get("reached")) and not missing(row.get("time_to_target_s"))
        target = row.get("target_accuracy")
        rows.append(
            {
                **{KEY_LABELS.get(k, k): row.get(k) for k in GROUP_KEYS if k in row},
                "Recipe": row.get("recipe"),
                "Status": str(row.get("status")).replace("_", " "),
                "Target": fmt_pct(target) if not missing(target) else "none",
                "Time to target": (
                    fmt_duration(row["time_to_target_s"])
                    if reached
                    else ("n/a" if missing(target) else "not reached")
                ),
                "Epoch at target": int_cell(row.get("epochs_to_target"), "—") if reached else "—",
                "Best top-1": fmt_pct(row.get("best_test_top1")),
                "Epochs": f"{int_cell(row.get('epochs_run'), '0')} of {int_cell(row.get('max_epochs'))}",
                "Training (img/s)": fmt(row.get("throughput_img_s")),
                "Timed runs (img/s)": fmt(row.get(TIMED_THROUGHPUT)),
            }
        )
    return pd.DataFrame(rows)


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
        findings=findings + time_to_accuracy_sentences(table),
        tables=[Table("Training runs", page.drop(training_display(table)))],
        figures=page.figures_of("accuracy"),
        sources=page.sources("training"),
    )
