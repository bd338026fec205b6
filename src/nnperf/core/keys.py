"""The key of one configuration: device, model, precision, batch size and variant.

A configuration is named in four places: the matrix the config expands to
(`nnperf.core.config.expand_matrix`), the wildcards of a path under results/ (what
`workflow/rules/common.smk` is handed), the requests a job runs (`RunRequest.key`,
`TrainingRunRequest.key`) and the stage selections (`nnperf.study.selection`). They all use
this one type, so `batch_size` is turned into an integer once, here, and nowhere else.

The dataset is not part of it: a study has one (config `dataset:`), and the recipe of a
training run is named beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The fields of a RunKey, in path order (`nnperf.core.layout`).
KEY_FIELDS = ("device", "model", "precision", "batch_size", "variant")


@dataclass(frozen=True, order=True)
class RunKey:
    """One configuration of the matrix; a path under results/runs/ names exactly one."""

    device: str
    model: str
    precision: str
    batch_size: int
    variant: str

    @classmethod
    def from_wildcards(cls, wildcards: Any) -> RunKey:
        """The key a path's wildcards name (Snakemake's `wildcards`, or anything with those
        attributes); `batch_size` arrives as text and becomes an integer."""
        return cls(
            device=wildcards.device,
            model=wildcards.model,
            precision=wildcards.precision,
            batch_size=int(wildcards.batch_size),
            variant=wildcards.variant,
        )

    @classmethod
    def of(cls, owner: Any) -> RunKey:
        """The key of anything that carries the five fields as attributes (a request)."""
        return cls(
            device=owner.device,
            model=owner.model,
            precision=owner.precision,
            batch_size=owner.batch_size,
            variant=owner.variant,
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "model": self.model,
            "precision": self.precision,
            "batch_size": self.batch_size,
            "variant": self.variant,
        }
