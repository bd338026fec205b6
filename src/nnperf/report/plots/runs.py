"""Figures of the timed runs, one per (device, model): throughput vs batch size, phase
breakdown, speedups.

Throughput is summary.csv's mean over worker processes with the engine's 95% CI, so figure
and table agree, and runs.csv's per-process throughputs beside it, so the spread behind the
interval is visible. A configuration without a number (`oom`, `over_budget`) is marked with
a note, never drawn as a value. Speedups are comparisons.csv's ratios with their CI; a bar
whose verdict is neither faster nor slower is marked not separated. `draw()` is the edge.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from nnperf.core.contract import FigureRequest
from nnperf.core.errors import NnperfError
from nnperf.report.plots.style import save_png
from nnperf.core.layout import RUN_FIGURE_KINDS as FIGURE_KINDS
from nnperf.core.vocab import (
    CONFIG_KEYS,
    PHASES,
    REFERENCE_PRECISION,
    REFERENCE_VARIANT,
    sort_precisions,
)
from nnperf.report.results import read_table

THROUGHPUT_YLABEL = "throughput (images/s)"
BATCH_XLABEL = "batch size"
BREAKDOWN_YLABEL = "median time per step (ms)"
SPEEDUP_FP32_YLABEL = f"speedup vs {REFERENCE_PRECISION} (x)"
SPEEDUP_BASELINE_YLABEL = f"speedup vs {REFERENCE_VARIANT} variant (x)"
PROCESS_LABEL = "one worker process"
# On a speedup bar whose ratio's 95% CI includes 1 (or has none): not separated.
NOT_SEPARATED = "n.s."
SPEEDUP_KEY = f"whiskers: 95% CI of the ratio; {NOT_SEPARATED}: not separated from 1"
# How a configuration without a number is marked: (legend label, short text, marker, colour).
UNMEASURED = {
    "oom": ("out of memory", "OOM", "v", "firebrick"),
    "over_budget": (
        "over budget (step too slow for the time budget)",
        "over budget",
        "X",
        "darkorange",
    ),
}
# Groups sharing a batch size are spread over this many octaves so their points stay apart.
DODGE_OCTAVES = 0.25


def _select(frame: pd.DataFrame, device: str, model: str, table: str) -> pd.DataFrame:
    chosen = frame[(frame["device"] == device) & (frame["model"] == model)]
    if chosen.empty:
        pairs = sorted({f"{d}/{m}" for d, m in zip(frame["device"], frame["model"])})
        raise NnperfError(
            f"{table} has no rows for device/model {device}/{model}; "
            f"allowed: {', '.join(pairs)}"
        )
    return chosen


def _ordered(summary: pd.DataFrame) -> pd.DataFrame:
    """Rows in the tables' order: batch size, precision (shared order), reference variant first."""
    rank = {p: i for i, p in enumerate(sort_precisions(summary["precision"]))}
    return (
        summary.assign(
            _precision=summary["precision"].map(rank),
            _variant=summary["variant"] != REFERENCE_VARIANT,
        )
        .sort_values(["batch_size", "_precision", "_variant", "variant"], kind="stable")
        .drop(columns=["_precision", "_variant"])
    )


def _batch_axis(ax, batch_sizes) -> None:
    """Batch sizes are usually powers of two: log2 axis, ticks at the sizes that ran."""
    sizes = sorted(set(int(b) for b in batch_sizes))
    if len(sizes) > 1:
        ax.set_xscale("log", base=2)
    ax.set_xticks(sizes)
    ax.set_xticklabels([str(s) for s in sizes])
    ax.minorticks_off()


def _step_text(row) -> str:
    """The measured step time of an over-budget configuration, `>=` when a lower bound."""
    step = row.get("single_step_time_s")
    if step is None or not np.isfinite(float(step)):
        return ""
    bound = ">= " if bool(row.get("single_step_time_is_lower_bound")) else ""
    return f"{bound}{float(step):.3g} s/step"


def _unmeasured_note(row) -> str:
    """`OOM` or `over budget (13.2 s/step)`: what a configuration without a number shows."""
    _, short, _, _ = UNMEASURED[row["status"]]
    step = _step_text(row) if row["status"] == "over_budget" else ""
    return f"{short} ({step})" if step else short


def _dodge(groups: list[tuple[str, str]]) -> dict[tuple[str, str], float]:
    """A multiplicative x offset per (precision, variant), centred on the batch size."""
    if len(groups) < 2:
        return {group: 1.0 for group in groups}
    offsets = np.linspace(-DODGE_OCTAVES / 2, DODGE_OCTAVES / 2, len(groups))
    return {group: float(2.0**offset) for group, offset in zip(groups, offsets)}


