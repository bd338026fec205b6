"""The More figures section: the figures no other section claims (`figure_section`)."""

from __future__ import annotations

from nnperf.report.outline import Page, Section, section


def build(page: Page) -> Section | None:
    if not page.figures_of("figures"):
        return None
    return section("figures", "More figures", figures=page.figures_of("figures"))
