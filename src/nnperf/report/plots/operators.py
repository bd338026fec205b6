"""Figures of one configuration's operator profile: its top operators (host self time beside
device self time; host only on the CPU) from `nnperf.torchprof.analysis`' table, and its peak
memory by category beside the complexity stage's estimate (`nnperf.torchprof.memory`). A
profile that did not run gets a figure with its reason, so every configuration has one.
What the numbers mean is `nnperf.report.sections.operators`'."""

from __future__ import annotations

import os
from typing import Mapping

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from nnperf.core.errors import NnperfError
from nnperf.core.files import load_json
from nnperf.report.plots import style
from nnperf.report.format import config_text
from nnperf.report.results import read_table
from nnperf.torchprof import analysis
from nnperf.torchprof.memory import CATEGORY_LABELS, MEMORY_CATEGORIES

TIME_XLABEL = "time per step (ms)"
MEMORY_XLABEL = "allocated memory (MiB)"
MIB = 2**20
# Operator names run long (`autograd::engine::evaluate_function: ConvolutionBackward0`);
# longer ones are shortened in the middle so the labels keep to the left margin.
MAX_LABEL_CHARACTERS = 48
DEFAULT_TOP = 10
HOST_LABEL, DEVICE_LABEL = "host self time", "device self time"
MEASURED_LABEL, ESTIMATE_LABEL = "measured at the peak", "complexity estimate"
FIGURES = ("operators", "memory")


def short_label(text: str, limit: int = MAX_LABEL_CHARACTERS) -> str:
    """`text`, or its start and end around an ellipsis when longer than `limit`."""
    if len(text) <= limit:
        return text
    head = (limit - 1) // 2
    return text[:head] + "…" + text[-(limit - 1 - head) :]


def _title(document: Mapping, what: str) -> str:
    return f"{config_text(document)} on {document['device']}: {what}"


def _note_figure(document: Mapping, what: str) -> Figure:
    """The figure of a profile that did not run: its status and reason, centred."""
    fig, ax = style.figure(8.0, 2.4)
    ax.set_axis_off()
    reason = short_label(str(document.get("error") or "no data"), 110)
    style.note(ax, f"not profiled ({document.get('status')}):\n{reason}")
    ax.set_title(_title(document, what))
    return fig


def top_operators_figure(document: Mapping, table: pd.DataFrame, n: int = DEFAULT_TOP) -> Figure:
    """Host and device self time per step of the `n` operators with the most time (device
    time where the device was seen, else host time)."""
    what = "top operators"
    if document.get("status") != "ok" or table is None or table.empty:
        return _note_figure(document, what)
    column = analysis.time_column(table)
    chosen = analysis.top(table, n, column)
    has_device = column.startswith("device")
    bars = {"host_self_time_s": HOST_LABEL}
    if has_device:
        bars["device_self_time_s"] = DEVICE_LABEL
    wide = chosen[list(bars)].apply(pd.to_numeric, errors="coerce").fillna(0.0) * 1e3
    wide = wide.rename(columns=bars).set_index(chosen["operator"].astype(str).map(short_label))
    long = wide.melt(var_name="time", value_name="time_ms", ignore_index=False).reset_index()
    fig, ax = style.figure(9.0, 1.2 + 0.38 * len(chosen) * len(bars))
    palette = dict(zip([HOST_LABEL, DEVICE_LABEL], sns.color_palette("colorblind", 2)))
    sns.barplot(long, y="operator", x="time_ms", hue="time", palette=palette, errorbar=None, ax=ax)
    ax.set(xlabel=TIME_XLABEL, ylabel="")
    ranked = "device" if has_device else "host"
    step = (document.get("summary") or {}).get("step_time_s")
    subtitle = f"ranked by {ranked} time"
    if step:
        subtitle += f"; step {step * 1e3:.3g} ms"
    if not has_device:
        subtitle += "\nno device time: on the CPU the operators run on the host"
    ax.set_title(f"{_title(document, what)}\n{subtitle}", fontsize="medium")
    ax.legend(title=None, loc="lower right")
    return fig


def memory_figure(document: Mapping, table: pd.DataFrame) -> Figure:
    """The peak allocated memory split by category (stacked bar) beside the complexity
    stage's estimate of the same categories; the estimate's bar is missing categories it
    does not count ("other")."""
    what = "peak memory"
    memory = document.get("memory") or {}
    if document.get("status") != "ok" or table is None or table.empty:
        return _note_figure(document, what)
    rows = table.set_index("category")
    colours = dict(zip(MEMORY_CATEGORIES, sns.color_palette("colorblind", len(MEMORY_CATEGORIES))))
    bars = [(MEASURED_LABEL, "bytes")]
    if pd.to_numeric(rows["estimate_bytes"], errors="coerce").notna().any():
        bars.append((ESTIMATE_LABEL, "estimate_bytes"))
    fig, ax = style.figure(9.0, 1.6 + 0.9 * len(bars))
    positions = np.arange(len(bars))[::-1]
    for position, (_, column) in zip(positions, bars):
        left = 0.0
        for category in MEMORY_CATEGORIES:
            value = pd.to_numeric(rows.at[category, column], errors="coerce")
            if pd.isna(value) or value <= 0:
                continue
            mib = float(value) / MIB
            ax.barh(position, mib, left=left, color=colours[category], height=0.6)
            left += mib
        ax.text(left, position, f" {left:,.1f} MiB", va="center", fontsize="small")
    handles = [Patch(color=colours[c], label=CATEGORY_LABELS[c]) for c in MEMORY_CATEGORIES]
    ax.set_yticks(positions, [label for label, _ in bars])
    ax.set_xlabel(MEMORY_XLABEL)
    ax.margins(x=0.15)
    style.legend_right(ax, handles=handles, fontsize="small")
    subtitle = f"peak {memory.get('peak_allocated_bytes', 0) / MIB:,.1f} MiB"
    if memory.get("peak_phase"):
        subtitle += f" (in {memory['peak_phase']})"
    total, largest = memory.get("device_total_bytes"), memory.get("max_batch_size")
    if total:
        subtitle += f"; device memory {total / 2**30:,.1f} GiB"
    if largest:
        subtitle += f"\na batch of about {int(largest):,} would fit (linear model)"
    ax.set_title(f"{_title(document, what)}\n{subtitle}", fontsize="medium")
    return fig


def figure(kind: str, document: Mapping, table: pd.DataFrame, n: int | None = None) -> Figure:
    """The figure `kind` (`FIGURES`) of one profile."""
    if kind == "operators":
        top = n or (document.get("settings") or {}).get("top_operators", DEFAULT_TOP)
        return top_operators_figure(document, table, top)
    if kind == "memory":
        return memory_figure(document, table)
    raise NnperfError(f"figure kind {kind!r} is unknown; allowed: {', '.join(FIGURES)}")


# What each figure reads of its table (an empty file is a profile that recorded nothing).
TABLE_COLUMNS = {
    "operators": ("operator", "host_self_time_s"),
    "memory": ("category", "bytes", "estimate_bytes"),
}


def draw(
    kind: str,
    document_path: str | os.PathLike,
    table_path: str | os.PathLike,
    out_png: str | os.PathLike,
) -> None:
    """One figure of an operator profile: its document and table (the operators CSV for
    `operators`, the memory CSV for `memory`) in, a PNG out."""
    document = load_json(document_path, what="operator profile document")
    table = read_table(table_path, TABLE_COLUMNS.get(kind, ()), f"the {kind} figure", empty_ok=True)
    style.save_png(figure(kind, document, table), out_png)
    print(f"{kind} figure of the operator profile of {config_text(document)} -> {out_png}")
