"""Figures from a ceilings document: the working-set sweep, and roofs for roofline axes.

* `sweep_figure(doc)` draws read bandwidth against working-set size (log x), with the
  cache sizes of the device marked and the main-memory roof for reference; `draw(json,
  png)` is rule `plot_ceilings` (one device's ceilings JSON to its PNG);
* `draw_roofs(ax, doc, dtype)` adds the compute and memory roofs of one precision to a
  roofline axes: measured solid, datasheet dashed, each labelled with its values. The
  roofline figures call it; it does not draw points.

Figures are built on `matplotlib.figure.Figure` directly, never pyplot, so importing this
module changes no global backend state and works headless.
Not here: measuring (`nnperf.roofline.ceilings`), the roofline points themselves.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator

from nnperf.core.files import read_json
from nnperf.report.plots.style import save_png
from nnperf.report.format import fmt_bytes, fmt_si

# Arithmetic-intensity range drawn when the axes has no data yet (FLOP/byte): spans
# elementwise ops (~0.1) to large GEMMs (~1000).
DEFAULT_INTENSITY_RANGE = (1e-2, 1e4)
MEASURED_STYLE = {"linestyle": "-", "linewidth": 2.0, "color": "black"}
DATASHEET_STYLE = {"linestyle": "--", "linewidth": 1.5, "color": "dimgray"}


def _roof_sets(
    ceilings_doc: dict, dtype: str
) -> list[tuple[str, float | None, float | None, dict]]:
    """(label prefix, compute FLOP/s, memory bytes/s, style) for measured and datasheet roofs."""
    measured = ceilings_doc.get("measured") or {}
    sets = [
        (
            "measured",
            (measured.get("gemm_flop_s") or {}).get(dtype),
            measured.get("memory_bandwidth_bytes_s"),
            MEASURED_STYLE,
        )
    ]
    sheet = ceilings_doc.get("datasheet")
    if sheet:
        prefix = "derived peak" if sheet.get("derived") else "datasheet"
        sets.append(
            (
                prefix,
                (sheet.get("flop_s") or {}).get(dtype),
                sheet.get("memory_bandwidth_bytes_s"),
                DATASHEET_STYLE,
            )
        )
    return sets


def draw_roofs(
    ax, ceilings_doc: dict, dtype: str, *, intensity_range: tuple[float, float] | None = None
) -> list:
    """Draw measured (solid) and datasheet (dashed) roofs of `dtype` on a roofline axes.

    x is arithmetic intensity (FLOP/byte), y is FLOP/s, both log. A source with both a
    compute and a memory roof is drawn as min(peak, bandwidth x intensity); one with only
    one of them as that single line. Each line is labelled (legend) with its values.
    Returns the artists drawn, in order measured then datasheet.
    """
    if intensity_range is None:
        intensity_range = ax.get_xlim() if ax.has_data() else DEFAULT_INTENSITY_RANGE
    low, high = intensity_range
    ax.set_xscale("log")
    ax.set_yscale("log")
    intensity = np.logspace(np.log10(low), np.log10(high), 256)
    artists = []
    for prefix, peak, bandwidth, style in _roof_sets(ceilings_doc, dtype):
        if peak is None and bandwidth is None:
            continue
        parts = []
        if peak is not None:
            parts.append(f"{dtype} {fmt_si(peak, 'FLOP/s')}")
        if bandwidth is not None:
            parts.append(f"memory {fmt_si(bandwidth, 'B/s')}")
        if peak is not None and bandwidth is not None:
            roof = np.minimum(peak, bandwidth * intensity)
        elif peak is not None:
            roof = np.full_like(intensity, peak)
        else:
            roof = bandwidth * intensity
        (line,) = ax.plot(intensity, roof, label=f"{prefix}: {', '.join(parts)}", **style)
        artists.append(line)
        if peak is not None:
            artists.append(
                ax.annotate(
                    fmt_si(peak, "FLOP/s"),
                    xy=(high, peak),
                    xytext=(-4, 3),
                    textcoords="offset points",
                    ha="right",
                    va="bottom",
                    fontsize="small",
                    color=style["color"],
                )
            )
    ax.set_xlim(low, high)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("performance (FLOP/s)")
    return artists


def sweep_figure(ceilings_doc: dict) -> Figure:
    """Read bandwidth vs working-set size, caches marked, main-memory roofs as reference."""
    measured = ceilings_doc["measured"]
    frame = pd.DataFrame(measured["sweep"])
    frame["bandwidth_gb_s"] = frame["bandwidth_bytes_s"] / 1e9
    fig = Figure(figsize=(7.5, 4.5), layout="constrained")
    ax = fig.add_subplot()
    sns.lineplot(
        data=frame,
        x="working_set_bytes",
        y="bandwidth_gb_s",
        marker="o",
        ax=ax,
        label="read, best of trials",
        color="C0",
    )
    if "bandwidth_bytes_s_median" in frame:
        sns.lineplot(
            x=frame["working_set_bytes"],
            y=frame["bandwidth_bytes_s_median"] / 1e9,
            ax=ax,
            label="read, median of trials",
            color="C0",
            alpha=0.4,
            linestyle=":",
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=2, numticks=40))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt_bytes(v) if v >= 1 else ""))
    ax.tick_params(axis="x", labelrotation=45, labelsize="small")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    threads = ceilings_doc.get("threads")
    for cache in ceilings_doc.get("caches") or []:
        shared = cache.get("shared_cpu_count")
        scope = " per core" if shared == 1 else ""
        ax.axvline(cache["size_bytes"], color="gray", linestyle=":", linewidth=1)
        ax.annotate(
            f"{cache.get('name') or 'L' + str(cache['level'])} {fmt_bytes(cache['size_bytes'])}{scope}",
            xy=(cache["size_bytes"], 1),
            xycoords=("data", "axes fraction"),
            xytext=(3, -3),
            textcoords="offset points",
            rotation=90,
            va="top",
            ha="left",
            fontsize="small",
            color="gray",
        )
    roof = measured.get("memory_bandwidth_bytes_s")
    if roof:
        kernel = measured.get("memory_bandwidth_kernel", "copy/triad")
        ax.axhline(
            roof / 1e9,
            color="black",
            linewidth=1.5,
            label=f"main memory, {kernel} (STREAM counting): {fmt_si(roof, 'B/s')}",
        )
    sheet = (ceilings_doc.get("datasheet") or {}).get("memory_bandwidth_bytes_s")
    if sheet:
        ax.axhline(
            sheet / 1e9,
            color="dimgray",
            linestyle="--",
            linewidth=1.5,
            label=f"datasheet memory: {fmt_si(sheet, 'B/s')}",
        )
    ax.set_xlabel("working set")
    ax.set_ylabel("bandwidth (GB/s)")
    thread_text = f", {threads} threads" if threads else ""
    ax.set_title(
        f"{ceilings_doc.get('device_name', '?')} ({ceilings_doc.get('device', '?')}{thread_text}): "
        "working-set sweep",
        fontsize="medium",
    )
    ax.legend(fontsize="small", loc="lower left")
    return fig


def draw(ceilings_json, out_png) -> None:
    """The working-set sweep of one ceilings JSON as a PNG (the device named inside it)."""
    save_png(sweep_figure(read_json(ceilings_json)), out_png)
