"""Any finding in words: `sentence` picks its family's wording by kind, and `sentences` words a
section's list when the page is rendered. After a leader (the fastest configuration of a machine
and model, `findings.LEADERS`) the findings on the same machine and model name only what
differs from the configuration it named, so a list names each configuration once. Plain
strings (notes given to the report) pass through.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from nnperf.report.findings import DETAIL_KINDS, LEADERS, Finding
from nnperf.report.wording import comparisons, findings, measurement, notes, profiles, roofline
from nnperf.report.wording import training

# The detail sections' families word a finding whole (they never follow a leader).
DETAIL = {
    kind: (lambda f, named, family=family: family.sentence(f))
    for family in (roofline, profiles, training)
    for kind in DETAIL_KINDS
    if hasattr(family, kind)
}
WORDING = {
    **findings.WORDING,
    **measurement.WORDING,
    **notes.WORDING,
    **comparisons.WORDING,
    **DETAIL,
}


def sentence(f: Finding, named: Mapping | None = None) -> str:
    """`f` in words; `named` the configuration its list already named (None: name it all)."""
    return WORDING[f.kind](f, named)


def _same(about: Mapping, named: Mapping) -> bool:
    return all(str(about.get(k)) == str(named.get(k)) for k in ("machine", "model"))


def sentences(items: Iterable[Finding | str]) -> list[str]:
    worded, named = [], None
    for item in items:
        if not isinstance(item, Finding):
            worded.append(item)
            continue
        chained = named is not None and item.kind not in LEADERS and _same(item.about, named)
        worded.append(sentence(item, named if chained else None))
        named = item.about if item.kind in LEADERS else named if chained else None
    return worded
