"""Roofline figures: a hierarchical roofline per config and a step-level roofline per device.

Roof styles by origin (ncu profile dash-dot, measured solid, datasheet dashed, a CPU's
derived peak dotted and labelled "derived"). A step point above one of its roofs gets a red
ring and "above roof" in its label: a point cannot beat its roof, so that roof is
under-measured. Labels never overlap (`point_labels`). A roof the ceilings JSON leaves null
with a reason is not drawn; the legend says why. `write_figure` is the workflow's edge.
"""

from __future__ import annotations

import math
import os
import textwrap
from contextlib import contextmanager
from typing import Mapping, Sequence

import matplotlib as mpl
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from nnperf.core import files
from nnperf.core.contract import FigureRequest
from nnperf.core.errors import NnperfError
from nnperf.report.results import read_table
from nnperf.core.vocab import CONFIG_KEYS, PRECISIONS, sort_precisions
from nnperf.core.wording import missing
from nnperf.ncu import metrics
from nnperf.ncu.kernels import KIND_LABELS
from nnperf.report.bounds import LEVEL_LABELS
from nnperf.report.format import fmt_ghz, fmt_pct, fmt_si, truthy
from nnperf.report.plots.style import save_png
from nnperf.report.plots.point_labels import PointLabel, place_labels
from nnperf.roofline import peaks
from nnperf.roofline import points as roofline_points
from nnperf.roofline import tables as roofline_tables

# FigureRequest kinds: one configuration's hierarchical roofline, every step of a device.
KINDS = ("roofline", "roofline_steps")

X_LABEL = "Arithmetic intensity (FLOP/byte)"
Y_LABEL = "Performance (FLOP/s)"
LEVEL_MARKERS = {"dram": "o", "l2": "s", "l1": "^", "algorithmic": "X"}
ORIGIN_STYLES = {"ncu": "-.", "measured": "-", "datasheet": "--", "derived": ":"}
# A step point above one of its roofs gets a red ring (and its label says so).
ABOVE_ROOF_COLOUR = "red"
ABOVE_ROOF_LABEL = "above its roof: the roof is under-measured"
_ABOVE = {True: ", above roof", False: ""}
STEP_COLOURS = {"dram": "gold", "l2": "darkorange", "l1": "firebrick", "algorithmic": "black"}
# Marker areas (points^2) of the step points: stars in the configuration figure, the step
# figure's points.
CONFIG_STEP_MARKER_S = 260
DEVICE_STEP_MARKER_S = 90

# Width (characters) of a legend line saying why a roof is absent.
NOTE_WIDTH = 48


def _positive(frame: pd.DataFrame) -> pd.DataFrame:
    """The points a log-log plot can show. An empty table read from CSV (every configuration
    over budget) has text columns, hence the conversion."""
    x = pd.to_numeric(frame["arithmetic_intensity_flop_per_byte"], errors="coerce")
    y = pd.to_numeric(frame["performance_flop_s"], errors="coerce")
    return frame[(x > 0) & (y > 0) & np.isfinite(x) & np.isfinite(y)]


def roofs_from_ncu(
    ceilings: Mapping[str, float] | None,
    precision: str | None,
    tensor_peaks: Mapping[str, float] | None = None,
) -> list[dict]:
    """ncu ceilings (from `nnperf.roofline.points.ncu_ceilings`) as roof dicts.

    The tensor roof is the one of `precision`; `tensor_peaks` (precision -> FLOP/s) adds one
    per precision for figures that mix precisions.
    """
    if not ceilings:
        return []
    clock = ceilings.get("clock_hz", math.nan)
    clock_text = f" @ {fmt_ghz(clock)}" if clock and math.isfinite(clock) else ""
    compute = {"fp32": ceilings.get("peak_flop_s_fp32"), "fp16": ceilings.get("peak_flop_s_fp16")}
    # Tensor roofs are the dense rate (nnperf.ncu.metrics.kernel_quantities): say so on the label.
    if metrics.TENSOR_DTYPE_OF_PRECISION.get(precision):
        compute[f"tensor {precision} dense"] = ceilings.get("peak_flop_s_tensor")
    compute |= {f"tensor {p} dense": v for p, v in sorted((tensor_peaks or {}).items())}
    roofs = [("compute", f"ncu {name}{clock_text}", value) for name, value in compute.items()] + [
        ("memory", f"ncu {LEVEL_LABELS[level]}", ceilings.get(f"peak_bytes_s_{level}"))
        for level in ("dram", "l2", "l1")
    ]
    return [
        {"label": label, "kind": kind, "value": float(value), "origin": "ncu"}
        for kind, label, value in roofs
        if value and math.isfinite(value) and value > 0
    ]


