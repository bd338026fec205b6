"""Roofline figures: a hierarchical roofline per config and a step-level roofline per device.

A step point above one of its roofs gets a red ring and "above roof" in its label: a point
cannot beat its roof, so that roof is under-measured. A roof the ceilings JSON leaves null
with a reason is not drawn; the legend says why.
"""

from __future__ import annotations

import math
import textwrap
from contextlib import contextmanager
from typing import Mapping, Sequence

import matplotlib as mpl
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure
from matplotlib.transforms import Bbox

from nnperf.core import files
from nnperf.core.contract import FigureRequest
from nnperf.core.errors import NnperfError
from nnperf.core.vocab import CONFIG_KEYS, PRECISIONS, sort_precisions
from nnperf.core.wording import missing
from nnperf.ncu import metrics
from nnperf.ncu.kernels import KIND_LABELS
from nnperf.report.bounds import LEVEL_LABELS
from nnperf.report.format import fmt_ghz, fmt_pct, fmt_si, truthy
from nnperf.report.plots.style import PathArg, save_png
from nnperf.report.results import read_table
from nnperf.roofline import peaks
from nnperf.roofline import points as roofline_points
from nnperf.roofline import tables as roofline_tables

# FigureRequest kinds: one configuration's hierarchical roofline, every step of a device.
KINDS = ("roofline", "roofline_steps")
X, Y = "arithmetic_intensity_flop_per_byte", "performance_flop_s"
LEVEL_MARKERS = {"dram": "o", "l2": "s", "l1": "^", "algorithmic": "X"}
LEVELS = ("dram", "l2", "l1")  # the memory levels ncu measures a roof of
ORIGIN_STYLES = {"ncu": "-.", "measured": "-", "datasheet": "--", "derived": ":"}
STEP_COLOURS = {"dram": "gold", "l2": "darkorange", "l1": "firebrick", "algorithmic": "black"}
# A step point above one of its roofs gets a red ring (and its label says so).
ABOVE_ROOF_LABEL = "above its roof: the roof is under-measured"
RING = {"marker": "o", "facecolors": "none", "edgecolors": "red", "linewidth": 1.6, "zorder": 6}
RING["label"] = ABOVE_ROOF_LABEL
# The configuration figure's step points: stars (`s`: a marker's area, points^2).
CONFIG_STEP = {"s": 260, "edgecolor": "black", "linewidth": 0.8, "zorder": 5}
# The profiled kernels: colour = kind, marker = memory level, size = time.
KERNELS = {"hue": "kind", "style": "memory level", "size": "time (µs)", "sizes": (15, 250)}
KERNELS |= {"markers": {LEVEL_LABELS[k]: v for k, v in LEVEL_MARKERS.items()}, "alpha": 0.7}
# The step figure: colour = model / precision, marker = source (named as its legend names it).
ANALYTIC_STEP, NCU_STEP = "analytic (algorithmic bytes)", "ncu (DRAM bytes)"
DEVICE_STEPS = {"hue": "model / precision", "style": "source", "s": 90}
DEVICE_STEPS |= {"markers": {ANALYTIC_STEP: "X", NCU_STEP: "o"}, "legend": "brief"}
# Width (characters) of a legend line saying why a roof is absent.
NOTE_WIDTH = 48


def roofs_from_ncu(profile: pd.DataFrame, precision: str | None) -> list[dict]:
    """The roofs a profile's kernels measure: fp32, fp16 and the tensor roof of `precision`
    (None: one per profiled precision). Tensor roofs are the dense rate: their labels say so."""
    if profile.empty:
        return []
    ceilings = roofline_points.ncu_ceilings(profile)
    clock = ceilings.get("clock_hz", math.nan)
    at = f" @ {fmt_ghz(clock)}" if clock and math.isfinite(clock) else ""
    compute = {"fp32": ceilings.get("peak_flop_s_fp32"), "fp16": ceilings.get("peak_flop_s_fp16")}
    if metrics.TENSOR_DTYPE_OF_PRECISION.get(precision):
        compute[f"tensor {precision} dense"] = ceilings.get("peak_flop_s_tensor")
    if precision is None:
        tensor = {p: roofline_points.ncu_ceilings(k) for p, k in profile.groupby("precision")}
        compute |= {f"tensor {p} dense": c["peak_flop_s_tensor"] for p, c in tensor.items()}
    memory = {LEVEL_LABELS[level]: ceilings.get(f"peak_bytes_s_{level}") for level in LEVELS}
    roofs = [("compute", f"ncu {name}{at}", value) for name, value in compute.items()]
    roofs += [("memory", f"ncu {name}", value) for name, value in memory.items()]
    return [
        {"label": label, "kind": kind, "value": float(value), "origin": "ncu"}
        for kind, label, value in roofs
        if value and math.isfinite(value) and value > 0
    ]


