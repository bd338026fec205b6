"""The working-set sweep of a ceilings document (rule `plot_ceilings`): read bandwidth against
working-set size, the device's caches marked and the main-memory roofs for reference."""

from __future__ import annotations

import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator

from nnperf.core.files import read_json
from nnperf.report.format import fmt_bytes, fmt_si
from nnperf.report.plots import style

# A cache's name, upright along its line from the top of the axes.
CACHE_TEXT = {"xycoords": ("data", "axes fraction"), "xytext": (3, -3), "rotation": 90}
CACHE_TEXT |= {"textcoords": "offset points", "va": "top", "fontsize": "small", "color": "gray"}


def sweep_figure(ceilings_doc: dict) -> Figure:
    measured = ceilings_doc["measured"]
    frame = pd.DataFrame(measured["sweep"]).set_index("working_set_bytes") / 1e9
    fig, ax = style.figure(7.5, 4.5)
    sns.lineplot(frame["bandwidth_bytes_s"], marker="o", ax=ax, label="read, best of trials")
    if "bandwidth_bytes_s_median" in frame:
        median = frame["bandwidth_bytes_s_median"]
        ax.plot(median.index, median, ":", color="C0", alpha=0.4, label="read, median of trials")
    ax.set(yscale="log", xlabel="working set", ylabel="bandwidth (GB/s)")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(LogLocator(base=2, numticks=40))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt_bytes(v) if v >= 1 else ""))
    ax.tick_params(axis="x", labelrotation=45, labelsize="small")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    for cache in ceilings_doc.get("caches") or []:
        size, name = cache["size_bytes"], cache.get("name") or f"L{cache['level']}"
        scope = " per core" if cache.get("shared_cpu_count") == 1 else ""
        ax.axvline(size, color="gray", linestyle=":", linewidth=1)
        ax.annotate(f"{name} {fmt_bytes(size)}{scope}", (size, 1), **CACHE_TEXT)
    kernel = measured.get("memory_bandwidth_kernel", "copy/triad")
    sheet = (ceilings_doc.get("datasheet") or {}).get("memory_bandwidth_bytes_s")
    roofs = (
        (measured.get("memory_bandwidth_bytes_s"), f"main memory, {kernel} (STREAM counting)", "-"),
        (sheet, "datasheet memory", "--"),
    )
    for (value, name, line), colour in zip(roofs, ("black", "dimgray")):
        if value:
            label = f"{name}: {fmt_si(value, 'B/s')}"
            ax.axhline(value / 1e9, color=colour, linestyle=line, linewidth=1.5, label=label)
    threads = ceilings_doc.get("threads")
    device = f"{ceilings_doc.get('device', '?')}{f', {threads} threads' if threads else ''}"
    title = f"{ceilings_doc.get('device_name', '?')} ({device}): working-set sweep"
    ax.set_title(title, fontsize="medium")
    ax.legend(fontsize="small", loc="lower left")
    return fig


def draw(ceilings_json, out_png) -> None:
    """The working-set sweep of one ceilings JSON as a PNG (the device named inside it)."""
    style.save_png(sweep_figure(read_json(ceilings_json)), out_png)
