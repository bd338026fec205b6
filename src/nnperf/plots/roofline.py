"""Roofline figures: a hierarchical roofline per config and a step-level roofline per device.

Takes rows of `roofline_points.csv` (and optionally the profile's own ceilings and a ceilings
JSON) and returns a matplotlib Figure; saving is the caller's job. Ceiling styles: the ncu
profile's `peak_sustained x clock` dash-dot, measured roofs solid, datasheet roofs dashed, each
labelled with its value. Points: sized by time, coloured by kernel kind, marker by memory level;
step points are stars; analytic points say "analytic" in the legend.

Not here: computing points or ceilings (`nnperf.roofline`).
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from nnperf.kernels import KIND_LABELS  # noqa: E402

X_LABEL = "Arithmetic intensity (FLOP/byte)"
Y_LABEL = "Performance (FLOP/s)"
LEVEL_MARKERS = {"dram": "o", "l2": "s", "l1": "^", "algorithmic": "X"}
LEVEL_LABELS = {"dram": "DRAM", "l2": "L2", "l1": "L1", "algorithmic": "algorithmic"}
ORIGIN_STYLES = {"ncu": "-.", "measured": "-", "datasheet": "--"}
STEP_COLOURS = {"dram": "gold", "l2": "darkorange", "l1": "firebrick", "algorithmic": "black"}


def format_flop_s(value: float) -> str:
    """'312 TFLOP/s' style label."""
    return _format(value, "FLOP/s")


def format_bytes_s(value: float) -> str:
    """'2.04 TB/s' style label."""
    return _format(value, "B/s")


def _format(value: float, unit: str) -> str:
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def _positive(frame: pd.DataFrame) -> pd.DataFrame:
    x = frame["arithmetic_intensity_flop_per_byte"]
    y = frame["performance_flop_s"]
    return frame[(x > 0) & (y > 0) & np.isfinite(x) & np.isfinite(y)]


def roofs_from_ncu(
    ceilings: Mapping[str, float] | None,
    precision: str | None,
    tensor_peaks: Mapping[str, float] | None = None,
) -> list[dict]:
    """ncu ceilings (from `nnperf.roofline.ncu_ceilings`) as roof dicts.

    The tensor roof is the one of `precision`; `tensor_peaks` (precision -> FLOP/s) adds one
    per precision for figures that mix precisions.
    """
    if not ceilings:
        return []
    roofs = []
    clock = ceilings.get("clock_hz", math.nan)
    clock_text = f" @ {clock / 1e9:.2f} GHz" if clock and math.isfinite(clock) else ""
    compute = [("fp32", "peak_flop_s_fp32"), ("fp16", "peak_flop_s_fp16")]
    if precision in ("tf32", "fp16", "bf16"):
        compute.append((f"tensor {precision}", "peak_flop_s_tensor"))
    values = [(name, ceilings.get(key, math.nan)) for name, key in compute]
    values += [(f"tensor {p}", v) for p, v in sorted((tensor_peaks or {}).items())]
    for name, value in values:
        if value and math.isfinite(value) and value > 0:
            roofs.append(
                {
                    "label": f"ncu {name}{clock_text}",
                    "kind": "compute",
                    "value": float(value),
                    "origin": "ncu",
                }
            )
    for level in ("dram", "l2", "l1"):
        value = ceilings.get(f"peak_bytes_s_{level}", math.nan)
        if value and math.isfinite(value) and value > 0:
            roofs.append(
                {
                    "label": f"ncu {LEVEL_LABELS[level]}",
                    "kind": "memory",
                    "value": float(value),
                    "origin": "ncu",
                }
            )
    return roofs


def _limits(points: pd.DataFrame, roofs: Sequence[dict]) -> tuple[tuple, tuple]:
    xs = list(points["arithmetic_intensity_flop_per_byte"])
    ys = list(points["performance_flop_s"])
    compute = [r["value"] for r in roofs if r["kind"] == "compute"]
    memory = [r["value"] for r in roofs if r["kind"] == "memory"]
    for peak in compute:
        for bandwidth in memory:
            xs.append(peak / bandwidth)  # ridge points
    ys += compute
    xs = [x for x in xs if x > 0 and math.isfinite(x)] or [1.0]
    ys = [y for y in ys if y > 0 and math.isfinite(y)] or [1e9]
    xlim = (min(xs) / 4, max(xs) * 4)
    ylim = (min(ys) / 4, max(ys) * 3)
    return xlim, ylim


def _draw_roofs(ax, roofs: Sequence[dict], xlim: tuple) -> None:
    top = max((r["value"] for r in roofs if r["kind"] == "compute"), default=None)
    x = np.logspace(math.log10(xlim[0]), math.log10(xlim[1]), 200)
    palette = sns.color_palette("dark", max(len(roofs), 1))
    for colour, roof in zip(palette, roofs):
        style = ORIGIN_STYLES.get(roof["origin"], ":")
        if roof["kind"] == "compute":
            text = f"{roof['label']}: {format_flop_s(roof['value'])}"
            ax.axhline(roof["value"], linestyle=style, color=colour, linewidth=1.2, label=text)
        else:
            text = f"{roof['label']}: {format_bytes_s(roof['value'])}"
            y = x * roof["value"]
            if top is not None:
                y = np.minimum(y, top)
            ax.plot(x, y, linestyle=style, color=colour, linewidth=1.2, label=text)


def _finish(ax, fig: Figure, xlim: tuple, ylim: tuple, title: str) -> Figure:
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_xlabel(X_LABEL)
    ax.set_ylabel(Y_LABEL)
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=7, frameon=False)
    else:
        ax.text(0.5, 0.5, "no roofline points", transform=ax.transAxes, ha="center")
    fig.tight_layout()
    return fig


def plot_config_roofline(
    points: pd.DataFrame,
    *,
    title: str,
    ncu_ceilings: Mapping[str, float] | None = None,
    json_roofs: Sequence[dict] = (),
    precision: str | None = None,
) -> Figure:
    """Hierarchical roofline of one config.

    `points`: that config's rows of roofline_points (kernel and step granularity, any source).
    `ncu_ceilings`: the profile's own ceilings; `json_roofs`: from `nnperf.roofline.json_ceilings`.
    """
    sns.set_theme(style="whitegrid", context="paper")
    fig, ax = plt.subplots(figsize=(10, 6))
    roofs = [*roofs_from_ncu(ncu_ceilings, precision), *json_roofs]
    visible = _positive(points)
    xlim, ylim = _limits(visible, roofs)
    _draw_roofs(ax, roofs, xlim)

    kernels = visible[visible["granularity"] == "kernel"].copy()
    if not kernels.empty:
        kernels["kind"] = kernels["kind"].map(KIND_LABELS).fillna(kernels["kind"])
        kernels["memory level"] = kernels["memory_level"].map(LEVEL_LABELS)
        kernels["time (µs)"] = kernels["time_s"] * 1e6
        sns.scatterplot(
            data=kernels,
            x="arithmetic_intensity_flop_per_byte",
            y="performance_flop_s",
            hue="kind",
            style="memory level",
            markers={LEVEL_LABELS[k]: v for k, v in LEVEL_MARKERS.items()},
            size="time (µs)",
            sizes=(15, 250),
            alpha=0.7,
            ax=ax,
            legend="brief",
        )
    steps = visible[visible["granularity"] == "step"]
    for row in steps.itertuples(index=False):
        analytic = row.source == "analytic"
        level = LEVEL_LABELS.get(row.memory_level, row.memory_level)
        label = "analytic step (algorithmic bytes)" if analytic else f"ncu step ({level})"
        ax.scatter(
            [row.arithmetic_intensity_flop_per_byte],
            [row.performance_flop_s],
            marker="X" if analytic else "*",
            s=260,
            color=STEP_COLOURS.get(row.memory_level, "grey"),
            edgecolor="black",
            linewidth=0.8,
            zorder=5,
            label=label,
        )
    return _finish(ax, fig, xlim, ylim, title)


def plot_device_steps(
    points: pd.DataFrame,
    *,
    device: str,
    json_roofs: Sequence[dict] = (),
    ncu_ceilings: Mapping[str, float] | None = None,
    ncu_tensor_peaks: Mapping[str, float] | None = None,
) -> Figure:
    """Step-level roofline of every config on `device`.

    Uses each config's step point: ncu at DRAM (the measured level closest to algorithmic
    traffic) and analytic at `algorithmic`. Colour = model, marker = precision; each point is
    annotated with its batch size and variant.
    """
    sns.set_theme(style="whitegrid", context="paper")
    fig, ax = plt.subplots(figsize=(10, 6))
    steps = points[
        (points["device"] == device)
        & (points["granularity"] == "step")
        & (
            ((points["source"] == "ncu") & (points["memory_level"] == "dram"))
            | (points["source"] == "analytic")
        )
    ]
    visible = _positive(steps).copy()
    roofs = [*roofs_from_ncu(ncu_ceilings, None, ncu_tensor_peaks), *json_roofs]
    xlim, ylim = _limits(visible, roofs)
    _draw_roofs(ax, roofs, xlim)
    if not visible.empty:
        visible["source"] = np.where(
            visible["source"] == "analytic", "analytic (algorithmic bytes)", "ncu (DRAM bytes)"
        )
        visible["model / precision"] = visible["model"] + " / " + visible["precision"]
        sns.scatterplot(
            data=visible,
            x="arithmetic_intensity_flop_per_byte",
            y="performance_flop_s",
            hue="model / precision",
            style="source",
            markers={"analytic (algorithmic bytes)": "X", "ncu (DRAM bytes)": "o"},
            s=90,
            ax=ax,
            legend="brief",
        )
        for row in visible.itertuples(index=False):
            ax.annotate(
                f"bs{row.batch_size} {row.variant}",
                (row.arithmetic_intensity_flop_per_byte, row.performance_flop_s),
                textcoords="offset points",
                xytext=(5, 4),
                fontsize=6,
            )
    sources = sorted(set(steps["source"])) if not steps.empty else []
    title = f"{device}: training-step roofline ({', '.join(sources) or 'no points'})"
    return _finish(ax, fig, xlim, ylim, title)