def null_roof_notes(document: Mapping, precisions: Sequence[str]) -> list[str]:
    """Why a roof of `precisions` is absent: the ceilings JSON's datasheet (or derived) entry
    gives the peak as null with a reason (`flop_s_null_reasons`)."""
    sheet = document.get("datasheet") or {}
    reasons = sheet.get("flop_s_null_reasons") or {}
    origin = peaks.peak_origin(sheet)
    return [
        textwrap.fill(
            f"no {origin} {p} peak: {peaks.null_peak_reason(reasons[p], sheet)}", NOTE_WIDTH
        )
        for p in dict.fromkeys(precisions)
        if p in reasons and not (sheet.get("flop_s") or {}).get(p)
    ]


def _limits(points: pd.DataFrame, roofs: Sequence[dict]) -> tuple[tuple, tuple]:
    """Every point, roof and ridge point in view."""
    compute = [r["value"] for r in roofs if r["kind"] == "compute"]
    ridges = [c / r["value"] for c in compute for r in roofs if r["kind"] == "memory"]
    xs = np.array([*points["arithmetic_intensity_flop_per_byte"], *ridges], dtype=float)
    ys = np.array([*points["performance_flop_s"], *compute], dtype=float)
    xs, ys = xs[(xs > 0) & np.isfinite(xs)], ys[(ys > 0) & np.isfinite(ys)]
    xs, ys = xs if len(xs) else np.array([1.0]), ys if len(ys) else np.array([1e9])
    return (xs.min() / 4, xs.max() * 4), (ys.min() / 4, ys.max() * 3)


def _draw_roofs(ax, roofs: Sequence[dict], xlim: tuple) -> None:
    top = max((r["value"] for r in roofs if r["kind"] == "compute"), default=None)
    x = np.logspace(math.log10(xlim[0]), math.log10(xlim[1]), 200)
    palette = sns.color_palette("dark", max(len(roofs), 1))
    for colour, roof in zip(palette, roofs):
        line = {"linestyle": ORIGIN_STYLES.get(roof["origin"], ":"), "color": colour, "lw": 1.2}
        if roof["kind"] == "compute":
            text = f"{roof['label']}: {fmt_si(roof['value'], 'FLOP/s')}"
            ax.axhline(roof["value"], label=text, **line)
        else:
            y = x * roof["value"] if top is None else np.minimum(x * roof["value"], top)
            ax.plot(x, y, label=f"{roof['label']}: {fmt_si(roof['value'], 'B/s')}", **line)


def mark_above_roof(ax, steps: pd.DataFrame, roofs: Sequence[dict], marker_s: float) -> set:
    """Ring the step points above one of their roofs; return the positions (in `steps`) of
    the points ringed. One legend entry says what a ring means."""
    records = steps.to_dict("records")
    above = {i for i, row in enumerate(records) if roofline_points.roofs_exceeded(row, roofs)}
    if above:
        ringed = steps.iloc[sorted(above)]
        ax.scatter(
            ringed["arithmetic_intensity_flop_per_byte"],
            ringed["performance_flop_s"],
            marker="o",
            s=marker_s * 2.2,
            facecolors="none",
            edgecolors=ABOVE_ROOF_COLOUR,
            linewidth=1.6,
            zorder=6,
            label=ABOVE_ROOF_LABEL,
        )
    return above


@contextmanager
def themed():
    """seaborn's whitegrid/paper theme (and its palette) for a roofline figure alone, drawn
    and saved: `sns.set_theme` by itself would restyle every later figure of the process."""
    with mpl.rc_context():
        sns.set_theme(style="whitegrid", context="paper", color_codes=False)
        yield


def _axes(points: pd.DataFrame, roofs: Sequence[dict]):
    """A roofline figure with its roofs drawn, the points it can show and its limits."""
    fig = Figure(figsize=(10, 6))
    ax = fig.subplots()
    visible = _positive(points).copy()
    limits = _limits(visible, roofs)
    _draw_roofs(ax, roofs, limits[0])
    return fig, ax, visible, limits


