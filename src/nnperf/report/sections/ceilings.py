"""The Ceilings section: the roofs, the ceilings stage's measured GEMM throughput per dtype
and main-memory bandwidth next to the peaks (a vendor's datasheet figure, or for a CPU without
one a peak derived from cores x clock x FLOP/cycle, always labelled derived), why a peak is
missing where the ceilings JSON gives it as null, and which peak a measured roof exceeds."""

from __future__ import annotations

from typing import Mapping, Sequence

import pandas as pd

from nnperf.core.vocab import precision_rank
from nnperf.report.bounds import positive
from nnperf.report.format import cells, fmt_pct, fmt_si
from nnperf.report.outline import Page, Section, Table, section
from nnperf.roofline.peaks import peak_origin

INTRO = (
    "The roofs: the ceilings stage's measured GEMM throughput per dtype and "
    "main-memory bandwidth next to the peaks: a vendor's datasheet figure "
    "(config/peaks.yaml) or, for a CPU without an entry, a peak derived from cores x clock x "
    "FLOP/cycle (labelled derived: an estimate, not a vendor figure)."
)


def ceilings_table(ceilings: Sequence[Mapping]) -> pd.DataFrame:
    """Per machine and device: measured vs datasheet compute (per dtype) and bandwidth."""
    rows = []
    for c in sorted(ceilings, key=lambda c: (str(c.get("machine")), str(c.get("device")))):
        measured = c.get("measured") or {}
        datasheet = c.get("datasheet") or {}
        origin = peak_origin(datasheet)
        dtypes = list(
            dict.fromkeys([*(measured.get("gemm_flop_s") or {}), *(datasheet.get("flop_s") or {})])
        )
        dtypes.sort(key=precision_rank)
        for dtype in dtypes:
            m = positive((measured.get("gemm_flop_s") or {}).get(dtype))
            s = positive((datasheet.get("flop_s") or {}).get(dtype))
            rows.append(
                {
                    "machine": c.get("machine"),
                    "device": c.get("device"),
                    "roof": f"{dtype} GEMM",
                    "unit": "FLOP/s",
                    "measured": m,
                    "datasheet": s,
                    "peak_origin": origin if s else None,
                    "measured_over_datasheet": m / s if m and s else None,
                }
            )
        m = positive(measured.get("memory_bandwidth_bytes_s"))
        s = positive(datasheet.get("memory_bandwidth_bytes_s"))
        rows.append(
            {
                "machine": c.get("machine"),
                "device": c.get("device"),
                "roof": "memory bandwidth",
                "unit": "B/s",
                "measured": m,
                "datasheet": s,
                "peak_origin": origin if s else None,
                "measured_over_datasheet": m / s if m and s else None,
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "machine",
            "device",
            "roof",
            "unit",
            "measured",
            "datasheet",
            "peak_origin",
            "measured_over_datasheet",
        ],
    )


CEILING_COLUMNS = {
    "Machine": ("machine", str),
    "Device": ("device", str),
    "Roof": ("roof", str),
    "Measured": (("measured", "unit"), fmt_si),
    "Peak": (("datasheet", "unit"), fmt_si),
    "Peak is": ("peak_origin", str),
    "Measured / peak": ("measured_over_datasheet", fmt_pct),
}


def null_peak_findings(ceilings: Sequence[dict]) -> list[str]:
    """One sentence per compute peak a ceilings JSON gives as null with a reason (a CPU's
    derived bf16 peak where bf16 has no hardware arithmetic): the table shows a dash, this
    says why."""
    findings = []
    for document in ceilings:
        sheet = document.get("datasheet") or {}
        origin = peak_origin(sheet)
        where = document.get("machine") or document.get("device_name") or document.get("device")
        for dtype, reason in (sheet.get("flop_s_null_reasons") or {}).items():
            findings.append(f"{where}: no {origin} {dtype} peak, {reason}.")
    return findings


def above_peak_findings(table: pd.DataFrame) -> list[str]:
    """One sentence per measured roof above its peak: a benchmark cannot beat the device's
    peak, so the peak is too low (a derived peak's clock below what the cores ran at, a
    datasheet entry for another model)."""
    above = table[pd.to_numeric(table["measured_over_datasheet"], errors="coerce") > 1]
    findings = []
    for row in above.to_dict("records"):
        why = (
            "its clock is below the clock the cores ran at (boost), or the FLOP/cycle table "
            "under-counts this core"
            if row["peak_origin"] == "derived"
            else "check its config/peaks.yaml entry (dense vs sparse figure, the board variant)"
        )
        findings.append(
            f"{row['machine']}: the measured {row['roof']} "
            f"({fmt_si(row['measured'], row['unit'])}) is {fmt_pct(row['measured_over_datasheet'])} of the {row['peak_origin']} peak "
            f"({fmt_si(row['datasheet'], row['unit'])}): that peak is too low — {why}."
        )
    return findings


def build(page: Page) -> Section:
    ceilings = page.tables.ceilings
    table = ceilings_table(ceilings)
    return section(
        "ceilings",
        "Ceilings",
        intro=INTRO,
        findings=null_peak_findings(ceilings) + above_peak_findings(table),
        tables=[Table("Measured roofs and peaks", page.drop(cells(table, CEILING_COLUMNS)))],
        figures=page.figures_of("ceilings"),
        sources=page.sources("ceilings"),
    )
