"""The written summary: a `Document` of sections, built from a study's tables, answer first:
the headline table per device, the key findings, the sections that carry the figures, how the
numbers were measured, and the environment last (`SECTIONS`); each figure in the section its
path names. What a section shows is its module's (`nnperf.report.sections`); rendering is
`nnperf.report.render`'s.
"""

from __future__ import annotations

import time
from typing import Sequence

from nnperf.report.outline import Document, Figure, FigureGroup, Page, section
from nnperf.report.results import ResultSet
from nnperf.report.sections import accuracy, breakdown, ceilings, complexity, environment
from nnperf.report.sections import headline, input_pipeline, kernels, machines_compared
from nnperf.report.sections import measurement, notes, operators, roofline
from nnperf.report.sections import speedups, throughput
from nnperf.report.sections.kernels import DEFAULT_TOP_KERNELS
from nnperf.report.sections.key_findings import key_findings

# Every section builder, in the order the summary shows them; each returns its Section, or
# None where the study has nothing for it. Key findings and Notes show even when empty.
SECTIONS = (
    headline.build,
    lambda page: section("key-findings", "Key findings", findings=key_findings(page)),
    throughput.build,
    speedups.build,
    breakdown.build,
    roofline.build,
    input_pipeline.build,
    ceilings.build,
    kernels.build,
    complexity.build,
    accuracy.build,
    operators.build,
    machines_compared.build,
    # The figures no other section claims (`figure_section`).
    lambda page: section("figures", "More figures", figures=page.figures_of("figures")),
    measurement.build,
    notes.build,
    environment.build,
)
SHOWN = ("key-findings", "notes")


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
    return next((section for keyword, section in FIGURE_SECTIONS if keyword in lowered), "figures")


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


def machines_of(tables: ResultSet) -> list[str]:
    """Every machine the summary, environment or roofline points name, sorted."""
    return sorted(
        {
            m
            for frame in (tables.summary, tables.environment, tables.roofline_points)
            if frame is not None and "machine" in frame
            for m in frame["machine"].dropna()
        }
    )


def figures_by_section(paths: Sequence[str]) -> dict[str, list[Figure]]:
    """Each figure in the section its path names (`figure_section`), in the given order."""
    figures: dict[str, list[Figure]] = {}
    for path in paths:
        figures.setdefault(figure_section(path), []).append(Figure(path, figure_caption(path)))
    return figures


def build_document(
    tables: ResultSet,
    *,
    title: str,
    description: str,
    cv_threshold: float,
    figures: Sequence[str] = (),
    notes: Sequence[str] = (),
    top_n_kernels: int = DEFAULT_TOP_KERNELS,
    rendered_at_unix: float | None = None,
) -> Document:
    """Every section of the summary, written from `tables`, with the `figures` (paths) in
    their sections and the given `notes` first under Notes; `rendered_at_unix` (now when
    None) ends the study's span."""
    page = Page(
        tables=tables,
        machines=machines_of(tables),
        figures=figures_by_section(figures),
        notes=list(notes),
        cv_threshold=cv_threshold,
        rendered_at=time.time() if rendered_at_unix is None else rendered_at_unix,
        top_n_kernels=top_n_kernels,
    )
    sections = [section for build in SECTIONS if (section := build(page)) is not None]
    for section in sections:
        section.figures, section.folded = fold_figures(section.figures)
    shown = [
        s for s in sections if s.tables or s.figures or s.folded or s.findings or s.id in SHOWN
    ]
    return Document(title, description, shown, page.machines)
