"""The Model complexity section: per model its parameters, FLOPs and bytes per image."""

from __future__ import annotations

from typing import Mapping, Sequence

import pandas as pd

from nnperf.core.vocab import REFERENCE_PRECISION
from nnperf.core.wording import missing
from nnperf.report.format import cells, fmt_si, si
from nnperf.report.outline import Page, Section, Table, section

INTRO = (
    "Per image: parameters, FLOPs of the forward pass and of a whole training step "
    "(FLOPs, not MACs), activation bytes saved for backward, and the algorithmic "
    "memory traffic of a training step in fp32 (fixed + per image). Where the FLOP counter "
    "has no formula for some of a step's compute ops (an FFT, an RNN kernel, a custom op), "
    "the share of those ops is stated beside the FLOPs, which leave them out."
)


def complexity_table(documents: Sequence[Mapping]) -> pd.DataFrame:
    """The complexity JSONs by model, nested fields as dotted columns (`flop_coverage.…`)."""
    return pd.json_normalize(sorted(documents, key=lambda d: str(d.get("model"))))


def _train_flops(flops, uncounted_share) -> str:
    share = 0 if missing(uncounted_share) else uncounted_share
    return fmt_si(flops, "FLOP") + (f" ({share:.0%} of compute ops uncounted)" if share else "")


TRAFFIC = f"traffic.{REFERENCE_PRECISION}"
# Of the step's compute ops, the share the FLOP counter has no formula for
# (nnperf.workload.flop_counting); absent from documents written before it.
UNCOUNTED = "flop_coverage.uncounted_share"
COMPLEXITY_COLUMNS = {
    "Model": ("model", str),
    "Dataset": ("dataset", str),
    "Input": ("input_shape", lambda shape: "x".join(map(str, shape))),
    "Parameters": ("params", si("")),
    "Forward FLOP/image": ("forward_flops_per_image", si("FLOP")),
    "Train step FLOP/image": (("train_step_flops_per_image", UNCOUNTED), _train_flops),
    "Saved activations/image": ("saved_activation_bytes_per_image", si("B")),
    "Weights": ("weight_bytes", si("B")),
    "Optimizer state": ("optimizer_state_bytes", si("B")),
    "fp32 traffic (fixed + per image)": (
        (f"{TRAFFIC}.fixed_bytes", f"{TRAFFIC}.per_image_bytes"),
        lambda fixed, per_image: f"{fmt_si(fixed, 'B')} + {fmt_si(per_image, 'B')}",
    ),
}


def build(page: Page) -> Section:
    table = cells(complexity_table(page.tables.complexity), COMPLEXITY_COLUMNS)
    return section(
        "complexity",
        "Model complexity",
        intro=INTRO,
        tables=[Table("Complexity", table)],
        figures=page.figures_of("complexity"),
        sources=page.sources("complexity"),
    )
