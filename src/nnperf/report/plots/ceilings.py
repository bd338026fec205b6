"""The working-set sweep of a ceilings document: read bandwidth against working-set size (log
x), the device's caches marked and the main-memory roofs for reference. `draw(json, png)` is
rule `plot_ceilings`. The roofs of the roofline figures are `plots.roofline`'s.
Not here: measuring (`nnperf.roofline.ceilings`).
"""

from __future__ import annotations

import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator

from nnperf.core.files import read_json
from nnperf.report.format import fmt_bytes, fmt_si
from nnperf.report.plots.style import save_png


def sweep_figure(ceilings_doc: dict) -> Figure:
    """Read bandwidth vs working-set size, caches marked, main-memory roofs as reference."""
    measured = ceilings_doc["measured"]
    frame = pd.DataFrame(measured["sweep"]).set_index("working_set_bytes") / 1e9
    fig = Figure(figsize=(7.5, 4.5), layout="constrained")
    ax = fig.add_subplot()
    sns.lineplot(frame["bandwidth_bytes_s"], marker="o", ax=ax, label="read, best of trials")
    if "bandwidth_bytes_s_median" in frame:
        sns.lineplot(
            frame["bandwidth_bytes_s_median"],
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
    for cache in ceilings_doc.get("caches") or []:
        name = cache.get("name") or f"L{cache['level']}"
        scope = " per core" if cache.get("shared_cpu_count") == 1 else ""
        ax.axvline(cache["size_bytes"], color="gray", linestyle=":", linewidth=1)
        ax.annotate(
            f"{name} {fmt_bytes(cache['size_bytes'])}{scope}",
            xy=(cache["size_bytes"], 1),
            xycoords=("data", "axes fraction"),
            xytext=(3, -3),
            textcoords="offset points",
            rotation=90,
            va="top",
            fontsize="small",
            color="gray",
        )
    roof = measured.get("memory_bandwidth_bytes_s")
    if roof:
        kernel = measured.get("memory_bandwidth_kernel", "copy/triad")
        label = f"main memory, {kernel} (STREAM counting): {fmt_si(roof, 'B/s')}"
        ax.axhline(roof / 1e9, color="black", linewidth=1.5, label=label)
    sheet = (ceilings_doc.get("datasheet") or {}).get("memory_bandwidth_bytes_s")
    if sheet:
        label = f"datasheet memory: {fmt_si(sheet, 'B/s')}"
        ax.axhline(sheet / 1e9, color="dimgray", linestyle="--", linewidth=1.5, label=label)
    ax.set_xlabel("working set")
    ax.set_ylabel("bandwidth (GB/s)")
    threads = ceilings_doc.get("threads")
    device = f"{ceilings_doc.get('device', '?')}{f', {threads} threads' if threads else ''}"
    title = f"{ceilings_doc.get('device_name', '?')} ({device}): working-set sweep"
    ax.set_title(title, fontsize="medium")
    ax.legend(fontsize="small", loc="lower left")
    return fig


def draw(ceilings_json, out_png) -> None:
    """The working-set sweep of one ceilings JSON as a PNG (the device named inside it)."""
    save_png(sweep_figure(read_json(ceilings_json)), out_png)