def _finish(ax, fig, limits, title, steps, texts, roofs, marker_s, notes=()) -> Figure:
    """Ring the `steps` above a roof, finish the axes and label each step with its text."""
    above = mark_above_roof(ax, steps, roofs, marker_s)
    for note in notes:
        # A legend entry without a line: the text says which roof is absent and why.
        ax.plot([], [], linestyle="none", label=note)
    xlim, ylim = limits
    ax.set(xscale="log", yscale="log", xlim=xlim, ylim=ylim, xlabel=X_LABEL, ylabel=Y_LABEL)
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=7, frameon=False)
    else:
        ax.text(0.5, 0.5, "no roofline points", transform=ax.transAxes, ha="center")
    fig.tight_layout()
    # After the layout: labels are placed in display coordinates, which it changes.
    xy = zip(steps["arithmetic_intensity_flop_per_byte"], steps["performance_flop_s"])
    labels = [
        PointLabel(x, y, text + _ABOVE[i in above], math.sqrt(marker_s))
        for i, ((x, y), text) in enumerate(zip(xy, texts))
    ]
    place_labels(ax, labels)
    return fig


def _matching(frame: pd.DataFrame, keys: Mapping[str, object]) -> pd.DataFrame:
    """The rows whose key columns equal `keys` (batch_size compared as a number)."""
    typed = {key: int if key == "batch_size" else str for key in keys}
    return frame[(frame[list(keys)].astype(typed) == pd.Series(keys)).all(axis=1)]


def clocks_line(profile: Mapping | None) -> str:
    """The clocks beside a profiled step: ncu's, the timed runs' and the GPU's busy share of
    the timed step (a profiles.csv row), so nobody compares points at different clocks
    unawares."""
    if not profile:
        return ""
    text = (
        f"profiled at {fmt_ghz(profile.get('profiled_sm_clock_hz'))} SM clock "
        f"(ncu clock control {profile.get('clock_control', '?')}); timed runs at "
        f"{fmt_ghz(profile.get('run_sm_clock_hz'))}"
    )
    if not missing(profile.get("busy_share")):
        text += (
            f"; GPU busy {fmt_pct(profile['busy_share'])} of the "
            f"{float(profile['step_time_s']) * 1e3:.3g} ms timed step "
            f"({profile.get('busy_verdict')})"
        )
    if not truthy(profile.get("roof_ok", True)):
        text += "; profile roof FLAGGED by its calibration GEMM"
    return text


def _scatter_kernels(ax, visible: pd.DataFrame) -> None:
    """The profiled kernels: colour = kind, marker = memory level, size = time."""
    kernels = visible[visible["granularity"] == "kernel"]
    if kernels.empty:
        return
    kernels = kernels.assign(
        kind=kernels["kind"].map(KIND_LABELS).fillna(kernels["kind"]),
        **{
            "memory level": kernels["memory_level"].map(LEVEL_LABELS),
            "time (µs)": kernels["time_s"] * 1e6,
        },
    )
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


@themed()
def config_figure(
    points: pd.DataFrame,
    kernels: pd.DataFrame,
    ceilings: Mapping,
    request: FigureRequest,
    profiles: pd.DataFrame | None = None,
) -> Figure:
    """Hierarchical roofline of the configuration `request` names: its rows of
    roofline_points (kernels and steps, any source), its profile's own roofs (kernels.csv),
    the ceilings JSON's and legend lines for roofs left out. Each step point is labelled
    with its memory level; its profiles.csv row (when given) puts the clocks and the GPU's
    busy share under the title.

    A configuration that ran out of memory has no point: that is a result, drawn as an
    empty roofline with its roofs.
    """
    keys = {key: getattr(request, key) for key in CONFIG_KEYS}
    absent = [key for key, value in keys.items() if value is None]
    if absent:
        raise NnperfError(f"a {request.kind} figure needs {', '.join(absent)}")
    selected = _matching(points, keys)
    profile = roofline_points.step_kernels(_matching(kernels, keys))
    sources = ", ".join(sorted(set(selected["source"]))) or "no points: out of memory or not timed"
    title = (
        f"{request.device} {request.model} {request.precision} bs{request.batch_size} "
        f"{request.variant}: hierarchical roofline ({sources})"
    )
    match = _matching(profiles, keys) if profiles is not None and not profiles.empty else None
    clocks = clocks_line(match.iloc[0].to_dict() if match is not None and len(match) else None)
    title += f"\n{clocks}" if clocks else ""
    precision = request.precision
    ncu = roofline_points.ncu_ceilings(profile) if not profile.empty else None
    known = [precision] if precision in PRECISIONS else []
    json_roofs = roofline_points.json_ceilings(ceilings, known) if known else []
    roofs = [*roofs_from_ncu(ncu, precision), *json_roofs]
    fig, ax, visible, limits = _axes(selected, roofs)
    _scatter_kernels(ax, visible)
    steps = visible[visible["granularity"] == "step"]
    level = steps["memory_level"].map(LEVEL_LABELS).fillna(steps["memory_level"])
    analytic = steps["source"] == "analytic"
    for (is_analytic, memory_level, text), group in steps.groupby(
        [analytic, "memory_level", level]
    ):
        ax.scatter(
            group["arithmetic_intensity_flop_per_byte"],
            group["performance_flop_s"],
            marker="X" if is_analytic else "*",
            s=CONFIG_STEP_MARKER_S,
            color=STEP_COLOURS.get(memory_level, "grey"),
            edgecolor="black",
            linewidth=0.8,
            zorder=5,
            label="analytic step (algorithmic bytes)" if is_analytic else f"ncu step ({text})",
        )
    texts = np.where(analytic, "step, analytic", "step, " + level)
    notes = null_roof_notes(ceilings, [precision])
    return _finish(ax, fig, limits, title, steps, texts, roofs, CONFIG_STEP_MARKER_S, notes)


