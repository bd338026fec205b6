"""Which configurations of a study's matrix each stage runs.

The matrix (`nnperf.core.config.expand_matrix`) is every configuration timed; the other stages
take a part of it: Nsight Compute profiles the CUDA configurations at `ncu.batch_sizes` and
`ncu.variants`, torch.profiler those at `operator_profile.batch_sizes` and `.variants`, and
training to accuracy those at `convergence.precisions`, `.batch_sizes` and `.variants`, each
under every recipe. The workflow and `nnperf plan` ask the same questions, so the answers
live here, torch-free and without Snakemake.

It decides *what* runs, never how long it takes (`nnperf.study.plan`) or where files go
(`nnperf.core.layout`).
"""

from __future__ import annotations

from dataclasses import dataclass

from nnperf.core import contract
from nnperf.core import config as study_config
from nnperf.ncu import metrics as ncu


@dataclass(frozen=True)
class StageSelection:
    """The configurations of each stage that takes a part of the matrix, in matrix order."""

    ncu: tuple[study_config.RunKey, ...]
    operator_profile: tuple[study_config.RunKey, ...]
    # (configuration, recipe name) of every training run.
    training: tuple[tuple[study_config.RunKey, str], ...]


def select_stages(
    study: contract.StudyConfig, matrix: list[study_config.RunKey], ncu_on_path: bool
) -> StageSelection:
    """What each stage runs of `matrix`; a null selection key selects all of its values.

    `ncu_on_path` is whether the machine building the DAG has `ncu` (it decides
    `ncu.enabled: auto`, see `nnperf.ncu.metrics.ncu_included`).
    """
    profiled = study.ncu
    operators = study.operator_profile
    training = study.convergence

    def chosen(values, value) -> bool:
        return values is None or value in values

    return StageSelection(
        ncu=tuple(
            key
            for key in matrix
            if ncu.ncu_included(profiled.enabled, key.device, ncu_on_path)
            and chosen(profiled.batch_sizes, key.batch_size)
            and chosen(profiled.variants, key.variant)
        ),
        operator_profile=tuple(
            key
            for key in matrix
            if operators.enabled
            and chosen(operators.batch_sizes, key.batch_size)
            and chosen(operators.variants, key.variant)
        ),
        training=tuple(
            (key, recipe)
            for key in matrix
            if training.enabled
            and chosen(training.precisions, key.precision)
            and chosen(training.batch_sizes, key.batch_size)
            and chosen(training.variants, key.variant)
            for recipe in study.recipes
        ),
    )
