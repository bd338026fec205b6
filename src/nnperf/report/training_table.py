"""The training runs' table (results/tables/{dataset}/training.csv, rule `training_table`):
one row per run to a target accuracy (`nnperf.training.to_accuracy`), with the timed runs'
throughput of the same configuration joined from summary.csv."""

from __future__ import annotations

import os
from typing import Iterable, Mapping

import pandas as pd

from nnperf.core.errors import NnperfError
from nnperf.core.files import read_json, write_csv
from nnperf.core.vocab import CONFIG_KEYS, TRAINING_KEYS, TRAINING_RUN_KIND, precision_rank
from nnperf.report.results import read_table

TABLE_COLUMNS = (
    *TRAINING_KEYS,
    *"status stop_reason target_accuracy reached time_to_target_s epochs_to_target".split(),
    *"best_test_top1 best_epoch final_test_top1 epochs_run max_epochs train_time_s".split(),
    "throughput_img_s",
)


def training_table(documents: Iterable[Mapping]) -> pd.DataFrame:
    """One row per training-run summary document, in `TABLE_COLUMNS` and the report's order
    (precisions in the shared order)."""
    rows = [
        {**document, "max_epochs": (document.get("convergence") or {}).get("epochs")}
        for document in documents
    ]
    table = pd.DataFrame(rows, columns=list(TABLE_COLUMNS))
    keys = ["dataset", "device", "model", "recipe", "batch_size", "_precision", "variant"]
    ordered = table.assign(_precision=table["precision"].map(precision_rank))
    return ordered.sort_values(keys, kind="stable")[list(TABLE_COLUMNS)].reset_index(drop=True)


# What the training table reads of summary.csv.
TIMED_COLUMNS = (*CONFIG_KEYS, "dataset", "status", "throughput_img_s_mean")


def add_timed_throughput(table: pd.DataFrame, timed_summary: pd.DataFrame) -> pd.DataFrame:
    """`table` with `timed_throughput_img_s`: the timed runs' mean throughput of the same
    configuration (summary.csv `throughput_img_s_mean`), null where it was not timed."""
    keys = [*CONFIG_KEYS, "dataset"]
    timed = timed_summary[timed_summary["status"] == "ok"][[*keys, "throughput_img_s_mean"]]
    timed = timed.rename(columns={"throughput_img_s_mean": "timed_throughput_img_s"})
    timed = timed.astype({"batch_size": int})
    return table.astype({"batch_size": int}).merge(timed, on=keys, how="left")


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
        timed = read_table(timed_summary, TIMED_COLUMNS, "the training table")
        table = add_timed_throughput(table, timed)
    write_csv(out, table)
    print(f"{len(table)} training run(s) -> {os.fspath(out)}")
    return table
