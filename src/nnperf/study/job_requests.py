"""The request each job of the workflow runs, built from the study and the keys its path
names.

`workflow/rules/common.smk` hands each rule `to_dict()` of one of these (Snakemake's params
must be plain data); the script rebuilds it with `from_dict()`. Building a request is also
where a path naming an impossible configuration (a device/precision pair that cannot run, a
variant or recipe the study does not define) fails with one line, while the DAG is built.
`nnperf.study.loading` builds the timed runs' requests the same way for `nnperf doctor`.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from nnperf.core import contract, layout, model_names, vocab
from nnperf.core import config as study_config
from nnperf.core.errors import NnperfError
from nnperf.core.keys import RunKey

# The datasheet peaks the ceilings stage reads, in nnperf's checkout (the workflow passes
# where that is: nnperf.study.session.checkout_file).
PEAKS = "config/peaks.yaml"


def variant_settings(study: contract.StudyConfig, name: str) -> contract.VariantSettings:
    """The settings of variant `name`, or NnperfError naming the variants the study has."""
    if name not in study.variants:
        raise NnperfError(
            f"variant {name!r} is not in config variants; allowed: {', '.join(study.variants)}"
        )
    return study.variants[name]


def data_root(dataset: str) -> str:
    """Where rule `prepare_dataset` puts `dataset`."""
    return layout.path("dataset", dataset=dataset)


def image_size(study: contract.StudyConfig, dataset: str) -> int | None:
    """The side the study's ImageFolder is decoded at when `dataset` is its key; None for a
    built-in dataset. A key that is neither is an error naming the study's."""
    if dataset in vocab.DATASETS:
        return None
    if study.dataset.name != vocab.IMAGEFOLDER or dataset != study.dataset.key:
        raise NnperfError(
            f"dataset {dataset!r} is neither a built-in dataset nor this study's ImageFolder "
            f"(its dataset is {study.dataset.key!r}); allowed: {', '.join(vocab.DATASETS)}"
            + (f", {study.dataset.key}" if study.dataset.name == vocab.IMAGEFOLDER else "")
        )
    return study.dataset.side


def folder_scan(study: contract.StudyConfig):
    """The study's ImageFolder, listed once per process (`nnperf.workload.imagefolder`)."""
    from nnperf.workload import imagefolder

    return imagefolder.scan_once(study.dataset.path)


def run_request(
    study: contract.StudyConfig,
    key: RunKey,
    dataset: str,
    training: contract.TrainingSettings | None = None,
) -> contract.RunRequest:
    """The RunRequest of configuration `key` (with `training`, default the study's); an
    impossible configuration fails here."""
    study_config.check_runnable(key.device, key.precision)
    side = image_size(study, dataset)
    return contract.RunRequest(
        **key.as_dict(),
        settings=variant_settings(study, key.variant),
        dataset=dataset,
        data_root=data_root(dataset),
        training=study.training if training is None else training,
        timing=study.timing,
        # An ImageFolder's images are decoded at image_size, which the model takes as they
        # are unless its models: entry names its own (a built-in dataset's models take their
        # own size).
        input_size=model_input_size(study, key.model, dataset),
        image_size=side,
        model_source=study.model_source(key.model),
    )


def profile_request(
    study: contract.StudyConfig, key: RunKey, dataset: str
) -> contract.ProfileStepRequest:
    """The step profiled under ncu: the configuration's process 0 after `ncu.warmup_steps`."""
    training = dataclasses.replace(study.training, warmup_steps=study.ncu.warmup_steps)
    return contract.ProfileStepRequest(run=run_request(study, key, dataset, training))


def operator_profile_request(
    study: contract.StudyConfig, key: RunKey, dataset: str
) -> contract.OperatorProfileRequest:
    """A few steps of the configuration under torch.profiler (its process 0's seed)."""
    return contract.OperatorProfileRequest(
        run=run_request(study, key, dataset), settings=study.operator_profile
    )


def training_request(
    study: contract.StudyConfig, key: RunKey, recipe: str, dataset: str
) -> contract.TrainingRunRequest:
    """Configuration `key` trained to accuracy under `recipe`, one of config `recipes`."""
    study_config.check_runnable(key.device, key.precision)
    if recipe not in study.recipes:
        raise NnperfError(
            f"recipe {recipe!r} is not in config recipes; allowed: {', '.join(study.recipes)}"
        )
    settings = study.recipes[recipe]
    return contract.TrainingRunRequest(
        **key.as_dict(),
        settings=variant_settings(study, key.variant),
        recipe=recipe,
        convergence=settings,
        dataset=dataset,
        data_root=data_root(dataset),
        input_size=settings.input_size or model_input_size(study, key.model, dataset),
        image_size=image_size(study, dataset),
        model_source=study.model_source(key.model),
    )


def model_input_size(study: contract.StudyConfig, model: str, dataset: str) -> int | None:
    """The side `model` is fed, where the study decides it: its `models:` entry's
    `input_size`, else an ImageFolder's `image_size`; None leaves it to the model."""
    source = study.model_source(model)
    return (source.input_size if source is not None else None) or image_size(study, dataset)


