"""Text labels beside plotted points that never overlap, and how the roofline figures write
FLOP/s and B/s.

matplotlib puts text exactly where it is told; `place_labels` finds each label a free spot
around its point (in display pixels, once the figure's layout is final), numbers the labels
that find none and lists them under the axes. Used by the roofline figures
(`nnperf.report.plots.roofline`); draws nothing else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PathCollection
from matplotlib.transforms import Bbox, IdentityTransform

from nnperf.report.format import fmt_si

# Point labels. matplotlib puts text exactly where it is told and has no collision avoidance;
# adjustText, the usual add-on, is not a dependency of nnperf (and its iterative repulsion
# does not promise disjoint boxes), so labels are placed by hand: greedily, each trying
# offsets around its point nearest first (`LABEL_RADII_PT` x `LABEL_ANGLES_DEG`, upper right
# first) and taking the first whose box, in display pixels, stays inside the axes and clear
# of every drawn point, every label placed before and their leader lines.
LABEL_FONTSIZE = 6
LABEL_RADII_PT = (5, 10, 16, 24, 34, 46, 60, 78, 100, 128, 160)
LABEL_ANGLES_DEG = (45, 135, -45, -135, 0, 180, 90, -90, 20, 160, -20, -160, 70, 110, -70, -110)
# Clear space kept between a label's box and anything else.
LABEL_PAD_PT = 1.5
# A label whose anchor is more than this beyond its point's marker gets a leader line.
LEADER_GAP_PT = 8.0
LEADER_STYLE = {"arrowstyle": "-", "color": "0.4", "linewidth": 0.5, "shrinkA": 0}
# Labels sit on a white patch (within LABEL_PAD_PT of the text) above the lines, so a leader
# line passing behind one does not cross its text.
LABEL_BACKGROUND = {"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none"}
LABEL_ZORDER = 6


class PointLabel(NamedTuple):
    """A text for the point (x, y) in data coordinates, whose marker is `marker_pt` wide
    (its leader line stops at the marker's edge)."""

    x: float
    y: float
    text: str
    marker_pt: float = 8.0


def _alignment(angle_deg: float) -> tuple[str, str]:
    """Text alignment that puts the label on the far side of its anchor from the point."""
    dx, dy = math.cos(math.radians(angle_deg)), math.sin(math.radians(angle_deg))
    ha = "left" if dx > 0.3 else "right" if dx < -0.3 else "center"
    va = "bottom" if dy > 0.3 else "top" if dy < -0.3 else "center"
    return ha, va


def _text_box(anchor: tuple[float, float], size: tuple[float, float], ha: str, va: str) -> Bbox:
    """The box a one-line text of `size` pixels covers when aligned `ha`/`va` at `anchor`
    (matplotlib aligns the whole box, descent included, for bottom/center/top)."""
    width, height = size
    left = anchor[0] - {"left": 0.0, "center": width / 2, "right": width}[ha]
    bottom = anchor[1] - {"bottom": 0.0, "center": height / 2, "top": height}[va]
    return Bbox.from_bounds(left, bottom, width, height)


def _segments_cross(segments: np.ndarray, box: Bbox) -> bool:
    """Whether any segment (rows x0, y0, x1, y1) meets `box` (Liang-Barsky clipping)."""
    if not len(segments):
        return False
    start, delta = segments[:, :2], segments[:, 2:] - segments[:, :2]
    low, high = np.zeros(len(segments)), np.ones(len(segments))
    for axis, (lo, hi) in enumerate(((box.x0, box.x1), (box.y0, box.y1))):
        d, p = delta[:, axis], start[:, axis]
        still = d == 0
        outside = still & ((p < lo) | (p > hi))
        low[outside], high[outside] = 1.0, 0.0
        with np.errstate(divide="ignore", invalid="ignore"):
            t_lo, t_hi = (lo - p) / d, (hi - p) / d
        moving = ~still
        low[moving] = np.maximum(low[moving], np.minimum(t_lo, t_hi)[moving])
        high[moving] = np.minimum(high[moving], np.maximum(t_lo, t_hi)[moving])
    return bool(np.any(low <= high))


@dataclass
class _Taken:
    """What a new label must keep clear of, in display pixels: every drawn point's marker
    and the label boxes placed so far (rows x0, y0, x1, y1), and their leader lines (rows
    x0, y0, x1, y1: from the point to the label's anchor)."""

    boxes: np.ndarray = field(default_factory=lambda: np.empty((0, 4)))
    leaders: np.ndarray = field(default_factory=lambda: np.empty((0, 4)))

    def add(self, box: Bbox, leader: tuple | None) -> None:
        self.boxes = np.vstack([self.boxes, box.extents])
        if leader is not None:
            self.leaders = np.vstack([self.leaders, leader])

    def free(self, box: Bbox, pad: float) -> bool:
        """Whether a label box (grown by `pad`) keeps clear of every marker, label and
        leader line. A new leader line may pass behind an earlier label (labels have an
        opaque background): forbidding that would wall a crowded point in with its first
        ring of labels."""
        padded = box.padded(pad)
        x0, y0, x1, y1 = padded.extents
        b = self.boxes
        if np.any((b[:, 0] <= x1) & (x0 <= b[:, 2]) & (b[:, 1] <= y1) & (y0 <= b[:, 3])):
            return False
        return not _segments_cross(self.leaders, padded)


def _markers(ax) -> np.ndarray:
    """The box (x0, y0, x1, y1, pixels) of every point drawn by a scatter on `ax`."""
    scale = ax.figure.dpi / 72.0
    boxes = [np.empty((0, 4))]
    for collection in ax.collections:
        if not isinstance(collection, PathCollection) or not len(collection.get_offsets()):
            continue
        # get_offsets() is a masked array; plain floats keep the overlap tests fast.
        offsets = np.ma.getdata(collection.get_offsets()).astype(float)
        centres = collection.get_offset_transform().transform(offsets)
        sizes = np.broadcast_to(collection.get_sizes(), (len(centres),))
        # A scatter's size is the marker's area in points^2: its side is sqrt(size).
        half = np.sqrt(sizes)[:, None] * scale / 2
        boxes.append(np.hstack([centres - half, centres + half]))
    return np.vstack(boxes)


def _place_one(ax, label: PointLabel, text: str, taken: _Taken, renderer, fontsize) -> object:
    """Annotate `label`'s point with `text` at the nearest free offset (recorded in `taken`);
    None when no offset is free."""
    scale = ax.figure.dpi / 72.0  # pixels per point
    pad = LABEL_PAD_PT * scale
    frame = ax.get_window_extent(renderer).padded(-pad)
    probe = ax.text(0, 0, text, fontsize=fontsize, transform=IdentityTransform())
    extent = probe.get_window_extent(renderer)
    probe.remove()
    size = (extent.width, extent.height)
    point = ax.transData.transform((label.x, label.y))
    for radius in LABEL_RADII_PT:
        for angle in LABEL_ANGLES_DEG:
            dx = radius * math.cos(math.radians(angle))
            dy = radius * math.sin(math.radians(angle))
            ha, va = _alignment(angle)
            anchor = (point[0] + dx * scale, point[1] + dy * scale)
            box = _text_box(anchor, size, ha, va)
            if box.x0 < frame.x0 or box.x1 > frame.x1 or box.y0 < frame.y0 or box.y1 > frame.y1:
                continue
            if not taken.free(box, pad):
                continue
            leader = radius - label.marker_pt / 2 > LEADER_GAP_PT
            taken.add(box, (*point, *anchor) if leader else None)
            return ax.annotate(
                text,
                (label.x, label.y),
                xytext=(dx, dy),
                textcoords="offset points",
                ha=ha,
                va=va,
                fontsize=fontsize,
                bbox=LABEL_BACKGROUND,
                zorder=LABEL_ZORDER,
                arrowprops=(
                    {**LEADER_STYLE, "shrinkB": label.marker_pt / 2 + 1} if leader else None
                ),
            )
    return None


def place_labels(ax, labels: Sequence[PointLabel], *, fontsize=LABEL_FONTSIZE) -> list:
    """Annotate every point of `labels` so that no two label boxes overlap, none covers a
    drawn point (any scatter marker on `ax`) or a leader line, and all stay inside the
    axes; return the annotations.

    Call it once the axes' limits, scales, points and the figure's layout are final: the
    placement is done in display coordinates. A label that finds no room is replaced by a
    number (`[1]`) beside its point and written out in a key under the axes; in the rare
    case that even the number has no room, the key gives the point's coordinates instead.
    """
    if not labels:
        return []
    renderer = FigureCanvasAgg(ax.figure).get_renderer()
    taken = _Taken(boxes=_markers(ax))
    placed, crowded = [], []
    for label in labels:
        annotation = _place_one(ax, label, label.text, taken, renderer, fontsize)
        if annotation is None:
            crowded.append(label)
        else:
            placed.append(annotation)
    numbered, unlabelled = [], []
    for label in crowded:
        tag = f"[{len(numbered) + 1}]"
        annotation = _place_one(ax, label, tag, taken, renderer, fontsize)
        if annotation is None:
            unlabelled.append(
                f"{label.text}: at {label.x:.3g} FLOP/byte, {fmt_si(label.y, 'FLOP/s')} "
                "(no room for a label)"
            )
        else:
            placed.append(annotation)
            numbered.append(f"{tag} {label.text}")
    if numbered or unlabelled:
        ax.annotate(
            "\n".join(["Points labelled by number:", *numbered, *unlabelled]),
            (0.0, 0.0),
            xycoords="axes fraction",
            xytext=(0, -40),
            textcoords="offset points",
            ha="left",
            va="top",
            fontsize=fontsize,
        )
    return placed
