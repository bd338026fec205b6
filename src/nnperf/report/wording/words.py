"""Any finding in words: `sentence` picks its family's wording by kind, and `sentences` words a
section's list when the page is rendered. After a leader (the fastest configuration of a
machine and model, `findings.LEADERS`) the findings on the same machine and model name only
what differs from the configuration it named, so a list names each configuration once. Plain
strings (notes given to the report) pass through."""

from __future__ import annotations

from typing import Iterable, Mapping

from nnperf.report.findings import KINDS, LEADERS, Finding
from nnperf.report.wording import details, findings, measurement
from nnperf.report.wording.templates import say

# A family words a kind by its function of that name, or by its `WORDING` entry (a template,
# or a function that words several kinds).
FAMILIES = (findings, measurement, details)
WORDING = {
    kind: getattr(family, kind) for family in FAMILIES for kind in KINDS if hasattr(family, kind)
}
WORDING |= {kind: words for family in FAMILIES for kind, words in family.WORDING.items()}


def sentence(f: Finding, named: Mapping | None = None) -> str:
    """`f` in words; `named` the configuration its list already named (None: name it all)."""
    words = WORDING[f.kind]
    return words(f, named) if callable(words) else say(words, f)


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