def model_code(study: contract.StudyConfig, model: str) -> list[str]:
    """The user's source file model `model` is built from (its factory's), [] for the other
    sources: an input of every job that builds the model, so editing it re-measures."""
    return model_names.source_files(model, study.model_source(model))


def dataset_request(study: contract.StudyConfig, dataset: str) -> contract.DatasetRequest:
    """Prepare `dataset` with the study's dataset settings; an ImageFolder's with its
    listing's fingerprint, so that a changed image prepares it again."""
    if image_size(study, dataset) is not None:
        # Without image_size, which the jobs decode at: another size re-runs them, not the
        # hashing of every byte.
        return contract.DatasetRequest(
            root=data_root(dataset),
            dataset=dataclasses.replace(study.dataset, image_size=None),
            fingerprint=folder_scan(study).fingerprint,
        )
    # A fresh settings object: an ImageFolder study's path and image_size are not a
    # built-in dataset's.
    settings = contract.DatasetSettings(
        name=dataset,
        source=study.dataset.source,
        md5=study.dataset.md5,
        synthetic=study.dataset.synthetic,
    )
    return contract.DatasetRequest(root=data_root(dataset), dataset=settings)


def complexity_request(
    study: contract.StudyConfig, model: str, dataset: str
) -> contract.ComplexityRequest:
    side = image_size(study, dataset)
    return contract.ComplexityRequest(
        model=model,
        dataset=dataset,
        training=study.training,
        input_size=model_input_size(study, model, dataset),
        num_classes=None if side is None else folder_scan(study).num_classes,
        model_source=study.model_source(model),
    )


def ceilings_request(
    study: contract.StudyConfig, device: str, peaks_path: str = PEAKS
) -> contract.CeilingsRequest:
    # CPU roofs are measured at the thread count of the timed runs' reference variant.
    threads = study.variants[vocab.REFERENCE_VARIANT].cpu_threads
    return contract.CeilingsRequest(
        device=device, settings=study.ceilings, peaks_path=peaks_path, threads=threads
    )


def tables_request(study: contract.StudyConfig) -> contract.TablesRequest:
    return contract.TablesRequest(cv_threshold=study.report.cv_threshold)


def report_request(
    study: contract.StudyConfig, notes: tuple[str, ...] | list[str]
) -> contract.ReportRequest:
    """The written summary of the study, with its notes on what it left out."""
    return contract.ReportRequest(
        title=study.study.name,
        description=study.study.description.strip(),
        dataset=study.dataset.key,
        notes=tuple(notes),
        cv_threshold=study.report.cv_threshold,
        extra_results=study.report.extra_results,
    )


def accuracy_target(study: contract.StudyConfig) -> float | None:
    """The target line of the accuracy figure: the recipes' target when they share one."""
    targets = {recipe.target_accuracy for recipe in study.recipes.values()}
    return targets.pop() if len(targets) == 1 else None


def group_of(study: contract.StudyConfig, batch_size: int) -> list[int]:
    """The batch sizes measured in one group with `batch_size`: every batch size of the
    study, so that batch-size comparisons are paired round by round as precision and variant
    ones are; a batch size outside the study (a path asked for by hand) alone."""
    batch_size = int(batch_size)
    batches = sorted({int(b) for b in study.batch_sizes})
    return batches if batch_size in batches else [batch_size]


def group_members(
    study: contract.StudyConfig, device: str, model: str, batch_sizes: Sequence[int]
) -> list[RunKey]:
    """The configurations one timed job measures together, interleaved
    (`nnperf.engine.interleave`): at this model and device, every batch size of
    `batch_sizes` (`group_of`), every precision the device runs and every variant of the
    study."""
    return [
        RunKey(device, model, precision, int(batch_size), variant)
        for batch_size in sorted({int(b) for b in batch_sizes})
        for precision in study.precisions
        if vocab.supports(device, precision)
        for variant in study.variants
    ]


def group_requests(
    study: contract.StudyConfig,
    dataset: str,
    device: str,
    model: str,
    batch_sizes: Sequence[int],
) -> list[contract.RunRequest]:
    """The RunRequests of a group's members; a group of none is an error naming it."""
    members = group_members(study, device, model, batch_sizes)
    if not members:
        raise NnperfError(
            f"no precision of the study runs on {device} (precisions: "
            f"{', '.join(study.precisions)}); allowed: {', '.join(vocab.SUPPORTED_PRECISIONS[device])}"
        )
    return [run_request(study, key, dataset) for key in members]


def measurement_threads(
    study: contract.StudyConfig, device: str, variant: str | None, cores: int
) -> int:
    """Cores a measurement job holds: all of them (`cores`) on the CPU, so nothing runs
    beside a CPU measurement and perturbs it; on an accelerator one, plus the variant's
    DataLoader workers (bench_slot serialises accelerator measurements). `variant`: None
    for a job of no variant (ceilings), which counts as the reference variant."""
    if device != "cpu":
        # The GPU does the work; the host needs one core plus one per DataLoader worker.
        settings = study.variants.get(variant or vocab.REFERENCE_VARIANT)
        return 1 + (settings.num_workers if settings else 0)
    return cores
