"""Figures of the timed runs: throughput vs batch size, phase breakdown, speedups.

Each function draws one figure for one (device, model) from the tables of
`nnperf.aggregate` and returns the Figure (built on `matplotlib.figure.Figure`, never pyplot,
so no global backend state is touched); saving it is the caller's business. Error bars of
the throughput figure are the same 95% bootstrap interval of the median as in summary.csv
(`nnperf.stats.ci95`), so figure and table agree. `draw()` is the file edge: a table in, one
PNG out, for the figure a `FigureRequest` names.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from nnperf import stats
from nnperf.contract import FigureRequest
from nnperf.errors import NnperfError
from nnperf.files import atomic_path
from nnperf.layout import RUN_FIGURE_KINDS as FIGURE_KINDS
from nnperf.vocab import PHASES, REFERENCE_PRECISION, REFERENCE_VARIANT, sort_precisions

FIGURE_DPI = 150
THROUGHPUT_YLABEL = "throughput (images/s)"
BATCH_XLABEL = "batch size"
BREAKDOWN_YLABEL = "median time per step (ms)"
SPEEDUP_FP32_YLABEL = f"speedup vs {REFERENCE_PRECISION} (x)"
SPEEDUP_BASELINE_YLABEL = f"speedup vs {REFERENCE_VARIANT} variant (x)"


def _select(frame: pd.DataFrame, device: str, model: str, table: str) -> pd.DataFrame:
    chosen = frame[(frame["device"] == device) & (frame["model"] == model)]
    if chosen.empty:
        pairs = sorted({f"{d}/{m}" for d, m in zip(frame["device"], frame["model"])})
        raise NnperfError(
            f"{table} has no rows for device/model {device}/{model}; "
            f"allowed: {', '.join(pairs)}"
        )
    return chosen


def _precision_order(values) -> list[str]:
    return sort_precisions(values)


def _batch_axis(ax, batch_sizes) -> None:
    """Batch sizes are usually powers of two: log2 axis, ticks at the sizes that ran."""
    sizes = sorted(set(int(b) for b in batch_sizes))
    if len(sizes) > 1:
        ax.set_xscale("log", base=2)
    ax.set_xticks(sizes)
    ax.set_xticklabels([str(s) for s in sizes])
    ax.minorticks_off()


def throughput_figure(runs: pd.DataFrame, device: str, model: str) -> Figure:
    """Median throughput vs batch size; hue precision, style variant, 95% CI bars; OOM marked."""
    chosen = _select(runs, device, model, "runs table")
    ok = chosen[chosen["status"] == "ok"].astype({"throughput_img_s": float})
    oom = chosen[chosen["status"] == "oom"]
    fig = Figure(figsize=(6.4, 4.2), layout="constrained")
    ax = fig.subplots()
    if not ok.empty:
        sns.lineplot(
            data=ok,
            x="batch_size",
            y="throughput_img_s",
            hue="precision",
            hue_order=_precision_order(ok["precision"]),
            style="variant",
            estimator=np.median,
            errorbar=stats.ci95,
            err_style="bars",
            markers=True,
            dashes=True,
            ax=ax,
        )
    if not oom.empty:
        # OOM batch sizes have no throughput; mark them on the axis so they are not missed.
        sizes = sorted(oom["batch_size"].unique())
        ax.scatter(
            sizes,
            np.zeros(len(sizes)),
            marker="v",
            s=60,
            color="firebrick",
            label="out of memory (any precision/variant)",
            zorder=3,
            clip_on=False,
        )
        for size in sizes:
            ax.annotate(
                "OOM",
                (size, 0),
                textcoords="offset points",
                xytext=(0, 8),
                ha="center",
                color="firebrick",
                fontsize="small",
            )
        ax.legend()
    _batch_axis(ax, chosen["batch_size"])
    ax.set_ylim(bottom=0)
    ax.set_xlabel(BATCH_XLABEL)
    ax.set_ylabel(THROUGHPUT_YLABEL)
    ax.set_title(f"{model} on {device}: training throughput (median of reps, 95% CI)")
    return fig


def breakdown_figure(summary: pd.DataFrame, device: str, model: str) -> Figure:
    """Stacked bars of the median per-phase time of a step, one bar per configuration."""
    chosen = _select(summary, device, model, "summary table")
    chosen = chosen[chosen["status"] != "oom"].copy()
    if chosen.empty:
        raise NnperfError(
            f"summary table has only out-of-memory rows for {device}/{model}; "
            "allowed: at least one configuration that ran"
        )
    chosen["_order"] = chosen["precision"].map(
        {p: i for i, p in enumerate(_precision_order(chosen["precision"]))}
    )
    chosen = chosen.sort_values(["batch_size", "_order", "variant"])
    labels = [
        f"bs{b}\n{p}\n{v}"
        for b, p, v in zip(chosen["batch_size"], chosen["precision"], chosen["variant"])
    ]
    phase_ms = pd.DataFrame(
        {phase: chosen[f"{phase}_s_median"].to_numpy(dtype=float) * 1e3 for phase in PHASES},
        index=labels,
    )
    width = max(6.4, 0.55 * len(labels) + 2.0)
    fig = Figure(figsize=(width, 4.6), layout="constrained")
    ax = fig.subplots()
    # seaborn has no stacked bars and pandas' .plot goes through pyplot: stack with ax.bar.
    bottom = np.zeros(len(labels))
    positions = np.arange(len(labels))
    for phase, colour in zip(PHASES, sns.color_palette("colorblind", len(PHASES))):
        ax.bar(
            positions,
            phase_ms[phase].to_numpy(),
            width=0.8,
            bottom=bottom,
            color=colour,
            label=phase,
        )
        bottom += phase_ms[phase].to_numpy()
    ax.set_xticks(positions, labels)
    ax.set_xlabel("configuration (batch size / precision / variant)")
    ax.set_ylabel(BREAKDOWN_YLABEL)
    ax.legend(title="phase", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title(f"{model} on {device}: where a training step's time goes")
    return fig


def speedup_figure(summary: pd.DataFrame, device: str, model: str) -> Figure:
    """Two panels: each precision vs fp32, and each variant vs baseline, per batch size."""
    chosen = _select(summary, device, model, "summary table")
    chosen = chosen[chosen["status"] != "oom"].copy()
    chosen["precision / variant"] = chosen["precision"] + " / " + chosen["variant"]
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    left, right = fig.subplots(1, 2)
    panels = (
        (
            left,
            chosen[chosen["precision"] != REFERENCE_PRECISION],
            "speedup_vs_fp32",
            SPEEDUP_FP32_YLABEL,
            f"precisions vs {REFERENCE_PRECISION} (same variant)",
        ),
        (
            right,
            chosen[chosen["variant"] != REFERENCE_VARIANT],
            "speedup_vs_baseline",
            SPEEDUP_BASELINE_YLABEL,
            f"variants vs {REFERENCE_VARIANT} (same precision)",
        ),
    )
    for ax, data, column, ylabel, title in panels:
        data = data[np.isfinite(data[column].astype(float))]
        if data.empty:
            ax.text(
                0.5,
                0.5,
                "no comparable configuration in this study",
                ha="center",
                va="center",
                transform=ax.transAxes,
            )
        else:
            sns.barplot(
                data=data,
                x="batch_size",
                y=column,
                hue="precision / variant",
                ax=ax,
                palette="colorblind",
                errorbar=None,
            )
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.set_xlabel(BATCH_XLABEL)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
    fig.suptitle(f"{model} on {device}: speedups of median throughput")
    return fig


def figure(request: FigureRequest, table: pd.DataFrame) -> Figure:
    """The figure `request.kind` names for its device and model, from the table that kind
    reads: runs.csv for `throughput` (its CI is over reps), summary.csv for the others."""
    if request.model is None:
        raise NnperfError(f"{request.kind} figure: model is missing; allowed: a model name")
    drawers = {
        "throughput": throughput_figure,
        "breakdown": breakdown_figure,
        "speedup": speedup_figure,
    }
    if request.kind not in drawers:
        raise NnperfError(
            f"figure kind {request.kind!r} is unknown; allowed: {', '.join(FIGURE_KINDS)}"
        )
    return drawers[request.kind](table, request.device, request.model)


def draw(request: FigureRequest, table_path: str | os.PathLike, out_png: str | os.PathLike) -> None:
    """One figure of the timed runs, from runs.csv or summary.csv, to a PNG (the `plot_*`
    rules of the timing stage)."""
    try:
        table = pd.read_csv(table_path)
    except FileNotFoundError:
        raise NnperfError(f"{table_path}: file not found") from None
    drawn = figure(request, table)
    with atomic_path(out_png) as tmp:
        drawn.savefig(tmp, dpi=FIGURE_DPI, format="png")
    print(f"{request.kind} figure of {request.device}/{request.model} -> {out_png}")
