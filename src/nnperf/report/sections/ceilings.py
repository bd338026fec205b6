"""The Ceilings section: the roofs, the ceilings stage's measured GEMM throughput per dtype
and main-memory bandwidth next to the datasheet peaks, and why a peak is missing where the
ceilings JSON gives it as null."""

from __future__ import annotations

from typing import Mapping, Sequence

import pandas as pd

from nnperf.core.vocab import precision_rank
from nnperf.report.bounds import positive
from nnperf.report.format import fmt_pct, fmt_si
from nnperf.report.outline import Page, Section, Table, section

INTRO = (
    "The roofs: the ceilings stage's measured GEMM throughput per dtype and "
    "main-memory bandwidth next to the datasheet peaks."
)


def ceilings_table(ceilings: Sequence[Mapping]) -> pd.DataFrame:
    """Per machine and device: measured vs datasheet compute (per dtype) and bandwidth."""
    rows = []
    for c in sorted(ceilings, key=lambda c: (str(c.get("machine")), str(c.get("device")))):
        measured = c.get("measured") or {}
        datasheet = c.get("datasheet") or {}
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
            "measured_over_datasheet",
        ],
    )


def ceilings_display(table: pd.DataFrame) -> pd.DataFrame:
    if table.empty:
        return pd.DataFrame()
    return pd.DataFrame(
        {
            "Machine": table["machine"].astype(str),
            "Device": table["device"].astype(str),
            "Roof": table["roof"],
            "Measured": [fmt_si(v, u) for v, u in zip(table["measured"], table["unit"])],
            "Datasheet": [fmt_si(v, u) for v, u in zip(table["datasheet"], table["unit"])],
            "Measured / datasheet": [fmt_pct(v) for v in table["measured_over_datasheet"]],
        }
    )


def null_peak_findings(ceilings: Sequence[dict]) -> list[str]:
    """One sentence per compute peak a ceilings JSON gives as null with a reason (a CPU's
    derived bf16 peak where bf16 has no hardware arithmetic): the table shows a dash, this
    says why."""
    findings = []
    for document in ceilings:
        sheet = document.get("datasheet") or {}
        origin = "derived" if sheet.get("derived") else "datasheet"
        where = document.get("machine") or document.get("device_name") or document.get("device")
        for dtype, reason in (sheet.get("flop_s_null_reasons") or {}).items():
            findings.append(f"{where}: no {origin} {dtype} peak, {reason}.")
    return findings


def build(page: Page) -> Section:
    ceilings = page.tables.ceilings
    return section(
        "ceilings",
        "Ceilings",
        intro=INTRO,
        findings=null_peak_findings(ceilings),
        tables=[
            Table(
                "Measured and datasheet roofs",
                page.drop(ceilings_display(ceilings_table(ceilings))),
            )
        ],
        figures=page.figures_of("ceilings"),
        sources=page.sources("ceilings"),
    )
