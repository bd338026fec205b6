"""The Model complexity section: per model its parameters, FLOPs and bytes per image, from
the complexity JSONs."""

from __future__ import annotations

from typing import Mapping, Sequence

import pandas as pd

from nnperf.core.vocab import REFERENCE_PRECISION
from nnperf.report.format import fmt_si
from nnperf.report.outline import Page, Section, Table, section

INTRO = (
    "Per image: parameters, FLOPs of the forward pass and of a whole training step "
    "(FLOPs, not MACs), activation bytes saved for backward, and the algorithmic "
    "memory traffic of a training step in fp32 (fixed + per image). Where the FLOP counter "
    "has no formula for some of a step's compute ops (an FFT, an RNN kernel, a custom op), "
    "the share of those ops is stated beside the FLOPs, which leave them out."
)


def complexity_table(documents: Sequence[Mapping]) -> pd.DataFrame:
    """One row per model: parameters, FLOPs and bytes per image (complexity JSONs)."""
    rows = []
    for d in sorted(documents, key=lambda d: str(d.get("model"))):
        traffic = (d.get("traffic") or {}).get(REFERENCE_PRECISION) or {}
        rows.append(
            {
                "model": d.get("model"),
                "dataset": d.get("dataset"),
                "input_shape": "x".join(str(v) for v in d.get("input_shape") or []),
                "params": d.get("params"),
                "forward_flops_per_image": d.get("forward_flops_per_image"),
                "train_step_flops_per_image": d.get("train_step_flops_per_image"),
                # Of the step's compute ops, the share the FLOP counter has no formula for
                # (nnperf.workload.flop_counting); None in documents from before it.
                "uncounted_op_share": (d.get("flop_coverage") or {}).get("uncounted_share"),
                "saved_activation_bytes_per_image": d.get("saved_activation_bytes_per_image"),
                "weight_bytes": d.get("weight_bytes"),
                "optimizer_state_bytes": d.get("optimizer_state_bytes"),
                "fp32_traffic_fixed_bytes": traffic.get("fixed_bytes"),
                "fp32_traffic_per_image_bytes": traffic.get("per_image_bytes"),
            }
        )
    return pd.DataFrame(rows)


def complexity_display(table: pd.DataFrame) -> pd.DataFrame:
    if table.empty:
        return pd.DataFrame()
    return pd.DataFrame(
        {
            "Model": table["model"],
            "Dataset": table["dataset"],
            "Input": table["input_shape"],
            "Parameters": [fmt_si(v, "") for v in table["params"]],
            "Forward FLOP/image": [fmt_si(v, "FLOP") for v in table["forward_flops_per_image"]],
            "Train step FLOP/image": [
                fmt_si(v, "FLOP") + (f" ({share:.0%} of compute ops uncounted)" if share else "")
                for v, share in zip(
                    table["train_step_flops_per_image"], table["uncounted_op_share"].fillna(0)
                )
            ],
            "Saved activations/image": [
                fmt_si(v, "B") for v in table["saved_activation_bytes_per_image"]
            ],
            "Weights": [fmt_si(v, "B") for v in table["weight_bytes"]],
            "Optimizer state": [fmt_si(v, "B") for v in table["optimizer_state_bytes"]],
            "fp32 traffic (fixed + per image)": [
                f"{fmt_si(a, 'B')} + {fmt_si(b, 'B')}"
                for a, b in zip(
                    table["fp32_traffic_fixed_bytes"], table["fp32_traffic_per_image_bytes"]
                )
            ],
        }
    )


def build(page: Page) -> Section:
    return section(
        "complexity",
        "Model complexity",
        intro=INTRO,
        tables=[Table("Complexity", complexity_display(complexity_table(page.tables.complexity)))],
        figures=page.figures_of("complexity"),
        sources=page.sources("complexity"),
    )
