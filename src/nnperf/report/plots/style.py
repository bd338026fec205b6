"""What every figure of the report shares: its resolution and how its PNG is written."""

from nnperf.core.files import atomic_path

# Every figure at one resolution, so they sit side by side at one scale.
FIGURE_DPI = 150


def save_png(figure, out_png, **savefig) -> None:
    """Write a figure as a PNG atomically (an interrupted job leaves no finished-looking
    figure)."""
    with atomic_path(out_png) as tmp:
        figure.savefig(tmp, format="png", dpi=FIGURE_DPI, **savefig)
