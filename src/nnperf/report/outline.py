"""The parts of the written summary (`Document`, its `Section`s), and what every section
builder reads (`Page`); findings are records, worded at render."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

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

    def __post_init__(self):
        self.tables = [t for t in self.tables if not t.frame.empty]
        self.findings, self.figures = list(self.findings), list(self.figures)
        self.sources = list(self.sources)


# What each section's `build` returns (None where the study has nothing for it).
section = Section


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
        return frame.drop(columns=["Machine"], errors="ignore") if len(self.machines) < 2 else frame

    def sources(self, *kinds: str) -> list[str]:
        return list(dict.fromkeys(p for kind in kinds for p in self.tables.sources.get(kind, [])))

    def figures_of(self, section_id: str) -> list[Figure]:
        return self.figures.get(section_id, [])