@themed()
def device_figure(
    points: pd.DataFrame, kernels: pd.DataFrame, ceilings: Mapping, device: str
) -> Figure:
    """Step-level roofline of every configuration on `device`: ncu's step at DRAM (the
    measured level closest to algorithmic traffic) and the analytic one, with one ncu tensor
    roof per profiled precision. Colour = model / precision, marker = source; each point
    labelled with its batch size and variant."""
    device_points = points[points["device"].astype(str) == device]
    source, level = device_points["source"], device_points["memory_level"]
    shown = ((source == "ncu") & (level == "dram")) | (source == "analytic")
    steps = device_points[(device_points["granularity"] == "step") & shown]
    profile = roofline_points.step_kernels(kernels[kernels["device"].astype(str) == device])
    tensor_peaks = {
        precision: roofline_points.ncu_ceilings(group)["peak_flop_s_tensor"]
        for precision, group in profile.groupby("precision")
    }
    ncu = roofline_points.ncu_ceilings(profile) if not profile.empty else None
    finite_peaks = {p: v for p, v in tensor_peaks.items() if math.isfinite(v)}
    precisions = [p for p in sort_precisions(device_points["precision"]) if p in PRECISIONS]
    roofs = [
        *roofs_from_ncu(ncu, None, finite_peaks),
        *roofline_points.json_ceilings(ceilings, precisions),
    ]
    fig, ax, visible, limits = _axes(steps, roofs)
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
            s=DEVICE_STEP_MARKER_S,
            ax=ax,
            legend="brief",
        )
    texts = [f"bs{b} {v}" for b, v in zip(visible["batch_size"], visible["variant"])]
    sources = sorted(set(steps["source"])) if not steps.empty else []
    title = f"{device}: training-step roofline ({', '.join(sources) or 'no points'})"
    notes = null_roof_notes(ceilings, precisions)
    return _finish(ax, fig, limits, title, visible, texts, roofs, DEVICE_STEP_MARKER_S, notes)


def write_figure(
    request: FigureRequest,
    points: str | os.PathLike,
    ceilings: str | os.PathLike | None,
    kernels: str | os.PathLike | None,
    out: str | os.PathLike,
    profiles: str | os.PathLike | None = None,
) -> None:
    """Draw the roofline figure `request` names from roofline_points.csv, the device's
    ceilings JSON, kernels.csv and profiles.csv (None: no configuration was profiled), and
    save it."""
    if request.kind not in KINDS:
        raise NnperfError(f"figure kind {request.kind!r} is not a roofline; allowed: {KINDS}")
    table = roofline_tables.read_points(points)
    profile = roofline_tables.read_kernels(kernels)
    document = files.read_json(ceilings) if ceilings is not None else {}
    # Saved under the theme too: ticks the save adds read the settings then.
    with themed():
        if request.kind == "roofline":
            what = "the configuration roofline"
            checks = read_table(profiles, CONFIG_KEYS, what) if profiles is not None else None
            figure = config_figure(table, profile, document, request, checks)
        else:
            figure = device_figure(table, profile, document, request.device)
        save_png(figure, out, bbox_inches="tight")
