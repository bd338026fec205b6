"""The written summary: a `Document` of sections, built from a study's tables, answer first:
the headline table per device, the key findings, the sections that carry the figures, how the
numbers were measured, and the environment last (`SECTIONS`). What a section shows is its
module's (`nnperf.report.sections`); rendering is `nnperf.report.render`'s.
"""

from __future__ import annotations

import time
from typing import Sequence

from nnperf.report.outline import Document, Figure, Page, Section, section
from nnperf.report.outline import figure_caption, figure_section, fold_figures
from nnperf.report.results import ResultSet
from nnperf.report.sections import accuracy, breakdown, ceilings, complexity, environment
from nnperf.report.sections import headline, input_pipeline, kernels, machines_compared
from nnperf.report.sections import measurement, notes, operators, roofline
from nnperf.report.sections import speedups, throughput
from nnperf.report.sections.kernels import DEFAULT_TOP_KERNELS
from nnperf.report.sections.key_findings import key_findings


def key_findings_section(page: Page) -> Section:
    return section("key-findings", "Key findings", findings=key_findings(page))


def more_figures_section(page: Page) -> Section:
    """The figures no other section claims (`figure_section`)."""
    return section("figures", "More figures", figures=page.figures_of("figures"))


# Every section builder, in the order the summary shows them; each returns its Section, or
# None where the study has nothing for it. Key findings and Notes show even when empty.
SECTIONS = (
    headline.build,
    key_findings_section,
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
    more_figures_section,
    measurement.build,
    notes.build,
    environment.build,
)
SHOWN = ("key-findings", "notes")


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
