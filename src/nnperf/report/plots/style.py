"""What every figure of the report shares: its resolution, how its PNG is written, and the
few ways an axes is finished alike (legend right of the panel, a note in place of data)."""

from matplotlib.figure import Figure

from nnperf.core.files import atomic_path

# Every figure at one resolution, so they sit side by side at one scale.
FIGURE_DPI = 150


def figure(width: float, height: float, rows: int = 1, cols: int = 1, **subplots):
    """A figure (never pyplot: no global backend state) with constrained layout, and its
    axes."""
    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.subplots(rows, cols, **subplots)


def legend_right(ax, **legend) -> None:
    """The legend beside the panel, outside it: long labels never cover data."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), **legend)


def note(ax, text: str) -> None:
    """`text` centred on the panel, where there is nothing to draw."""
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, transform=ax.transAxes)


def save_png(figure, out_png, **savefig) -> None:
    """Write a figure as a PNG atomically (an interrupted job leaves no finished-looking
    figure)."""
    with atomic_path(out_png) as tmp:
        figure.savefig(tmp, format="png", dpi=FIGURE_DPI, **savefig)