def null_roof_notes(document: Mapping, precisions: Sequence[str]) -> list[str]:
    """Why a roof of `precisions` is absent: the ceilings JSON's datasheet (or derived) entry
    gives the peak as null with a reason (`flop_s_null_reasons`)."""
    sheet = document.get("datasheet") or {}
    reasons, drawn = sheet.get("flop_s_null_reasons") or {}, sheet.get("flop_s") or {}
    absent = [p for p in dict.fromkeys(precisions) if p in reasons and not drawn.get(p)]
    origin = peaks.peak_origin(sheet)
    notes = (f"no {origin} {p} peak: {peaks.null_peak_reason(reasons[p], sheet)}" for p in absent)
    return [textwrap.fill(note, NOTE_WIDTH) for note in notes]


@contextmanager
def themed():
    """seaborn's whitegrid/paper theme (and its palette) for a roofline figure alone, drawn
    and saved: `sns.set_theme` by itself would restyle every later figure of the process."""
    with mpl.rc_context():
        sns.set_theme(style="whitegrid", context="paper", color_codes=False)
        yield


def _span(values, default: float) -> tuple[float, float]:
    values = np.array(values, dtype=float)
    values = values[(values > 0) & np.isfinite(values)]
    return (values.min(), values.max()) if len(values) else (default, default)


def _axes(points: pd.DataFrame, roofs: Sequence[dict]):
    """The axes, roofs drawn, and the points a log plot shows (an empty CSV reads as text)."""
    ax = Figure(figsize=(10, 6)).subplots()
    x, y = (pd.to_numeric(points[c], errors="coerce") for c in (X, Y))
    visible = points[(x > 0) & (y > 0) & np.isfinite(x) & np.isfinite(y)].copy()
    compute = [r["value"] for r in roofs if r["kind"] == "compute"]
    ridges = [c / r["value"] for c in compute for r in roofs if r["kind"] == "memory"]
    (x0, x1), (y0, y1) = _span([*visible[X], *ridges], 1.0), _span([*visible[Y], *compute], 1e9)
    xlim, ylim = (x0 / 4, x1 * 4), (y0 / 4, y1 * 3)
    lines = np.logspace(math.log10(xlim[0]), math.log10(xlim[1]), 200)
    for colour, roof in zip(sns.color_palette("dark", max(len(roofs), 1)), roofs):
        line = {"linestyle": ORIGIN_STYLES.get(roof["origin"], ":"), "color": colour, "lw": 1.2}
        unit = "FLOP/s" if roof["kind"] == "compute" else "B/s"
        line["label"] = f"{roof['label']}: {fmt_si(roof['value'], unit)}"
        if roof["kind"] == "compute":
            ax.axhline(roof["value"], **line)
        else:
            ax.plot(lines, np.minimum(lines * roof["value"], max(compute, default=np.inf)), **line)
    ax.set(xlim=xlim, ylim=ylim, xscale="log", yscale="log", ylabel="Performance (FLOP/s)")
    ax.set_xlabel("Arithmetic intensity (FLOP/byte)")
    return ax, visible


def _finish(ax, title, steps, texts, roofs, marker_s, ceilings, precisions) -> Figure:
    """Ring the `steps` above a roof, list why a roof of `precisions` is absent, label each step."""
    above = [bool(roofline_points.roofs_exceeded(row, roofs)) for row in steps.to_dict("records")]
    if any(above):
        ax.scatter(steps[X][above], steps[Y][above], s=marker_s * 2.2, **RING)
    for note in null_roof_notes(ceilings, precisions):
        # A legend entry without a line: the text says which roof is absent and why.
        ax.plot([], [], linestyle="none", label=note)
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=7, frameon=False)
    else:
        ax.text(0.5, 0.5, "no roofline points", transform=ax.transAxes, ha="center")
    ax.figure.tight_layout()
    # After the layout: labels are placed in display coordinates, which it changes.
    texts = [text + (", above roof" if over else "") for text, over in zip(texts, above)]
    place_labels(ax, steps, texts, math.sqrt(marker_s))
    return ax.figure


def _matching(frame: pd.DataFrame, keys: Mapping[str, object]) -> pd.DataFrame:
    typed = {key: int if key == "batch_size" else str for key in keys}
    return frame[(frame[list(keys)].astype(typed) == pd.Series(keys)).all(axis=1)]


