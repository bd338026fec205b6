"""Which configurations of a study's matrix each stage runs.

The matrix (`nnperf.core.config.expand_matrix`) is every configuration timed; the other stages
take a part of it: Nsight Compute profiles the CUDA configurations at `ncu.precisions`,
`.batch_sizes` and `.variants`, torch.profiler those at `operator_profile.precisions`,
`.batch_sizes` and `.variants`, and training to accuracy those at `convergence.precisions`,
`.batch_sizes` and `.variants`, each under every recipe. Each of those is a `Selection`, read from its config section; the workflow
and `nnperf plan` ask the same questions, so the answers live here, torch-free and without
Snakemake.

It decides *what* runs, never how long it takes (`nnperf.study.plan`) or where files go
(`nnperf.core.layout`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nnperf.core import contract
from nnperf.core.errors import NnperfError
from nnperf.core.keys import RunKey
from nnperf.ncu import metrics

# The config sections that select part of the matrix, and the attribute of StudyConfig each is.
SELECTING_SECTIONS = ("ncu", "operator_profile", "convergence")


@dataclass(frozen=True)
class Selection:
    """The batch sizes, variants and precisions a stage takes of the matrix; None takes all
    of that key's values, and a stage that is off selects nothing."""

    enabled: bool = True
    batch_sizes: tuple[int, ...] | None = None
    variants: tuple[str, ...] | None = None
    precisions: tuple[str, ...] | None = None

    @classmethod
    def of(cls, section: Any, enabled: bool | None = None) -> Selection:
        """The selection a config section states (`ncu`, `operator_profile`, `convergence`):
        its `batch_sizes`, `variants` and `precisions`. `enabled`, when given, replaces the
        section's own (ncu's `auto` is decided per device)."""
        return cls(
            enabled=section.enabled if enabled is None else enabled,
            batch_sizes=section.batch_sizes,
            variants=section.variants,
            precisions=section.precisions,
        )

    def selects(self, key: RunKey) -> bool:
        """Whether the stage runs configuration `key`."""
        return (
            bool(self.enabled)
            and _takes(self.batch_sizes, key.batch_size)
            and _takes(self.variants, key.variant)
            and _takes(self.precisions, key.precision)
        )


def _takes(values: tuple | None, value: Any) -> bool:
    return values is None or value in values


@dataclass(frozen=True)
class StageSelection:
    """The configurations of each stage that takes a part of the matrix, in matrix order."""

    ncu: tuple[RunKey, ...]
    operator_profile: tuple[RunKey, ...]
    # (configuration, recipe name) of every training run.
    training: tuple[tuple[RunKey, str], ...]


def select_stages(
    study: contract.StudyConfig, matrix: list[RunKey], ncu_on_path: bool
) -> StageSelection:
    """What each stage runs of `matrix`; a null selection key selects all of its values.

    `ncu_on_path` is whether the machine building the DAG has `ncu` (it decides
    `ncu.enabled: auto`, see `nnperf.ncu.metrics.ncu_included`).
    """
    operators = Selection.of(study.operator_profile)
    training = Selection.of(study.convergence)
    return StageSelection(
        ncu=tuple(
            key
            for key in matrix
            if Selection.of(
                study.ncu, enabled=metrics.ncu_included(study.ncu.enabled, key.device, ncu_on_path)
            ).selects(key)
        ),
        operator_profile=tuple(key for key in matrix if operators.selects(key)),
        training=tuple(
            (key, recipe) for key in matrix if training.selects(key) for recipe in study.recipes
        ),
    )


def check_selected_variants(study: contract.StudyConfig) -> None:
    """Raise NnperfError when a stage's `variants` names a variant the study does not define
    (a typo would otherwise select nothing, silently)."""
    for section in SELECTING_SECTIONS:
        for name in getattr(study, section).variants or ():
            if name not in study.variants:
                raise NnperfError(
                    f"config {section}.variants names {name!r}, which is not in config "
                    f"variants; allowed: {', '.join(study.variants)}"
                )
