"""Throughput per machine (rule compare_machines, `nnperf compare-machines`): the merged
summary of several results folders and its figure. Bars and whiskers are summary.csv's mean
and recorded 95% CI, so the figure and the tables agree; bars in the tables' order.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import os  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from nnperf.core import files  # noqa: E402
from nnperf.core.contract import ReportRequest  # noqa: E402
from nnperf.core.errors import NnperfError  # noqa: E402
from nnperf.report import results  # noqa: E402
from nnperf.report.format import CI_HIGH, CI_LOW, MEAN, sort_configs  # noqa: E402
from nnperf.report.plots import style  # noqa: E402

# Machines further apart than this (a laptop CPU and a datacenter GPU) share a log axis.
LOG_AXIS_RATIO = 20
TITLE = "Training throughput per machine (mean of worker processes; whiskers: 95% CI)"
# seaborn's error bars come only from the data it aggregates: given three rows per bar (CI
# low, mean, CI high), the median is the mean and the full percentile
# interval is exactly the recorded CI. A bar without an interval has its mean row only.
BARS = {"kind": "bar", "estimator": "median", "errorbar": ("pi", 100), "sharey": False}
BARS |= {"height": 4, "aspect": 1.6, "legend_out": False}
# Each worker process's throughput as a dot on its bar (dodged like the bars).
PROCESS_DOTS = {"dodge": True, "jitter": False, "size": 2.5, "alpha": 0.5, "legend": False}


def compare_machines(
    request: ReportRequest,
    local: results.FolderFiles,
    out_csv: style.PathArg,
    out_figure: style.PathArg,
) -> pd.DataFrame:
    """This machine's summary merged with `request.extra_results`', and its figure."""
    loaded = results.load(results.with_extra_results(local, request.extra_results))
    if loaded.summary is None:
        raise NnperfError(
            "compare-machines: no summary.csv in any results folder; run the timed runs "
            "(rule aggregate_runs) first"
        )
    files.write_csv(out_csv, loaded.summary)
    grid = throughput_by_machine(loaded.summary, loaded.runs)
    try:
        # The legend sits outside the panels: "tight" keeps it in the image.
        style.save_png(grid.figure, out_figure, bbox_inches="tight")
    finally:
        plt.close(grid.figure)
    machines = loaded.summary["machine"].nunique()
    done = f"compare-machines: {len(loaded.summary)} configurations on {machines} machine(s)"
    print(f"{done} -> {os.fspath(out_csv)}, {os.fspath(out_figure)}")
    return loaded.summary


def configuration_order(data: pd.DataFrame) -> pd.DataFrame:
    """`data` labelled and sorted on the configuration's keys alone (not machine or model)."""
    labelled = data.reset_index(drop=True).astype({"batch_size": int})
    labelled = labelled.assign(configuration=style.config_labels(labelled))
    return labelled.loc[sort_configs(labelled[["precision", "batch_size", "variant"]]).index]


def _ok(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    ok = frame[frame["status"].astype(str) == "ok"] if "status" in frame else frame
    return ok.dropna(subset=[column])


def throughput_by_machine(summary: pd.DataFrame, runs: pd.DataFrame | None = None):
    """The FacetGrid of mean throughput with its 95% CI, a colour per machine, per model."""
    if MEAN not in summary.columns:
        raise NnperfError(
            f"summary table has no {MEAN} column; allowed: summary.csv written by rule "
            "aggregate_runs (nnperf.report.aggregate)"
        )
    ok = _ok(summary, MEAN)
    points = [column for column in (CI_LOW, MEAN, CI_HIGH) if column in ok.columns]
    data = ok.melt([c for c in ok if c not in points], points, "_point", "throughput_img_s")
    data = data.astype({"throughput_img_s": float}).dropna(subset=["throughput_img_s"])
    if data.empty:
        raise NnperfError("no successful runs in any results folder: nothing to compare")
    data = configuration_order(data)
    order = list(dict.fromkeys(data["configuration"]))
    hues = {"hue": "machine", "hue_order": list(dict.fromkeys(data["machine"])), "order": order}
    columns = {"col": "model", "col_wrap": min(2, data["model"].nunique())}
    grid = sns.catplot(data, x="configuration", y="throughput_img_s", **columns, **hues, **BARS)
    if runs is not None and {"throughput_img_s", "machine"} <= set(runs.columns):
        processes = _ok(runs, "throughput_img_s")
        processes = processes[processes["machine"].isin(hues["hue_order"])]
        if not processes.empty:
            processes = configuration_order(processes)
            processes = processes[processes["configuration"].isin(order)]
        dots = {"palette": ["black"] * len(hues["hue_order"]), **hues, **PROCESS_DOTS}
        for model, chosen in processes.groupby("model"):
            ax = grid.axes_dict[model]
            sns.stripplot(chosen, x="configuration", y="throughput_img_s", ax=ax, **dots)
    spread = data[data["_point"] == MEAN].groupby("machine")["throughput_img_s"].median()
    if len(spread) > 1 and spread.max() > LOG_AXIS_RATIO * spread.min():
        grid.set(yscale="log")
    grid.set_axis_labels("precision, batch size, variant", "throughput (images/s)")
    grid.set_titles("{col_name}")
    grid.set_xticklabels(rotation=45, ha="right")
    grid.figure.suptitle(TITLE, y=1.02)
    grid.figure.tight_layout()
    # Machine names are long: the legend sits right of the panels, outside them.
    sns.move_legend(grid, "upper left", bbox_to_anchor=(1.0, 0.95), frameon=False)
    return grid