def clocks_line(profile: Mapping) -> str:
    """A profile's clocks, so nobody compares points at different clocks unawares."""
    text = (
        f"profiled at {fmt_ghz(profile.get('profiled_sm_clock_hz'))} SM clock "
        f"(ncu clock control {profile.get('clock_control', '?')}); timed runs at "
        f"{fmt_ghz(profile.get('run_sm_clock_hz'))}"
    )
    if not missing(profile.get("busy_share")):
        step_ms = float(profile["step_time_s"]) * 1e3
        text += f"; GPU busy {fmt_pct(profile['busy_share'])} of the {step_ms:.3g} ms timed step"
        text += f" ({profile.get('busy_verdict')})"
    if not truthy(profile.get("roof_ok", True)):
        text += "; profile roof FLAGGED by its calibration GEMM"
    return text


@themed()
def config_figure(
    points: pd.DataFrame,
    kernels: pd.DataFrame,
    ceilings: Mapping,
    request: FigureRequest,
    profiles: pd.DataFrame | None = None,
) -> Figure:
    """Hierarchical roofline of the configuration `request` names. One that ran out of memory
    has no point: that is a result, drawn as an empty roofline with its roofs."""
    keys = {key: getattr(request, key) for key in CONFIG_KEYS}
    if absent := [key for key, value in keys.items() if value is None]:
        raise NnperfError(f"a {request.kind} figure needs {', '.join(absent)}")
    selected = _matching(points, keys)
    sources = ", ".join(sorted(set(selected["source"]))) or "no points: out of memory or not timed"
    name = " ".join(f"bs{v}" if k == "batch_size" else str(v) for k, v in keys.items())
    title = f"{name}: hierarchical roofline ({sources})"
    match = _matching(profiles, keys) if profiles is not None and not profiles.empty else []
    if len(match):
        title += f"\n{clocks_line(match.iloc[0].to_dict())}"
    precision = request.precision
    roofs = roofs_from_ncu(roofline_points.step_kernels(_matching(kernels, keys)), precision)
    if precision in PRECISIONS:
        roofs += roofline_points.json_ceilings(ceilings, [precision])
    ax, visible = _axes(selected, roofs)
    kernels = visible[visible["granularity"] == "kernel"]
    if not kernels.empty:
        kind = kernels["kind"].map(KIND_LABELS).fillna(kernels["kind"])
        level, time_us = kernels["memory_level"].map(LEVEL_LABELS), kernels["time_s"] * 1e6
        kernels = kernels.assign(kind=kind, **{"memory level": level, "time (µs)": time_us})
        sns.scatterplot(data=kernels, x=X, y=Y, ax=ax, legend="brief", **KERNELS)
    steps = visible[visible["granularity"] == "step"]
    level = steps["memory_level"].map(LEVEL_LABELS).fillna(steps["memory_level"])
    analytic = steps["source"] == "analytic"
    groups = steps.groupby([analytic, "memory_level", level])
    for (is_analytic, memory_level, text), group in groups:
        label = "analytic step (algorithmic bytes)" if is_analytic else f"ncu step ({text})"
        colour = STEP_COLOURS.get(memory_level, "grey")
        marker = "X" if is_analytic else "*"
        ax.scatter(group[X], group[Y], marker=marker, color=colour, label=label, **CONFIG_STEP)
    texts = np.where(analytic, "step, analytic", "step, " + level)
    return _finish(ax, title, steps, texts, roofs, CONFIG_STEP["s"], ceilings, [precision])


@themed()
def device_figure(
    points: pd.DataFrame, kernels: pd.DataFrame, ceilings: Mapping, device: str
) -> Figure:
    """Step-level roofline of `device`: analytic steps and ncu's at DRAM (closest to them)."""
    device_points = points[points["device"].astype(str) == device]
    source, level = device_points["source"], device_points["memory_level"]
    shown = ((source == "ncu") & (level == "dram")) | (source == "analytic")
    steps = device_points[(device_points["granularity"] == "step") & shown]
    profile = roofline_points.step_kernels(kernels[kernels["device"].astype(str) == device])
    precisions = [p for p in sort_precisions(device_points["precision"]) if p in PRECISIONS]
    roofs = roofs_from_ncu(profile, None) + roofline_points.json_ceilings(ceilings, precisions)
    ax, visible = _axes(steps, roofs)
    if not visible.empty:
        visible["source"] = np.where(visible["source"] == "analytic", ANALYTIC_STEP, NCU_STEP)
        visible["model / precision"] = visible["model"] + " / " + visible["precision"]
        sns.scatterplot(data=visible, x=X, y=Y, ax=ax, **DEVICE_STEPS)
    texts = [f"bs{b} {v}" for b, v in zip(visible["batch_size"], visible["variant"])]
    sources = ", ".join(sorted(set(steps["source"]))) or "no points"
    title = f"{device}: training-step roofline ({sources})"
    return _finish(ax, title, visible, texts, roofs, DEVICE_STEPS["s"], ceilings, precisions)


