"""Figures of the timed runs, one per (device, model): throughput, phase breakdown, speedups.

Throughput is summary.csv's mean with its 95% CI, so figure and table agree, and runs.csv's
per-process throughputs beside it, so the spread behind the interval is visible. A
configuration without a number is marked with a note, never drawn as a value.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from nnperf.core.contract import FigureRequest
from nnperf.core.errors import NnperfError
from nnperf.core.layout import RUN_FIGURE_KINDS as FIGURE_KINDS
from nnperf.core.vocab import CONFIG_KEYS, PHASES, REFERENCE_PRECISION, REFERENCE_VARIANT
from nnperf.core.vocab import sort_precisions
from nnperf.report.format import CI_HIGH, CI_LOW, MEAN, in_report_order
from nnperf.report.plots import style
from nnperf.report.results import read_table

BATCH_XLABEL = "batch size"
HUE = "precision / variant"  # the speedup bars' colour
PROCESS_LABEL = "one worker process"
PROCESS_POINTS = {"alpha": 0.35, "s": 14, "linewidth": 0, "legend": False}
# On a speedup bar whose ratio's 95% CI includes 1 (or has none): not separated.
NOT_SEPARATED = "n.s."
SPEEDUP_KEY = f"whiskers: 95% CI of the ratio; {NOT_SEPARATED}: not separated from 1"
# How a configuration without a number is marked: (legend label, short text, marker, colour).
OVER_BUDGET = "over budget (step too slow for the time budget)"
UNMEASURED = {
    "oom": ("out of memory", "OOM", "v", "firebrick"),
    "over_budget": (OVER_BUDGET, "over budget", "X", "darkorange"),
    "host_busy": ("host busy (too few clean windows)", "host busy", "P", "slategray"),
}
# Groups sharing a batch size are spread over this many octaves so their points stay apart.
DODGE_OCTAVES = 0.25
# The columns each figure reads of summary.csv (comparisons.csv for the speedups) and runs.csv;
# a table without one is one line naming it (`results.read_table`).
_KEYS = (*CONFIG_KEYS, "status")
RATIO_COLUMNS = ("kind", "pair", "ratio", "ci95_low", "ci95_high", "verdict")
SUMMARY_COLUMNS = {
    "throughput": (*_KEYS, MEAN, CI_LOW, CI_HIGH),
    "breakdown": (*_KEYS, *(f"{phase}_s_median" for phase in PHASES)),
    "speedup": (*RATIO_COLUMNS, *(f"a_{key}" for key in CONFIG_KEYS)),
}
RUNS_COLUMNS = (*_KEYS, "throughput_img_s")


def _select(frame: pd.DataFrame, device: str, model: str, table: str) -> pd.DataFrame:
    """The rows of `device` and `model` in the report's order."""
    chosen = frame[(frame["device"] == device) & (frame["model"] == model)]
    if chosen.empty:
        pairs = sorted({f"{d}/{m}" for d, m in zip(frame["device"], frame["model"])})
        allowed = f"allowed: {', '.join(pairs)}"
        raise NnperfError(f"{table} has no rows for device/model {device}/{model}; {allowed}")
    keys = ["batch_size", "precision", "variant"]
    return chosen.sort_values(keys, key=in_report_order, kind="stable")


def _whiskers(ax, x, y, low, high, colour, **errorbar) -> None:
    """A 95% CI around each `y` (a bound on the wrong side of `y` draws no whisker)."""
    yerr = [np.maximum(y - low, 0), np.maximum(high - y, 0)]
    ax.errorbar(x, y, yerr=yerr, fmt="none", ecolor=colour, capsize=3, lw=1, **errorbar)


def _unmeasured_note(row) -> str:
    """`OOM` or `over budget (13.2 s/step)` (`>=` when the step time is a lower bound)."""
    short = UNMEASURED[row["status"]][1]
    step = row.get("single_step_time_s")
    if row["status"] != "over_budget" or step is None or not np.isfinite(float(step)):
        return short
    bound = ">= " if bool(row.get("single_step_time_is_lower_bound")) else ""
    return f"{short} ({bound}{float(step):.3g} s/step)"


def _dodged(frame: pd.DataFrame, groups: list) -> pd.DataFrame:
    """The rows of `groups`, `_x` their batch size shifted so groups sharing one stay apart."""
    octaves = DODGE_OCTAVES * (np.arange(len(groups)) - (len(groups) - 1) / 2)
    shift = dict(zip(groups, 2.0 ** (octaves / max(len(groups) - 1, 1))))
    factor = pd.Series(list(zip(frame["precision"], frame["variant"])), frame.index).map(shift)
    return frame[factor.notna()].copy().assign(_x=frame["batch_size"].astype(float) * factor)


