"""The figure of the training runs: test top-1 after each epoch against the epoch (learning
per pass over the data) and against cumulative training time (learning per second, what time
to accuracy ranks), the target as a dashed line and each run's first epoch at it ringed on
both panels, so a run ahead on one panel and behind on the other stands out. Input: the
per-epoch tables of `nnperf.training.to_accuracy` (epoch 0 is the model before training)."""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from nnperf.core.errors import NnperfError
from nnperf.report.plots import style
from nnperf.core.vocab import TRAINING_KEYS, precision_rank
from nnperf.report.results import read_table

ACCURACY_YLABEL = "test top-1 accuracy (%)"
EPOCH_XLABEL = "epoch"
TIME_XLABEL = "training time (s, evaluation excluded)"
TARGET_COLOUR = "dimgrey"


def curve_label(row, with_model: bool = False, with_recipe: bool = False) -> str:
    """`bf16 bs256 baseline` (+ model, recipe when the figure holds several)."""
    text = f"{row['precision']} bs{int(row['batch_size'])} {row['variant']}"
    if with_recipe:
        text += f", recipe {row['recipe']}"
    if with_model:
        text = f"{row['model']} {text}"
    return text


def _curves(epochs: pd.DataFrame) -> pd.DataFrame:
    """The rows with a curve label, in the shared order, accuracy in percent."""
    with_model = epochs["model"].nunique() > 1
    with_recipe = epochs["recipe"].nunique() > 1
    frame = epochs.assign(
        curve=epochs.apply(curve_label, axis=1, args=(with_model, with_recipe)),
        test_top1_pct=100.0 * epochs["test_top1"].astype(float),
        _precision=epochs["precision"].map(precision_rank),
    )
    return frame.sort_values(
        ["model", "recipe", "batch_size", "_precision", "variant", "epoch"], kind="stable"
    ).drop(columns="_precision")


def accuracy_figure(
    epochs: pd.DataFrame, target: float | None = None, title: str | None = None
) -> Figure:
    """Test top-1 vs epoch (left) and vs cumulative training time (right), one line per run;
    `target` (a fraction) as a dashed line, each run's first epoch at it as a ring."""
    if epochs.empty:
        raise NnperfError("the per-epoch table is empty; allowed: the rows of a training run")
    frame = _curves(epochs)
    order = list(dict.fromkeys(frame["curve"]))
    palette = dict(zip(order, sns.color_palette("colorblind", len(order))))
    fig, (by_epoch, by_time) = style.figure(10.0, 4.2, 1, 2, sharey=True)
    for ax, x, xlabel in (
        (by_epoch, "epoch", EPOCH_XLABEL),
        (by_time, "train_time_s", TIME_XLABEL),
    ):
        sns.lineplot(
            data=frame,
            x=x,
            y="test_top1_pct",
            hue="curve",
            hue_order=order,
            palette=palette,
            marker="o",
            markersize=4,
            estimator=None,
            sort=False,
            legend=ax is by_time,
            ax=ax,
        )
        ax.set(xlabel=xlabel, ylabel=ACCURACY_YLABEL, ylim=(0, 100))
        if target is not None:
            ax.axhline(100 * target, color=TARGET_COLOUR, linestyle="--", linewidth=1)
            hits = frame[frame["test_top1"].astype(float) >= target].groupby("curve").head(1)
            ax.scatter(
                hits[x],
                hits["test_top1_pct"],
                s=90,
                facecolors="none",
                edgecolors=[palette[c] for c in hits["curve"]],
                linewidths=1.5,
                zorder=4,
            )
    by_epoch.xaxis.get_major_locator().set_params(integer=True)
    if target is not None:
        by_epoch.annotate(
            f"target {100 * target:g}%",
            (0, 100 * target),
            xycoords=("axes fraction", "data"),
            xytext=(4, 3),
            textcoords="offset points",
            color=TARGET_COLOUR,
            fontsize="small",
        )
    ring = "ring: first epoch at the target" if target is not None else None
    style.legend_right(by_time, title=ring, fontsize="small", title_fontsize="small")
    keys = frame.iloc[0]
    fig.suptitle(
        title
        or f"{', '.join(sorted(frame['model'].unique()))} on {keys['device']} ({keys['dataset']}):"
        " test accuracy while training"
    )
    return fig


# What the figure reads of each per-epoch table.
EPOCHS_COLUMNS = (*TRAINING_KEYS, "epoch", "test_top1", "train_time_s")


def read_epochs(paths: Sequence[str | os.PathLike]) -> pd.DataFrame:
    """The per-epoch CSVs of several training runs as one table."""
    frames = [read_table(path, EPOCHS_COLUMNS, "the accuracy figure") for path in paths]
    if not frames:
        raise NnperfError("no per-epoch tables given; allowed: one or more *_epochs.csv files")
    frame = pd.concat(frames, ignore_index=True)
    return frame[np.isfinite(frame["test_top1"].astype(float))]


def draw(
    epochs_paths: Sequence[str | os.PathLike],
    out_png: str | os.PathLike,
    target: float | None = None,
    title: str | None = None,
) -> None:
    """The accuracy figure of some training runs, from their per-epoch CSVs to a PNG."""
    style.save_png(accuracy_figure(read_epochs(epochs_paths), target, title), out_png)
    print(f"accuracy figure of {len(epochs_paths)} training run(s) -> {out_png}")