def write_figure(
    request: FigureRequest,
    points: PathArg,
    ceilings: PathArg | None,
    kernels: PathArg | None,
    out: PathArg,
    profiles: PathArg | None = None,
) -> None:
    """Draw and save the roofline figure `request` names (`profiles` None: none profiled)."""
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


# --- Labels beside the step points that never overlap -------------------------------------
# adjustText's repulsion does not promise disjoint boxes: each label takes the nearest offset
# whose box stays inside the axes and clear of every point and label placed before. An offset
# is (dx, dy, radius) in points; the label sits on the far side of its anchor from the point.
LABEL_OFFSETS_PT = [
    (r * math.cos(math.radians(a)), r * math.sin(math.radians(a)), r)
    for r in (5, 10, 16, 24, 34, 46, 60, 78, 100, 128, 160)
    for a in (45, 135, -45, -135, 0, 180, 90, -90, 20, 160, -20, -160, 70, 110, -70, -110)
]
LABEL_PAD_PT = 1.5
# A label whose anchor is more than this beyond its point's marker gets a leader line; labels
# sit on a white patch above the lines, so a leader passing behind one does not cross its text.
LEADER_GAP_PT = 8.0
LEADER_STYLE = {"arrowstyle": "-", "color": "0.4", "linewidth": 0.5, "shrinkA": 0}
LABEL_STYLE = {"textcoords": "offset points", "zorder": 6, "fontsize": 6}
LABEL_STYLE["bbox"] = {"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none"}
KEY_STYLE = {"xycoords": "axes fraction", "xytext": (0, -40), "textcoords": "offset points"}
KEY_STYLE |= {"ha": "left", "va": "top", "fontsize": LABEL_STYLE["fontsize"]}


def place_labels(ax, steps: pd.DataFrame, texts: Sequence[str], marker_pt: float) -> None:
    """Label each point of `steps` once the layout is final (placement is in display pixels).
    A label without room becomes `[1]`, written out in a key under the axes. `marker_pt`: the
    markers' width (a leader line stops at a marker's edge)."""
    renderer = FigureCanvasAgg(ax.figure).get_renderer()
    pixels_per_pt = ax.figure.dpi / 72
    pad = LABEL_PAD_PT * pixels_per_pt
    frame = ax.get_window_extent(renderer).padded(-pad)
    taken = []  # the boxes a label keeps clear of: every marker's, then every label's
    for dots in (c for c in ax.collections if isinstance(c, PathCollection)):
        offsets = np.ma.getdata(dots.get_offsets()).astype(float)
        centres = dots.get_offset_transform().transform(offsets)
        # A scatter's size is the marker's area in points^2: its side is sqrt(size).
        sides = np.broadcast_to(np.sqrt(dots.get_sizes()) * pixels_per_pt, len(centres))
        taken += [Bbox([xy - s / 2, xy + s / 2]) for xy, s in zip(centres, sides)]

    def place(x: float, y: float, text: str) -> bool:
        label = ax.annotate(text, (x, y), (0, 0), **LABEL_STYLE)
        for dx, dy, radius in LABEL_OFFSETS_PT:
            # Alignment by side: True - False indexes the middle, the start or the end.
            ha = ("center", "left", "right")[(dx > 0.3 * radius) - (dx < -0.3 * radius)]
            va = ("center", "bottom", "top")[(dy > 0.3 * radius) - (dy < -0.3 * radius)]
            label.set(position=(dx, dy), ha=ha, va=va)
            box = label.get_window_extent(renderer)
            inside = (frame.min <= box.min).all() and (box.max <= frame.max).all()
            if inside and not box.padded(pad).count_overlaps(taken):
                taken.append(box)
                label.remove()
                leader = {**LEADER_STYLE, "shrinkB": marker_pt / 2 + 1}
                arrow = leader if radius - marker_pt / 2 > LEADER_GAP_PT else None
                ax.annotate(text, (x, y), (dx, dy), ha=ha, va=va, arrowprops=arrow, **LABEL_STYLE)
                return True
        label.remove()
        return False

    unplaced = [point for point in zip(steps[X], steps[Y], texts) if not place(*point)]
    key, lost = ["Points labelled by number:"], []
    for x, y, text in unplaced:
        if place(x, y, f"[{len(key)}]"):
            key.append(f"[{len(key)}] {text}")
        else:
            lost.append(
                f"{text}: at {x:.3g} FLOP/byte, {fmt_si(y, 'FLOP/s')} (no room for a label)"
            )
    if unplaced:
        ax.annotate("\n".join(key + lost), (0.0, 0.0), **KEY_STYLE)
