"""The figure of throughput per machine and rule compare_machines' edge (`nnperf
compare-machines`, `compare_machines`): the merged summary of several results folders
(`nnperf.report.results.load`, a `machine` column on every row) and that figure.

Bars are summary.csv's headline `throughput_img_s_mean`, whiskers its recorded 95% CI, so the
figure and the tables agree; runs.csv's per-process throughputs, when given, are points on
their bars. Configurations are ordered as every table orders them: precision in the shared
order (`nnperf.core.vocab`), batch size, then the reference variant first.
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
from nnperf.report.plots.style import save_png  # noqa: E402

# Machines further apart than this (a laptop CPU and a datacenter GPU) share a log axis.
LOG_AXIS_RATIO = 20


def compare_machines(
    request: ReportRequest,
    local: results.FolderFiles,
    out_csv: str | os.PathLike,
    out_figure: str | os.PathLike,
) -> pd.DataFrame:
    """This machine's summary merged with `request.extra_results`' and the figure of
    throughput per machine. Returns the merged summary."""
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
        save_png(grid.figure, out_figure, bbox_inches="tight")
    finally:
        plt.close(grid.figure)
    print(
        f"compare-machines: {len(loaded.summary)} configurations on "
        f"{loaded.summary['machine'].nunique()} machine(s) -> {os.fspath(out_csv)}, "
        f"{os.fspath(out_figure)}"
    )
    return loaded.summary


def configuration_order(data: pd.DataFrame) -> pd.DataFrame:
    """`data` with a `configuration` label column, sorted on the key columns themselves."""
    labelled = data.reset_index(drop=True).astype({"batch_size": int})
    labelled["configuration"] = labelled[["precision", "batch_size", "variant"]].apply(
        lambda row: f"{row['precision']} bs{row['batch_size']} {row['variant']}", axis=1
    )
    # Sorted on the configuration's keys alone: machines and models do not order the bars.
    return labelled.loc[sort_configs(labelled[["precision", "batch_size", "variant"]]).index]


def _bars_with_interval(summary: pd.DataFrame) -> pd.DataFrame:
    """Three rows per configuration and machine, `throughput_img_s` = CI low, mean, CI high.

    seaborn draws error bars only from the data it aggregates; with these three rows the
    median (the bar) is the mean and the full percentile interval (the whisker) is exactly
    the recorded confidence interval. A configuration without an interval keeps its mean
    row only (a bar without whisker).
    """
    ok = summary[summary["status"].astype(str) == "ok"] if "status" in summary else summary
    ok = ok.dropna(subset=[MEAN])
    parts = [
        ok.assign(throughput_img_s=ok[column].astype(float), _point=column)
        for column in (CI_LOW, MEAN, CI_HIGH)
        if column in ok.columns
    ]
    return pd.concat(parts, ignore_index=True).dropna(subset=["throughput_img_s"])


def throughput_by_machine(summary: pd.DataFrame, runs: pd.DataFrame | None = None):
    """Seaborn bars of mean throughput per configuration with its 95% CI, one colour per
    machine; the per-process throughputs of `runs` (runs.csv), when given, as points.

    One panel per model; a log axis when machines differ by more than LOG_AXIS_RATIO.
    Returns the seaborn FacetGrid.
    """
    if MEAN not in summary.columns:
        raise NnperfError(
            f"summary table has no {MEAN} column; allowed: summary.csv written by rule "
            "aggregate_runs (nnperf.report.aggregate)"
        )
    data = _bars_with_interval(summary)
    if data.empty:
        raise NnperfError("no successful runs in any results folder: nothing to compare")
    data = configuration_order(data)
    order = list(dict.fromkeys(data["configuration"]))
    hue_order = list(dict.fromkeys(data["machine"]))
    grid = sns.catplot(
        data=data,
        kind="bar",
        x="configuration",
        y="throughput_img_s",
        hue="machine",
        hue_order=hue_order,
        col="model",
        col_wrap=min(2, data["model"].nunique()),
        order=order,
        estimator="median",
        errorbar=("pi", 100),
        sharey=False,
        height=4,
        aspect=1.6,
        legend_out=False,
    )
    if runs is not None and {"throughput_img_s", "machine"} <= set(runs.columns):
        _add_process_points(grid, runs, order, hue_order)
    means = data[data["_point"] == MEAN]
    spread = means.groupby("machine")["throughput_img_s"].median()
    if len(spread) > 1 and spread.max() > LOG_AXIS_RATIO * spread.min():
        grid.set(yscale="log")
    grid.set_axis_labels("precision, batch size, variant", "throughput (images/s)")
    grid.set_titles("{col_name}")
    grid.tick_params(axis="x", rotation=45)
    grid.set_xticklabels(ha="right")
    grid.figure.suptitle(
        "Training throughput per machine (mean of worker processes; whiskers: 95% CI)", y=1.02
    )
    grid.figure.tight_layout()
    # Machine names are long: the legend sits right of the panels, outside them (saving with
    # bbox_inches="tight" keeps it in the image).
    sns.move_legend(grid, "upper left", bbox_to_anchor=(1.0, 0.95), frameon=False)
    return grid


def _add_process_points(grid, runs: pd.DataFrame, order: list, hue_order: list) -> None:
    """Each worker process's throughput as a dot on its bar (dodged like the bars)."""
    points = runs[runs["status"].astype(str) == "ok"] if "status" in runs else runs
    points = points.dropna(subset=["throughput_img_s"])
    points = points[points["machine"].isin(hue_order)]
    if points.empty:
        return
    points = configuration_order(points)
    points = points[points["configuration"].isin(order)]
    for model, chosen in points.groupby("model"):
        sns.stripplot(
            data=chosen,
            x="configuration",
            y="throughput_img_s",
            hue="machine",
            order=order,
            hue_order=hue_order,
            dodge=True,
            jitter=False,
            palette=["black"] * len(hue_order),
            size=2.5,
            alpha=0.5,
            legend=False,
            ax=grid.axes_dict[model],
        )
