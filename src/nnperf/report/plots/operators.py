"""Figures of one configuration's operator profile: its top operators and its peak memory by
category. A profile that did not run gets a figure with its reason, so every configuration
has one."""

from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from nnperf.core.errors import NnperfError
from nnperf.core.files import load_json
from nnperf.report.format import config_text
from nnperf.report.plots import style
from nnperf.report.results import read_table
from nnperf.torchprof import analysis
from nnperf.torchprof.memory import CATEGORY_LABELS, MEMORY_CATEGORIES

MIB = 2**20
# Operator names run long (`autograd::engine::evaluate_function: ConvolutionBackward0`);
# longer ones are shortened in the middle so the labels keep to the left margin.
MAX_LABEL_CHARACTERS = 48
DEFAULT_TOP = 10
HOST_LABEL, DEVICE_LABEL = "host self time", "device self time"
MEASURED_LABEL, ESTIMATE_LABEL = "measured at the peak", "complexity estimate"
# What each figure reads of its table (an empty file is a profile that recorded nothing).
TABLE_COLUMNS = {
    "operators": ("operator", "host_self_time_s"),
    "memory": ("category", "bytes", "estimate_bytes"),
}
FIGURES = {"operators": "top operators", "memory": "peak memory"}  # kind: what its title names


def short_label(text: str, limit: int = MAX_LABEL_CHARACTERS) -> str:
    head = (limit - 1) // 2
    return text if len(text) <= limit else text[:head] + "…" + text[-(limit - 1 - head) :]


def _title(ax, document: Mapping, what: str, subtitle: str = "") -> None:
    title = f"{config_text(document)} on {document['device']}: {what}"
    ax.set_title(f"{title}\n{subtitle}" if subtitle else title, fontsize="medium")


def top_operators_figure(document: Mapping, table: pd.DataFrame, n: int = DEFAULT_TOP) -> Figure:
    """Host and device self time per step of the `n` operators with the most time."""
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
    palette = style.palette([HOST_LABEL, DEVICE_LABEL])
    sns.barplot(long, y="operator", x="time_ms", hue="time", palette=palette, errorbar=None, ax=ax)
    ax.set(xlabel="time per step (ms)", ylabel="")
    step = (document.get("summary") or {}).get("step_time_s")
    subtitle = f"ranked by {'device' if has_device else 'host'} time"
    subtitle += f"; step {step * 1e3:.3g} ms" if step else ""
    if not has_device:
        subtitle += "\nno device time: on the CPU the operators run on the host"
    _title(ax, document, FIGURES["operators"], subtitle)
    ax.legend(title=None, loc="lower right")
    return fig


def memory_figure(document: Mapping, table: pd.DataFrame) -> Figure:
    """The peak allocated memory by category beside the complexity stage's estimate (which
    does not count "other")."""
    memory = document.get("memory") or {}
    rows = table.set_index("category").reindex(MEMORY_CATEGORIES)
    rows = rows[["bytes", "estimate_bytes"]].apply(pd.to_numeric, errors="coerce")
    bars = {MEASURED_LABEL: "bytes"}
    if rows["estimate_bytes"].notna().any():
        bars[ESTIMATE_LABEL] = "estimate_bytes"
    colours = style.palette(MEMORY_CATEGORIES)
    fig, ax = style.figure(9.0, 1.6 + 0.9 * len(bars))
    positions = np.arange(len(bars))[::-1]
    for position, column in zip(positions, bars.values()):
        # A category without bytes is a bar of zero width: nothing shows.
        mib = rows[column].clip(lower=0).fillna(0.0) / MIB
        ax.barh(position, mib, left=mib.cumsum() - mib, color=colours.values(), height=0.6)
        ax.text(mib.sum(), position, f" {mib.sum():,.1f} MiB", va="center", fontsize="small")
    handles = [Patch(color=colours[c], label=CATEGORY_LABELS[c]) for c in MEMORY_CATEGORIES]
    ax.set_yticks(positions, list(bars))
    ax.set(xlabel="allocated memory (MiB)", xmargin=0.15)
    style.legend_right(ax, handles=handles, fontsize="small")
    subtitle = f"peak {memory.get('peak_allocated_bytes', 0) / MIB:,.1f} MiB"
    subtitle += f" (in {memory['peak_phase']})" if memory.get("peak_phase") else ""
    total, largest = memory.get("device_total_bytes"), memory.get("max_batch_size")
    subtitle += f"; device memory {total / 2**30:,.1f} GiB" if total else ""
    subtitle += f"\na batch of about {int(largest):,} would fit (linear model)" if largest else ""
    _title(ax, document, FIGURES["memory"], subtitle)
    return fig


def figure(kind: str, document: Mapping, table: pd.DataFrame, n: int | None = None) -> Figure:
    """`kind`'s figure, or the reason of a profile that did not run or recorded nothing."""
    if kind not in FIGURES:
        raise NnperfError(f"figure kind {kind!r} is unknown; allowed: {', '.join(FIGURES)}")
    if document.get("status") != "ok" or table is None or table.empty:
        fig, ax = style.figure(8.0, 2.4)
        ax.set_axis_off()
        reason = short_label(str(document.get("error") or "no data"), 110)
        style.note(ax, f"not profiled ({document.get('status')}):\n{reason}")
        _title(ax, document, FIGURES[kind])
        return fig
    if kind == "memory":
        return memory_figure(document, table)
    top = n or (document.get("settings") or {}).get("top_operators", DEFAULT_TOP)
    return top_operators_figure(document, table, top)


def draw(
    kind: str, document_path: style.PathArg, table_path: style.PathArg, out_png: style.PathArg
) -> None:
    """One figure of an operator profile, from its document and table to a PNG."""
    document = load_json(document_path, what="operator profile document")
    table = read_table(table_path, TABLE_COLUMNS.get(kind, ()), f"the {kind} figure", empty_ok=True)
    done = f"{kind} figure of the operator profile of {config_text(document)}"
    style.save_png(figure(kind, document, table), out_png, done)
