"""Time to accuracy next to throughput: the training runs' table and the sentences about it.

A configuration that trains more images per second is not always the one that reaches a
target accuracy first: a lower precision or a larger batch can converge in more epochs, or
not at all. MLPerf Training and DAWNBench rank by time to accuracy for that reason. This
module puts the two side by side: `training_table()` makes one tidy row per training run
from its summary document (`nnperf.training.to_accuracy`), `add_timed_throughput()` joins the timed
runs' throughput (summary.csv of `nnperf.report.aggregate`) to it, and the sentence functions state
what the rows say with their numbers:

* `time_to_accuracy_sentences()`: per run, the time to the target (or that it was not
  reached), its best accuracy and its throughput;
* `faster_but_later_sentences()`: each configuration that trains faster per image than the
  one first at the target, yet reaches the target later or never.

Frames in, strings out (`nnperf.report.document` places the sentences); `write_training_table()` at
the bottom is the file edge (rule `training_table`).
"""

from __future__ import annotations

import os
from typing import Iterable, Mapping

import pandas as pd

from nnperf.core.errors import NnperfError
from nnperf.core.files import read_json, read_table, write_csv
from nnperf.core.vocab import CONFIG_KEYS, TRAINING_KEYS, TRAINING_RUN_KIND, precision_rank
from nnperf.core.wording import missing
from nnperf.report.format import config_text, fmt, fmt_duration, fmt_pct, fmt_times

TABLE_COLUMNS = (
    *TRAINING_KEYS,
    "status",
    "stop_reason",
    "target_accuracy",
    "reached",
    "time_to_target_s",
    "epochs_to_target",
    "best_test_top1",
    "best_epoch",
    "final_test_top1",
    "epochs_run",
    "max_epochs",
    "train_time_s",
    "throughput_img_s",
)
# Runs compared for "faster but later": one model trained with one recipe on one device and
# dataset; what differs is precision, batch size or variant.
COMPARISON_KEYS = ("dataset", "device", "model", "recipe", "target_accuracy")
# The statuses whose rows hold a complete account of the run's epochs.
MEASURED_STATUSES = ("ok", "over_budget")


def training_table(documents: Iterable[Mapping]) -> pd.DataFrame:
    """One row per training-run summary document, in `TABLE_COLUMNS`."""
    rows = []
    for document in documents:
        row = {column: document.get(column) for column in TABLE_COLUMNS}
        row["max_epochs"] = (document.get("convergence") or {}).get("epochs")
        rows.append(row)
    table = pd.DataFrame(rows, columns=list(TABLE_COLUMNS))
    return sort_runs(table)


def sort_runs(table: pd.DataFrame) -> pd.DataFrame:
    """Rows in the report's order: keys, precisions in the shared order."""
    if table.empty:
        return table.reset_index(drop=True)
    ordered = table.assign(_precision=table["precision"].map(precision_rank))
    keys = ["dataset", "device", "model", "recipe", "batch_size", "_precision", "variant"]
    return (
        ordered.sort_values(keys, kind="stable").drop(columns="_precision").reset_index(drop=True)
    )


def add_timed_throughput(table: pd.DataFrame, timed_summary: pd.DataFrame) -> pd.DataFrame:
    """`table` with `timed_throughput_img_s`: the timed runs' mean throughput of the same
    configuration (summary.csv `throughput_img_s_mean`), null where it was not timed."""
    keys = [*CONFIG_KEYS, "dataset"]
    timed = timed_summary[timed_summary["status"] == "ok"][[*keys, "throughput_img_s_mean"]]
    timed = timed.rename(columns={"throughput_img_s_mean": "timed_throughput_img_s"})
    timed = timed.astype({"batch_size": int})
    merged = table.astype({"batch_size": int}).merge(timed, on=keys, how="left")
    return merged


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
        best = f"best {fmt_pct(row['best_test_top1'])} test top-1 (epoch {_int(row['best_epoch'])})"
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
                f"{_int(row['epochs_to_target'])}) at {rate}; {best}."
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
    table: pd.DataFrame, throughput_column: str = "throughput_img_s"
) -> list[str]:
    """Each configuration that trains faster per image than the first to reach the target,
    yet reaches it later or not at all (per model, recipe, device and dataset).

    `throughput_column`: the training runs' own images/s (default) or the timed runs'
    (`timed_throughput_img_s`, after `add_timed_throughput`).
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
            faster = (
                f"{config_text(row)} trains {fmt_times(rate / first_rate)} as many images per "
                f"second as {config_text(first)} ({fmt(rate, 'img/s')} vs "
                f"{fmt(first_rate, 'img/s')})"
            )
            target = fmt_pct(first["target_accuracy"])
            if _reached(row):
                if float(row["time_to_target_s"]) <= float(first["time_to_target_s"]):
                    continue
                sentences.append(
                    f"{faster} but reaches {target} test top-1 later: after "
                    f"{fmt(row['time_to_target_s'], 's')} of training (epoch "
                    f"{_int(row['epochs_to_target'])}) against "
                    f"{fmt(first['time_to_target_s'], 's')} (epoch "
                    f"{_int(first['epochs_to_target'])}), recipe {row['recipe']} on "
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


def _reached(row: Mapping) -> bool:
    value = row.get("reached")
    return (not missing(value)) and bool(value) and not missing(row.get("time_to_target_s"))


def _int(value) -> str:
    return "?" if missing(value) else str(int(value))


def _epochs(value) -> str:
    n = 0 if missing(value) else int(value)
    return f"{n} epoch" + ("" if n == 1 else "s")


def _status_text(status: str) -> str:
    return {"oom": "ran out of memory", "diverged": "diverged (NaN/inf loss)"}.get(
        status, f"ended with status {status}"
    )


def write_training_table(
    run_paths: Iterable[str | os.PathLike],
    timed_summary: str | os.PathLike | None,
    out: str | os.PathLike,
) -> pd.DataFrame:
    """results/tables/{dataset}/training.csv: one row per training run's summary JSON, with
    the timed runs' throughput of its configuration from summary.csv (None: not joined)."""
    documents = []
    for path in run_paths:
        document = read_json(path)
        if document.get("kind") != TRAINING_RUN_KIND:
            raise NnperfError(
                f"{os.fspath(path)}: kind {document.get('kind')!r} is not a training run; "
                "allowed: summaries written by rule train_to_accuracy"
            )
        documents.append(document)
    if not documents:
        raise NnperfError("no training runs given; allowed: one or more training summary JSONs")
    table = training_table(documents)
    if timed_summary is not None:
        table = add_timed_throughput(table, read_table(timed_summary))
    write_csv(out, table)
    print(f"{len(table)} training run(s) -> {os.fspath(out)}")
    return table