def _mark_unmeasured(ax, unmeasured: pd.DataFrame) -> None:
    """A labelled marker on the x axis for every batch size with configurations without a
    number, and its note(s) above it ("OOM", "over budget (13.2 s/step)")."""
    for status, (label, _, marker, colour) in UNMEASURED.items():
        rows = unmeasured[unmeasured["status"] == status]
        if rows.empty:
            continue
        sizes = sorted(rows["batch_size"].astype(int).unique())
        ax.scatter(
            sizes,
            np.zeros(len(sizes)),
            marker=marker,
            s=60,
            color=colour,
            label=label,
            zorder=3,
            clip_on=False,
        )
    for size, group in unmeasured.groupby("batch_size", sort=True):
        notes = list(dict.fromkeys(_unmeasured_note(row) for _, row in group.iterrows()))
        colour = UNMEASURED[group["status"].iloc[0]][3]
        ax.annotate(
            "\n".join(notes),
            (int(size), 0),
            textcoords="offset points",
            xytext=(0, 8),
            ha="center",
            va="bottom",
            color=colour,
            fontsize="small",
        )


def _process_points(ax, runs, device, model, shift, hue_order, palette) -> None:
    """Each worker process's throughput (runs.csv) as a faint point, dodged as its line."""
    points = _select(runs, device, model, "runs table")
    points = points[points["status"] == "ok"].astype({"throughput_img_s": float})
    points = points[np.isfinite(points["throughput_img_s"])]
    points = points[[(p, v) in shift for p, v in zip(points["precision"], points["variant"])]]
    if points.empty:
        return
    points = points.assign(
        _x=[
            b * shift[(p, v)]
            for b, p, v in zip(points["batch_size"], points["precision"], points["variant"])
        ]
    )
    sns.scatterplot(
        data=points,
        x="_x",
        y="throughput_img_s",
        hue="precision",
        hue_order=hue_order,
        palette=palette,
        alpha=0.35,
        s=14,
        linewidth=0,
        legend=False,
        ax=ax,
    )
    ax.scatter([], [], color="grey", alpha=0.5, s=14, label=PROCESS_LABEL)


def _ci_bars(ax, ok: pd.DataFrame, palette) -> None:
    """The 95% CI of every configuration that has one, as an error bar."""
    with_ci = ok[np.isfinite(ok["throughput_img_s_ci95_low"])]
    for precision, rows in with_ci.groupby("precision", sort=False):
        mean = rows["throughput_img_s_mean"].to_numpy()
        ax.errorbar(
            rows["_x"].to_numpy(),
            mean,
            yerr=[
                mean - rows["throughput_img_s_ci95_low"].to_numpy(),
                rows["throughput_img_s_ci95_high"].to_numpy() - mean,
            ],
            fmt="none",
            ecolor=palette[precision],
            capsize=3,
            linewidth=1,
            zorder=2.5,
        )


def throughput_figure(
    summary: pd.DataFrame, device: str, model: str, runs: pd.DataFrame | None = None
) -> Figure:
    """Mean throughput vs batch size with its 95% CI; hue precision, style variant; the
    per-process throughputs (from `runs`, when given) as faint points; no-number
    configurations marked on the axis."""
    chosen = _ordered(_select(summary, device, model, "summary table"))
    ok = chosen[chosen["status"] == "ok"].astype(
        {
            "throughput_img_s_mean": float,
            "throughput_img_s_ci95_low": float,
            "throughput_img_s_ci95_high": float,
        }
    )
    ok = ok[np.isfinite(ok["throughput_img_s_mean"])]
    unmeasured = chosen[chosen["status"].isin(list(UNMEASURED))]
    fig = Figure(figsize=(8.0, 4.2), layout="constrained")
    ax = fig.subplots()
    if not ok.empty:
        hue_order = sort_precisions(ok["precision"])
        palette = dict(zip(hue_order, sns.color_palette("colorblind", len(hue_order))))
        groups = list(dict.fromkeys(zip(ok["precision"], ok["variant"])))
        shift = _dodge(groups)
        ok = ok.assign(
            _x=[
                b * shift[(p, v)]
                for b, p, v in zip(ok["batch_size"], ok["precision"], ok["variant"])
            ]
        )
        if runs is not None:
            _process_points(ax, runs, device, model, shift, hue_order, palette)
        sns.lineplot(
            data=ok,
            x="_x",
            y="throughput_img_s_mean",
            hue="precision",
            hue_order=hue_order,
            palette=palette,
            style="variant",
            estimator=None,
            errorbar=None,
            markers=True,
            dashes=True,
            ax=ax,
        )
        _ci_bars(ax, ok, palette)
    if not unmeasured.empty:
        # Configurations without a throughput: marked on the axis so they are not missed.
        _mark_unmeasured(ax, unmeasured)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    _batch_axis(ax, chosen["batch_size"])
    ax.set_ylim(bottom=0)
    ax.set_xlabel(BATCH_XLABEL)
    ax.set_ylabel(THROUGHPUT_YLABEL)
    ax.set_title(f"{model} on {device}: training throughput (mean of processes, 95% CI)")
    return fig


