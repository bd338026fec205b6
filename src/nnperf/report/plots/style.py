"""What every figure of the report shares: its resolution, its colours, how its PNG is
written, and the few ways an axes is finished alike (legend right of the panel, a note in
place of data, a text above a point)."""

import os

import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from nnperf.core.files import atomic_path

# A path argument, as the workflow passes it (a str) or as Python code does.
PathArg = str | os.PathLike
# Every figure at one resolution, so they sit side by side at one scale.
FIGURE_DPI = 150


def figure(width: float, height: float, rows: int = 1, cols: int = 1, **subplots):
    """A figure (never pyplot: no global backend state) and its axes."""
    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.subplots(rows, cols, **subplots)


def palette(levels) -> dict:
    levels = list(levels)
    return dict(zip(levels, sns.color_palette("colorblind", len(levels))))


def config_labels(frame: pd.DataFrame) -> pd.Series:
    batch = " bs" + frame["batch_size"].astype(int).astype(str) + " "
    return frame["precision"].astype(str) + batch + frame["variant"].astype(str)


def legend_right(ax, **legend) -> None:
    """The legend beside the panel, outside it: long labels never cover data."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), **legend)


def note(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, transform=ax.transAxes)


def above(ax, text: str, xy, lift: float = 0, **text_style) -> None:
    """`text` centred above the point `xy`, its bottom `lift` points over it."""
    offset = {"xytext": (0, lift), "textcoords": "offset points"}
    ax.annotate(text, xy, ha="center", va="bottom", **offset, **text_style)


def save_png(figure, out_png, what: str | None = None, **savefig) -> None:
    """Write a figure as a PNG atomically (an interrupted job leaves no finished-looking
    figure); `what`, when given, is printed with the path."""
    with atomic_path(out_png) as tmp:
        figure.savefig(tmp, format="png", dpi=FIGURE_DPI, **savefig)
    if what:
        print(f"{what} -> {out_png}")
