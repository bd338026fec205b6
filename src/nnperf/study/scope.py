"""A study as the workflow runs it on this machine: its matrix, devices, what each stage
selects, and the notes on what it leaves out.

`workflow/rules/common.smk` builds one `Scope` while Snakemake reads the Snakefile and asks it
every question about *what* the study covers; this module answers them without Snakemake, so
they are tested as data (`tests/study/test_scope.py`). The requests each job runs are built in
`nnperf.study.job_requests`; the checks at the edges of a Snakemake run in
`nnperf.study.session`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from nnperf.core import contract, devices, vocab
from nnperf.core import config as study_config
from nnperf.core.errors import NnperfError
from nnperf.core.keys import RunKey
from nnperf.ncu import metrics
from nnperf.study import job_requests
from nnperf.study.selection import StageSelection, check_selected_variants, select_stages
from nnperf.workload import imagefolder


@dataclass(frozen=True)
class Scope:
    """What a validated study covers here (`scope_of`)."""

    study: contract.StudyConfig
    # Every runnable configuration, sorted (`nnperf.core.config.expand_matrix`).
    matrix: tuple[RunKey, ...]
    # The study's devices with `auto` resolved on the machine building the DAG.
    devices: tuple[str, ...]
    # What ncu, operator profiles and training take of the matrix.
    selection: StageSelection
    # Why the study has nothing to measure (`config.empty_matrix_message`); None when it has.
    empty_message: str | None
    # The lines printed to stderr while the DAG is built, in order.
    messages: tuple[str, ...]
    # The report's "skipped and flagged" notes, each starting with a capital.
    notes: tuple[str, ...]

    @property
    def dataset(self) -> str:
        """The study's dataset key in results paths (an ImageFolder's label)."""
        return self.study.dataset.key

    def check_dataset(self, dataset: str) -> None:
        """Raise NnperfError unless a study-level file (table, figure, report) naming
        `dataset` is this study's: it is built from this study's matrix, so it must name this
        study's dataset and the matrix must not be empty."""
        if self.empty_message:
            raise NnperfError(self.empty_message)
        if dataset != self.dataset:
            raise NnperfError(
                f"a file of dataset {dataset!r} belongs to a study of that dataset, and this "
                f"study's dataset is {self.dataset!r}: add --config dataset={dataset} to build it"
            )


def scope_of(
    config: dict,
    study: contract.StudyConfig,
    ncu_on_path: bool,
    detect: Callable[[], str] = devices.detect_best_device,
) -> Scope:
    """The scope of validated `config` (typed as `study`). `ncu_on_path`: whether this machine
    has `ncu` (it decides `ncu.enabled: auto`). Raises NnperfError when a stage's
    `variants` names a variant the study does not define."""
    check_selected_variants(study)
    if study.dataset.name == vocab.IMAGEFOLDER:
        # Listed now, so a missing folder, a folder without train/ or without images, or a
        # batch larger than its training split is one line before any job runs.
        found = job_requests.folder_scan(study)
        imagefolder.check_batch_sizes(
            found, study.batch_sizes, f"dataset.path {study.dataset.path}"
        )
    matrix, matrix_notes = study_config.expand_matrix(config, detect)
    resolved = study_config.resolved_devices(config, detect)
    empty = study_config.empty_matrix_message(matrix, matrix_notes)
    messages: list[str] = []
    notes: list[str] = []

    def note(text: str) -> None:
        messages.append(f"nnperf note: {text}")
        notes.append(text[:1].upper() + text[1:])

    for text in matrix_notes:
        note(text.removeprefix("note: "))
    # A study with nothing to measure asks for nothing: no table, figure or report is rebuilt
    # from zero runs (Snakemake deletes a job's old outputs before running it), so an empty
    # matrix can never cost another study's results.
    if empty:
        messages.append(f"nnperf: {empty}")
    if "auto" in study.devices and "cuda" not in resolved and "mps" not in resolved:
        notes.append("No GPU: devices 'auto' resolved to cpu on the machine that built the DAG.")
    for device in resolved:
        reason = metrics.ncu_exclusion_reason(study.ncu.enabled, device, ncu_on_path)
        if reason:
            note(reason)
    if not study.operator_profile.enabled:
        note("operator_profile.enabled is false: no torch.profiler operator profiles")
    if not study.convergence.enabled:
        note("convergence.enabled is false: no configuration is trained to accuracy")
    return Scope(
        study=study,
        matrix=tuple(matrix),
        devices=tuple(resolved),
        selection=select_stages(study, matrix, ncu_on_path),
        empty_message=empty,
        messages=tuple(messages),
        notes=tuple(notes),
    )