def _configuration_label(row) -> str:
    return f"bs{row['batch_size']} {row['precision']} {row['variant']}"


def breakdown_figure(summary: pd.DataFrame, device: str, model: str) -> Figure:
    """Stacked bars of the median per-phase time of a step, one bar per configuration;
    configurations without a number get a note in place of their bar."""
    chosen = _ordered(_select(summary, device, model, "summary table")).reset_index(drop=True)
    labels = [_configuration_label(row) for _, row in chosen.iterrows()]
    measured = (chosen["status"] == "ok").to_numpy()
    phase_ms = pd.DataFrame(
        {
            phase: np.where(measured, chosen[f"{phase}_s_median"].to_numpy(dtype=float) * 1e3, 0.0)
            for phase in PHASES
        }
    ).fillna(0.0)
    width = max(6.4, 0.45 * len(labels) + 2.5)
    fig = Figure(figsize=(width, 5.0), layout="constrained")
    ax = fig.subplots()
    # seaborn has no stacked bars and pandas' .plot goes through pyplot: stack with ax.bar.
    positions = np.arange(len(labels))
    bottom = np.zeros(len(labels))
    for phase, colour in zip(PHASES, sns.color_palette("colorblind", len(PHASES))):
        heights = phase_ms[phase].to_numpy()
        ax.bar(
            positions[measured],
            heights[measured],
            width=0.8,
            bottom=bottom[measured],
            color=colour,
            label=phase,
        )
        bottom += heights
    for position, (_, row) in zip(positions, chosen.iterrows()):
        if row["status"] in UNMEASURED:
            ax.text(
                position,
                0,
                " " + _unmeasured_note(row),
                rotation=90,
                ha="center",
                va="bottom",
                color=UNMEASURED[row["status"]][3],
                fontsize="small",
            )
    # One line per label, upright: side by side, the multi-line labels of neighbouring bars
    # ran into each other ("baselinetuned"); a vertical label is as narrow as one text line.
    ax.set_xticks(positions, labels, rotation=90)
    ax.set_xlim(-0.6, len(labels) - 0.4)
    ax.set_xlabel("configuration (batch size, precision, variant)")
    ax.set_ylabel(BREAKDOWN_YLABEL)
    ax.legend(title="phase", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title(f"{model} on {device}: where a training step's time goes")
    return fig


def _ratio_marks(ax, shown: pd.DataFrame, hue_order: list) -> None:
    """Each bar's 95% CI of the ratio as a whisker, and NOT_SEPARATED above a bar whose
    verdict is neither faster nor slower: no bar reads as a win or a loss the data does not
    separate."""
    # seaborn draws one container per hue level, its bars in the order of the x levels.
    for container, level in zip(ax.containers, hue_order):
        rows = shown[shown["precision / variant"] == level].sort_values("a_batch_size")
        bounds = rows[["ci95_low", "ci95_high"]].apply(pd.to_numeric, errors="coerce")
        for bar, row, (lo, hi) in zip(container, rows.to_dict("records"), bounds.to_numpy(float)):
            x, height = bar.get_x() + bar.get_width() / 2, bar.get_height()
            bounded = bool(np.isfinite(lo) and np.isfinite(hi))
            if bounded:
                below, above = max(height - lo, 0), max(hi - height, 0)
                ax.errorbar(x, height, yerr=[[below], [above]], color="black", capsize=3, lw=1)
            if row["verdict"] not in ("faster", "slower"):
                ax.annotate(
                    NOT_SEPARATED,
                    (x, max(height, hi) if bounded else height),
                    xytext=(0, 2),
                    textcoords="offset points",
                    ha="center",
                    va="bottom",
                    fontsize="x-small",
                )


def speedup_figure(comparisons: pd.DataFrame, device: str, model: str) -> Figure:
    """Two panels from comparisons.csv: each precision vs fp32, and each variant vs baseline,
    per batch size (whiskers at each ratio's 95% CI, NOT_SEPARATED on the bars whose verdict
    is neither faster nor slower)."""
    chosen = comparisons[
        (comparisons["a_device"] == device)
        & (comparisons["a_model"] == model)
        & (comparisons["pair"] == "vs_reference")
    ].copy()
    chosen["precision / variant"] = chosen["a_precision"] + " / " + chosen["a_variant"]
    chosen["a_batch_size"] = chosen["a_batch_size"].astype(int)
    fig = Figure(figsize=(11, 4.6), layout="constrained")
    left, right = fig.subplots(1, 2)
    panels = (
        (left, "precision", SPEEDUP_FP32_YLABEL, f"precisions vs {REFERENCE_PRECISION}"),
        (right, "variant", SPEEDUP_BASELINE_YLABEL, f"variants vs {REFERENCE_VARIANT}"),
    )
    for ax, kind, ylabel, title in panels:
        shown = chosen[(chosen["kind"] == kind) & np.isfinite(chosen["ratio"].astype(float))]
        if shown.empty:
            ax.text(
                0.5,
                0.5,
                "no comparable configuration in this study",
                ha="center",
                va="center",
                transform=ax.transAxes,
            )
        else:
            hue_order = list(dict.fromkeys(shown["precision / variant"]))
            sns.barplot(
                data=shown,
                x="a_batch_size",
                y="ratio",
                hue="precision / variant",
                hue_order=hue_order,
                ax=ax,
                palette="colorblind",
                errorbar=None,
            )
            _ratio_marks(ax, shown, hue_order)
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.set_xlabel(BATCH_XLABEL)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
    fig.suptitle(f"{model} on {device}: speedups of mean throughput ({SPEEDUP_KEY})")
    return fig


def figure(
    request: FigureRequest, summary: pd.DataFrame, runs: pd.DataFrame | None = None
) -> Figure:
    """The figure `request.kind` names for its device and model, from summary.csv (and,
    for `throughput`, the per-process points of runs.csv when given)."""
    if request.model is None:
        raise NnperfError(f"{request.kind} figure: model is missing; allowed: a model name")
    if request.kind == "throughput":
        return throughput_figure(summary, request.device, request.model, runs)
    drawers = {"breakdown": breakdown_figure, "speedup": speedup_figure}
    if request.kind not in drawers:
        raise NnperfError(
            f"figure kind {request.kind!r} is unknown; allowed: {', '.join(FIGURE_KINDS)}"
        )
    return drawers[request.kind](summary, request.device, request.model)


# The columns each figure reads: summary.csv's by figure kind, and runs.csv's for the
# per-process points. A table without one is one line naming it (`results.read_table`).
_KEYS = (*CONFIG_KEYS, "status")
SUMMARY_COLUMNS = {
    "throughput": (
        *_KEYS,
        "throughput_img_s_mean",
        "throughput_img_s_ci95_low",
        "throughput_img_s_ci95_high",
    ),
    "breakdown": (*_KEYS, *(f"{phase}_s_median" for phase in PHASES)),
    # comparisons.csv's, for the speedup figure.
    "speedup": (
        "kind",
        "pair",
        "a_device",
        "a_model",
        "a_precision",
        "a_batch_size",
        "a_variant",
        "ratio",
        "ci95_low",
        "ci95_high",
        "verdict",
    ),
}
RUNS_COLUMNS = (*_KEYS, "throughput_img_s")


def draw(
    request: FigureRequest,
    table_path: str | os.PathLike,
    out_png: str | os.PathLike,
    runs_path: str | os.PathLike | None = None,
) -> None:
    """One figure of the timed runs, from summary.csv (comparisons.csv for the speedups; and
    runs.csv for the per-process points of the throughput figure) to a PNG (the `plot_*`
    rules of the timing stage)."""
    figure_name = f"the {request.kind} figure"
    summary = read_table(table_path, SUMMARY_COLUMNS.get(request.kind, ()), figure_name)
    runs = read_table(runs_path, RUNS_COLUMNS, figure_name) if runs_path is not None else None
    drawn = figure(request, summary, runs)
    save_png(drawn, out_png)
    print(f"{request.kind} figure of {request.device}/{request.model} -> {out_png}")