def throughput_figure(
    summary: pd.DataFrame, device: str, model: str, runs: pd.DataFrame | None = None
) -> Figure:
    """Mean throughput vs batch size with its 95% CI, each process's (`runs`) as a point."""
    chosen = _select(summary, device, model, "summary table")
    ok = chosen[chosen["status"] == "ok"]
    ok = ok.astype({c: float for c in ok.columns if c.startswith("throughput_img_s_")})
    ok = ok[np.isfinite(ok[MEAN])]
    fig, ax = style.figure(8.0, 4.2)
    if not ok.empty:
        palette = style.palette(sort_precisions(ok["precision"]))
        groups = list(dict.fromkeys(zip(ok["precision"], ok["variant"])))
        ok = _dodged(ok, groups)
        colours = {"hue": "precision", "hue_order": list(palette), "palette": palette, "ax": ax}
        if runs is not None:
            processes = _select(runs, device, model, "runs table")
            processes = processes[processes["status"] == "ok"].astype({"throughput_img_s": float})
            processes = _dodged(processes.dropna(subset=["throughput_img_s"]), groups)
            sns.scatterplot(processes, x="_x", y="throughput_img_s", **PROCESS_POINTS, **colours)
            ax.scatter([], [], color="grey", alpha=0.5, s=14, label=PROCESS_LABEL)
        line = {"style": "variant", "estimator": None, "markers": True}
        sns.lineplot(ok, x="_x", y=MEAN, **line, **colours)
        for precision, rows in ok.dropna(subset=[CI_LOW]).groupby("precision"):
            interval = rows[MEAN], rows[CI_LOW], rows[CI_HIGH]
            _whiskers(ax, rows["_x"], *interval, palette[precision], zorder=2.5)
    # A marker on the x axis at each batch size without a number, its notes above it.
    unmeasured = chosen[chosen["status"].isin(list(UNMEASURED))]
    for status, rows in unmeasured.groupby("status"):
        label, _, marker, colour = UNMEASURED[status]
        sizes = sorted(rows["batch_size"].astype(int).unique())
        ax.scatter(sizes, [0] * len(sizes), marker=marker, s=60, color=colour, label=label)
    for size, group in unmeasured.groupby("batch_size", sort=True):
        notes = "\n".join(dict.fromkeys(_unmeasured_note(row) for _, row in group.iterrows()))
        colour = UNMEASURED[group["status"].iloc[0]][3]
        style.above(ax, notes, (int(size), 0), 8, color=colour, fontsize="small")
    if ax.get_legend_handles_labels()[0]:
        style.legend_right(ax, fontsize="small")
    sizes = sorted(set(chosen["batch_size"].astype(int)))
    if len(sizes) > 1:  # batch sizes are usually powers of two
        ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [str(s) for s in sizes])
    ax.minorticks_off()
    ax.set(xlabel=BATCH_XLABEL, ylabel="throughput (images/s)", ylim=(0, None))
    ax.set_title(f"{model} on {device}: training throughput (mean of processes, 95% CI)")
    return fig


def breakdown_figure(summary: pd.DataFrame, device: str, model: str) -> Figure:
    """Stacked bars of the median per-phase step time, a note in place of a missing bar."""
    chosen = _select(summary, device, model, "summary table").reset_index(drop=True)
    labels = "bs" + chosen[["batch_size", "precision", "variant"]].astype(str).agg(" ".join, axis=1)
    measured = chosen["status"] == "ok"
    phase_ms = chosen.loc[measured, [f"{p}_s_median" for p in PHASES]].astype(float).fillna(0) * 1e3
    bottoms = phase_ms.cumsum(axis=1) - phase_ms
    fig, ax = style.figure(max(6.4, 0.45 * len(labels) + 2.5), 5.0)
    # seaborn has no stacked bars and pandas' stacked bars draw the unmeasured ones too.
    for column, (phase, colour) in zip(phase_ms, style.palette(PHASES).items()):
        ax.bar(phase_ms.index, phase_ms[column], bottom=bottoms[column], color=colour, label=phase)
    for position, row in chosen[~measured].iterrows():
        note, colour = " " + _unmeasured_note(row), UNMEASURED[row["status"]][3]
        style.above(ax, note, (position, 0), rotation=90, color=colour, fontsize="small")
    # One line per label, upright: side by side, the multi-line labels of neighbouring bars
    # ran into each other ("baselinetuned"); a vertical label is as narrow as one text line.
    ax.set_xticks(range(len(labels)), labels, rotation=90)
    ax.set(xlabel="configuration (batch size, precision, variant)", xlim=(-0.6, len(labels) - 0.4))
    ax.set_ylabel("median time per step (ms)")
    style.legend_right(ax, title="phase")
    ax.set_title(f"{model} on {device}: where a training step's time goes")
    return fig


