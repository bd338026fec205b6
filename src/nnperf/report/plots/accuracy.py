"""Test top-1 of the training runs against the epoch (learning per pass) and against training
time (what time to accuracy ranks), each run's first epoch at the target ringed on both
panels, so a run ahead on one and behind on the other stands out."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from nnperf.core.errors import NnperfError
from nnperf.core.vocab import TRAINING_KEYS
from nnperf.report.format import in_report_order
from nnperf.report.plots import style
from nnperf.report.results import read_table

PANELS = {"epoch": "epoch", "train_time_s": "training time (s, evaluation excluded)"}
TARGET_COLOUR = "dimgrey"
# One line per run, every epoch a point, in the table's order.
CURVES = {"y": "test_top1_pct", "hue": "curve", "estimator": None, "sort": False}
CURVES |= {"marker": "o", "markersize": 4}
RING = {"s": 90, "facecolors": "none", "linewidths": 1.5, "zorder": 4}
TARGET_TEXT = {"xycoords": ("axes fraction", "data"), "xytext": (4, 3), "fontsize": "small"}
TARGET_TEXT |= {"textcoords": "offset points", "color": TARGET_COLOUR}
# What the figure reads of each per-epoch table.
EPOCHS_COLUMNS = (*TRAINING_KEYS, "epoch", "test_top1", "train_time_s")


def accuracy_figure(
    epochs: pd.DataFrame, target: float | None = None, title: str | None = None
) -> Figure:
    """Test top-1 vs epoch and vs training time, one line per run; `target`: a fraction."""
    if epochs.empty:
        raise NnperfError("the per-epoch table is empty; allowed: the rows of a training run")
    curve = style.config_labels(epochs)
    if epochs["recipe"].nunique() > 1:
        curve += ", recipe " + epochs["recipe"].astype(str)
    if epochs["model"].nunique() > 1:
        curve = epochs["model"] + " " + curve
    order = ["model", "recipe", "batch_size", "precision", "variant", "epoch"]
    frame = epochs.assign(curve=curve, test_top1_pct=100.0 * epochs["test_top1"].astype(float))
    frame = frame.sort_values(order, key=in_report_order, kind="stable")
    palette = style.palette(dict.fromkeys(frame["curve"]))
    fig, axes = style.figure(10.0, 4.2, 1, 2, sharey=True)
    for ax, (x, xlabel) in zip(axes, PANELS.items()):
        sns.lineplot(frame, x=x, palette=palette, legend=ax is axes[1], ax=ax, **CURVES)
        ax.set(xlabel=xlabel, ylabel="test top-1 accuracy (%)", ylim=(0, 100))
        if target is not None:
            ax.axhline(100 * target, color=TARGET_COLOUR, linestyle="--", linewidth=1)
            hits = frame[frame["test_top1"].astype(float) >= target].groupby("curve").head(1)
            rings = [palette[curve] for curve in hits["curve"]]
            ax.scatter(hits[x], hits["test_top1_pct"], edgecolors=rings, **RING)
    if target is not None:
        axes[0].annotate(f"target {100 * target:g}%", (0, 100 * target), **TARGET_TEXT)
    axes[0].xaxis.get_major_locator().set_params(integer=True)
    ring = "ring: first epoch at the target" if target is not None else None
    style.legend_right(axes[1], title=ring, fontsize="small", title_fontsize="small")
    models, keys = ", ".join(sorted(frame["model"].unique())), frame.iloc[0]
    where = f"{models} on {keys['device']} ({keys['dataset']})"
    fig.suptitle(title or f"{where}: test accuracy while training")
    return fig


def draw(
    epochs_paths: Sequence[style.PathArg],
    out_png: style.PathArg,
    target: float | None = None,
    title: str | None = None,
) -> None:
    """The accuracy figure of some training runs, from their per-epoch CSVs to a PNG."""
    frames = [read_table(path, EPOCHS_COLUMNS, "the accuracy figure") for path in epochs_paths]
    if not frames:
        raise NnperfError("no per-epoch tables given; allowed: one or more *_epochs.csv files")
    epochs = pd.concat(frames, ignore_index=True)
    epochs = epochs[np.isfinite(epochs["test_top1"].astype(float))]
    done = f"accuracy figure of {len(epochs_paths)} training run(s)"
    style.save_png(accuracy_figure(epochs, target, title), out_png, done)
