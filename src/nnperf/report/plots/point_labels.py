"""Text labels beside the roofline figures' points that never overlap.

matplotlib puts text exactly where it is told, and adjustText, the usual add-on, is not a
dependency of nnperf (its iterative repulsion does not promise disjoint boxes either); so this
placement stays hand-written. Each label tries offsets around its point, nearest first, and
takes the first whose box (in display pixels, once the figure's layout is final) stays inside
the axes and clear of every drawn point and every label placed before; a label that finds no
room is replaced by a number beside its point and written out in a key under the axes.
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PathCollection
from matplotlib.transforms import Bbox, IdentityTransform

from nnperf.report.format import fmt_si

LABEL_FONTSIZE = 6
# Offsets tried around a point, nearest first, upper right first.
LABEL_RADII_PT = (5, 10, 16, 24, 34, 46, 60, 78, 100, 128, 160)
LABEL_ANGLES_DEG = (45, 135, -45, -135, 0, 180, 90, -90, 20, 160, -20, -160, 70, 110, -70, -110)
# Clear space kept between a label's box and anything else.
LABEL_PAD_PT = 1.5
# A label whose anchor is more than this beyond its point's marker gets a leader line; labels
# sit on a white patch above the lines, so a leader passing behind one does not cross its text.
LEADER_GAP_PT = 8.0
LEADER_STYLE = {"arrowstyle": "-", "color": "0.4", "linewidth": 0.5, "shrinkA": 0}
LABEL_STYLE = {"textcoords": "offset points", "zorder": 6}
LABEL_STYLE["bbox"] = {"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none"}
KEY_STYLE = {"xycoords": "axes fraction", "xytext": (0, -40), "textcoords": "offset points"}
KEY_STYLE |= {"ha": "left", "va": "top"}


class PointLabel(NamedTuple):
    """A text for the point (x, y) in data coordinates, whose marker is `marker_pt` wide
    (its leader line stops at the marker's edge)."""

    x: float
    y: float
    text: str
    marker_pt: float = 8.0


def _markers(ax) -> list[Bbox]:
    """The box (pixels) of every point drawn by a scatter on `ax`."""
    boxes = []
    for collection in ax.collections:
        if not isinstance(collection, PathCollection) or not len(collection.get_offsets()):
            continue
        offsets = np.ma.getdata(collection.get_offsets()).astype(float)
        centres = collection.get_offset_transform().transform(offsets)
        # A scatter's size is the marker's area in points^2: its side is sqrt(size).
        sides = np.broadcast_to(np.sqrt(collection.get_sizes()), (len(centres),))
        sides = sides * ax.figure.dpi / 72.0
        boxes += [Bbox.from_bounds(x - s / 2, y - s / 2, s, s) for (x, y), s in zip(centres, sides)]
    return boxes


def _place_one(ax, label: PointLabel, text: str, taken: list[Bbox], renderer, fontsize):
    """Annotate `label`'s point with `text` at the nearest free offset (its box appended to
    `taken`); None when no offset is free."""
    scale = ax.figure.dpi / 72.0  # pixels per point
    pad = LABEL_PAD_PT * scale
    frame = ax.get_window_extent(renderer).padded(-pad)
    probe = ax.text(0, 0, text, fontsize=fontsize, transform=IdentityTransform())
    width, height = probe.get_window_extent(renderer).size
    probe.remove()
    px, py = ax.transData.transform((label.x, label.y))
    for radius, angle in itertools.product(LABEL_RADII_PT, LABEL_ANGLES_DEG):
        dx, dy = radius * math.cos(math.radians(angle)), radius * math.sin(math.radians(angle))
        # The label sits on the far side of its anchor from the point.
        ha = "left" if dx > 0.3 * radius else "right" if dx < -0.3 * radius else "center"
        va = "bottom" if dy > 0.3 * radius else "top" if dy < -0.3 * radius else "center"
        left = px + dx * scale - {"left": 0, "center": width / 2, "right": width}[ha]
        bottom = py + dy * scale - {"bottom": 0, "center": height / 2, "top": height}[va]
        box = Bbox.from_bounds(left, bottom, width, height)
        inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0
        if not (inside and box.y1 <= frame.y1) or box.padded(pad).count_overlaps(taken):
            continue
        taken.append(box)
        leader = radius - label.marker_pt / 2 > LEADER_GAP_PT
        arrow = {**LEADER_STYLE, "shrinkB": label.marker_pt / 2 + 1} if leader else None
        position = {"xytext": (dx, dy), "ha": ha, "va": va, "fontsize": fontsize}
        return ax.annotate(text, (label.x, label.y), arrowprops=arrow, **position, **LABEL_STYLE)
    return None


def place_labels(ax, labels: Sequence[PointLabel], *, fontsize=LABEL_FONTSIZE) -> list:
    """Annotate every point of `labels` (no two label boxes overlapping, none on a drawn
    point, all inside the axes); return the annotations. Call it once the axes' limits and
    the figure's layout are final: placement is in display coordinates. A label without room
    becomes `[1]` beside its point, written out in a key under the axes (or, with no room
    even for the number, the key gives the point's coordinates)."""
    if not labels:
        return []
    renderer = FigureCanvasAgg(ax.figure).get_renderer()
    taken = _markers(ax)
    placed = [_place_one(ax, label, label.text, taken, renderer, fontsize) for label in labels]
    numbered, unplaced = [], []
    for label in [label for label, done in zip(labels, placed) if done is None]:
        tag = f"[{len(numbered) + 1}]"
        placed.append(_place_one(ax, label, tag, taken, renderer, fontsize))
        if placed[-1] is not None:
            numbered.append(f"{tag} {label.text}")
        else:
            where = f"{label.x:.3g} FLOP/byte, {fmt_si(label.y, 'FLOP/s')}"
            unplaced.append(f"{label.text}: at {where} (no room for a label)")
    if numbered or unplaced:
        key = "\n".join(["Points labelled by number:", *numbered, *unplaced])
        ax.annotate(key, (0.0, 0.0), fontsize=fontsize, **KEY_STYLE)
    return [annotation for annotation in placed if annotation is not None]