def _ratio_marks(ax, shown: pd.DataFrame, hue_order: list) -> None:
    """Whiskers and NOT_SEPARATED marks: no bar reads as a win the data does not separate."""
    # seaborn draws one container per hue level, its bars in the order of the x levels.
    for container, level in zip(ax.containers, hue_order):
        rows = shown[shown[HUE] == level].sort_values("a_batch_size")
        x = np.array([bar.get_x() + bar.get_width() / 2 for bar in container])
        ratio = np.array([bar.get_height() for bar in container])
        low, high = rows[["ci95_low", "ci95_high"]].apply(pd.to_numeric, errors="coerce").T.values
        bounded = np.isfinite(low) & np.isfinite(high)
        if bounded.any():
            _whiskers(ax, x[bounded], ratio[bounded], low[bounded], high[bounded], "black")
        top = np.where(bounded, np.fmax(ratio, high), ratio)
        for xy, verdict in zip(zip(x, top), rows["verdict"]):
            if verdict not in ("faster", "slower"):
                style.above(ax, NOT_SEPARATED, xy, 2, fontsize="x-small")


def speedup_figure(comparisons: pd.DataFrame, device: str, model: str) -> Figure:
    """Two panels from comparisons.csv: each precision vs fp32, each variant vs baseline."""
    chosen = comparisons.query("a_device == @device and a_model == @model")
    chosen = chosen[chosen["pair"] == "vs_reference"]
    label = chosen["a_precision"] + " / " + chosen["a_variant"]
    chosen = chosen.assign(a_batch_size=chosen["a_batch_size"].astype(int), **{HUE: label})
    fig, axes = style.figure(11, 4.6, 1, 2)
    panels = (
        ("precision", REFERENCE_PRECISION, f"speedup vs {REFERENCE_PRECISION} (x)"),
        ("variant", REFERENCE_VARIANT, f"speedup vs {REFERENCE_VARIANT} variant (x)"),
    )
    for ax, (kind, reference, ylabel) in zip(axes, panels):
        shown = chosen[(chosen["kind"] == kind) & np.isfinite(chosen["ratio"].astype(float))]
        if shown.empty:
            style.note(ax, "no comparable configuration in this study")
        else:
            bars = {"hue": HUE, "palette": "colorblind", "errorbar": None}
            sns.barplot(shown, x="a_batch_size", y="ratio", ax=ax, **bars)
            _ratio_marks(ax, shown, list(dict.fromkeys(shown[HUE])))
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.set(xlabel=BATCH_XLABEL, ylabel=ylabel, title=f"{kind}s vs {reference}")
    fig.suptitle(f"{model} on {device}: speedups of mean throughput ({SPEEDUP_KEY})")
    return fig


def figure(
    request: FigureRequest, summary: pd.DataFrame, runs: pd.DataFrame | None = None
) -> Figure:
    if request.model is None:
        raise NnperfError(f"{request.kind} figure: model is missing; allowed: a model name")
    if request.kind not in FIGURE_KINDS:
        allowed = ", ".join(FIGURE_KINDS)
        raise NnperfError(f"figure kind {request.kind!r} is unknown; allowed: {allowed}")
    if request.kind == "throughput":
        return throughput_figure(summary, request.device, request.model, runs)
    drawer = breakdown_figure if request.kind == "breakdown" else speedup_figure
    return drawer(summary, request.device, request.model)


def draw(
    request: FigureRequest,
    table_path: style.PathArg,
    out_png: style.PathArg,
    runs_path: style.PathArg | None = None,
) -> None:
    """One figure of the timed runs as a PNG (the timing stage's `plot_*` rules)."""
    figure_name = f"the {request.kind} figure"
    summary = read_table(table_path, SUMMARY_COLUMNS.get(request.kind, ()), figure_name)
    runs = read_table(runs_path, RUNS_COLUMNS, figure_name) if runs_path is not None else None
    done = f"{request.kind} figure of {request.device}/{request.model}"
    style.save_png(figure(request, summary, runs), out_png, done)
