"""The Ceilings section: the measured roofs next to the peaks, why a peak the ceilings JSON
gives as null is missing, and which peak a measured roof exceeds."""

from __future__ import annotations

from typing import Mapping, Sequence

import pandas as pd

from nnperf.core.vocab import precision_rank
from nnperf.report.bounds import positive
from nnperf.report.findings import Finding
from nnperf.report.format import cells, fmt_pct, fmt_si
from nnperf.report.outline import Page, Section, Table, section
from nnperf.roofline.peaks import null_peak_reason, peak_origin

TABLE_COLUMNS = (
    "machine device roof unit measured datasheet peak_origin measured_over_datasheet".split()
)
INTRO = (
    "The roofs: the ceilings stage's measured GEMM throughput per dtype and "
    "main-memory bandwidth next to the peaks: a vendor's datasheet figure "
    "(config/peaks.yaml) or, for a CPU without an entry, a peak derived from cores x clock x "
    "FLOP/cycle (labelled derived: an estimate, not a vendor figure)."
)


def ceilings_table(ceilings: Sequence[Mapping]) -> pd.DataFrame:
    rows = []
    for c in sorted(ceilings, key=lambda c: (str(c.get("machine")), str(c.get("device")))):
        measured, sheet = c.get("measured") or {}, c.get("datasheet") or {}
        gemm, peaks = measured.get("gemm_flop_s") or {}, sheet.get("flop_s") or {}
        dtypes = sorted({*gemm, *peaks}, key=precision_rank)
        roofs = [(f"{d} GEMM", "FLOP/s", gemm.get(d), peaks.get(d)) for d in dtypes]
        bandwidth = "memory_bandwidth_bytes_s"
        roofs.append(("memory bandwidth", "B/s", measured.get(bandwidth), sheet.get(bandwidth)))
        for roof, unit, m, s in roofs:
            m, s = positive(m), positive(s)
            origin, ratio = peak_origin(sheet) if s else None, m / s if m and s else None
            rows.append((c.get("machine"), c.get("device"), roof, unit, m, s, origin, ratio))
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)


CEILING_COLUMNS = {
    "Machine": ("machine", str),
    "Device": ("device", str),
    "Roof": ("roof", str),
    "Measured": (("measured", "unit"), fmt_si),
    "Peak": (("datasheet", "unit"), fmt_si),
    "Peak is": ("peak_origin", str),
    "Measured / peak": ("measured_over_datasheet", fmt_pct),
}


def peak_records(ceilings: Sequence[Mapping], table: pd.DataFrame) -> list[Finding]:
    """Each compute peak given as null with a reason (a CPU's derived bf16 peak where bf16 has
    no hardware arithmetic), then each measured roof above its peak (the peak is too low)."""
    records = []
    for document in ceilings:
        sheet = document.get("datasheet") or {}
        where = document.get("machine") or document.get("device_name") or document.get("device")
        for dtype, code in (sheet.get("flop_s_null_reasons") or {}).items():
            about = {"where": where, "origin": peak_origin(sheet), "precision": dtype}
            about["reason"] = null_peak_reason(code, sheet)
            records.append(Finding("null_peak", about))
    above = table[pd.to_numeric(table["measured_over_datasheet"], errors="coerce") > 1]
    for r in above.to_dict("records"):
        about = {"machine": r["machine"], "roof": r["roof"], "unit": r["unit"]}
        numbers = {"measured": r["measured"], "peak": r["datasheet"]}
        numbers["ratio"] = r["measured_over_datasheet"]
        records.append(Finding("above_peak", {**about, "origin": r["peak_origin"]}, numbers))
    return records


def build(page: Page) -> Section:
    ceilings = page.tables.ceilings
    table = ceilings_table(ceilings)
    return section(
        "ceilings",
        "Ceilings",
        intro=INTRO,
        findings=peak_records(ceilings, table),
        tables=[Table("Measured roofs and peaks", page.drop(cells(table, CEILING_COLUMNS)))],
        figures=page.figures_of("ceilings"),
        sources=page.sources("ceilings"),
    )
