"""The parts of the written summary, and what every section builder reads.

A `Document` is its `Section`s, each with findings (records, worded at render), display
`Table`s, `Figure`s (a large family folded into a `FigureGroup`) and the files its numbers
came from. `Page` is what a section builder reads: the study's tables, its machines, the
figures placed in each section and the report's settings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

import pandas as pd

from nnperf.report.format import drop_single_machine
from nnperf.report.findings import Finding
from nnperf.report.results import ResultSet


@dataclass
class Table:
    caption: str
    frame: pd.DataFrame


@dataclass
class Figure:
    path: str
    caption: str


@dataclass
class Section:
    id: str
    title: str
    intro: str = ""
    findings: list[Finding | str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    # Large families of figures (a roofline per configuration): folded away in the HTML,
    # listed as links in Markdown, so the section stays readable.
    folded: list["FigureGroup"] = field(default_factory=list)


@dataclass
class FigureGroup:
    title: str
    figures: list[Figure]


@dataclass
class Document:
    title: str
    description: str
    sections: list[Section]
    machines: list[str]


@dataclass
class Page:
    tables: ResultSet
    machines: list[str]
    # Section id -> the figures shown in it (`figure_section`).
    figures: dict[str, list[Figure]]
    # Notes given to the report (config report.notes, the workflow's), before its own.
    notes: list[str]
    cv_threshold: float
    # When the report is written (Unix seconds): the end of the study's span.
    rendered_at: float
    top_n_kernels: int

    def drop(self, frame: pd.DataFrame) -> pd.DataFrame:
        """`frame` without its Machine column when the report has one machine."""
        return drop_single_machine(frame, self.machines)

    def sources(self, *kinds: str) -> list[str]:
        """The files of these kinds (`ResultSet.sources`) the section's numbers came from."""
        return list(dict.fromkeys(p for kind in kinds for p in self.tables.sources.get(kind, [])))

    def figures_of(self, section_id: str) -> list[Figure]:
        return self.figures.get(section_id, [])


def section(
    id: str,
    title: str,
    *,
    intro: str = "",
    findings: Iterable[Finding | str] = (),
    tables: Iterable[Table] = (),
    figures: Sequence[Figure] = (),
    sources: Sequence[str] = (),
) -> Section:
    """A Section that shows only the tables with rows."""
    return Section(
        id,
        title,
        intro=intro,
        findings=list(findings),
        tables=[t for t in tables if not t.frame.empty],
        figures=list(figures),
        sources=list(sources),
    )


# Where a figure goes: the first keyword its path holds, else More figures.
FIGURE_SECTIONS = (
    ("figures/accuracy/", "accuracy"),
    ("figures/operators/", "operators"),
    ("figures/memory/", "operators"),
    ("machines", "machines"),
    ("speedup", "speedups"),
    ("breakdown", "breakdown"),
    ("phase", "breakdown"),
    ("sweep", "ceilings"),
    ("ceiling", "ceilings"),
    ("roofline", "roofline"),
    ("flops", "roofline"),
    ("kernel", "kernels"),
    ("throughput", "throughput"),
    ("complexity", "complexity"),
    ("environment", "environment"),
)


def figure_section(path: str) -> str:
    lowered = path.replace("\\", "/").lower()
    for keyword, section in FIGURE_SECTIONS:
        if keyword in lowered:
            return section
    return "figures"


# A section shows at most this many figures of one kind inline; more are folded.
FOLD_AFTER = 6


def figure_kind(path: str) -> str:
    """The folder right below `figures/` (throughput, roofline, ...)."""
    parts = path.replace("\\", "/").split("/")
    if "figures" in parts and parts.index("figures") + 2 < len(parts):
        return parts[parts.index("figures") + 1]
    return "figures"


def fold_figures(figures: list[Figure], limit: int = FOLD_AFTER) -> tuple[list, list]:
    """(shown, folded groups): kinds with more than `limit` figures are folded whole."""
    kinds: dict[str, list[Figure]] = {}
    for figure in figures:
        kinds.setdefault(figure_kind(figure.path), []).append(figure)
    shown = [f for group in kinds.values() if len(group) <= limit for f in group]
    folded = [
        FigureGroup(f"{len(group)} {kind.replace('_', ' ')} figures", group)
        for kind, group in kinds.items()
        if len(group) > limit
    ]
    return shown, folded


def figure_caption(path: str) -> str:
    """The figure's path below `figures/`, which names its experiment (keys in order)."""
    parts = path.replace("\\", "/").split("/")
    if "figures" in parts:
        parts = parts[parts.index("figures") + 1 :]
    return " / ".join(parts).removesuffix(".png")
