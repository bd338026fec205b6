"""The requests: what one job is asked to do, one frozen dataclass per kind of job.

`RunRequest` is one timed run (rule `timed_run`, `nnperf run`), `ProfileStepRequest` the step
under ncu, `TrainingRunRequest` one training run to accuracy, ... Each is made of the keys of
the configuration it is for (`key` gives them as a `nnperf.core.keys.RunKey`) and the settings
of the config sections it reads (`nnperf.core.settings`). The fields stay flat (`device`,
`model`, ... rather than one `key` field) because their plain-data form is what crosses into a
job, what an ncu process reads from its JSON file and what heads every run document: it must
not change when the Python side does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nnperf.core import vocab
from nnperf.core.keys import RunKey
from nnperf.core.plaindata import to_dict
from nnperf.core.settings import (
    CeilingsSettings,
    ConvergenceSettings,
    DatasetSettings,
    ModelSource,
    OperatorProfileSettings,
    ReportSettings,
    StudyInfo,
    TimingSettings,
    TrainingSettings,
    VariantSettings,
    check_cv_threshold,
)


def dataset_root(data_root: str | None, dataset: str) -> str:
    """Where a request's prepared dataset is: `data_root`, or where rule `prepare_dataset`
    puts `dataset` (resources/data/<dataset>)."""
    from nnperf.core import layout

    return data_root or layout.path("dataset", dataset=dataset)


@dataclass(frozen=True)
class DatasetRequest:
    """Prepare one dataset in `root` (rule `prepare_dataset`)."""

    root: str
    dataset: DatasetSettings = DatasetSettings()
    # An ImageFolder's listing when the DAG was built (its files' paths, sizes and
    # modification times): a param of rule prepare_dataset, so a changed image re-runs it.
    fingerprint: str | None = None


@dataclass(frozen=True)
class ComplexityRequest:
    """Count one model's FLOPs, saved activations and traffic (rule `complexity`).

    The optimiser settings are the timed runs' own, so the state it counts (an SGD momentum
    buffer, Adam's two moments) is the state they had.
    """

    model: str
    dataset: str = DatasetSettings.name
    training: TrainingSettings = TrainingSettings()
    # None: the model's own input size (32 for *_cifar models, 224 for ImageNet ones).
    input_size: int | None = None
    # None: the built-in dataset's classes; an ImageFolder's class folders otherwise.
    num_classes: int | None = None
    # How to build `model` when its name alone does not say (config `models:` mapping).
    model_source: ModelSource | None = None


@dataclass(frozen=True)
class CeilingsRequest:
    """Measure one device's roofs (rule `ceilings`)."""

    device: str
    settings: CeilingsSettings = CeilingsSettings()
    peaks_path: str = "config/peaks.yaml"
    # The thread count of the timed runs' reference variant; None keeps torch's default.
    threads: int | None = None


@dataclass(frozen=True)
class RunRequest:
    """The measurement of one configuration: all its worker processes and windows (rule
    `timed_run`, `nnperf run`)."""

    device: str
    model: str
    precision: str
    batch_size: int
    variant: str = vocab.REFERENCE_VARIANT
    settings: VariantSettings = VariantSettings()
    dataset: str = DatasetSettings.name
    # None: resources/data/<dataset>, where rule `prepare_dataset` puts it.
    data_root: str | None = None
    training: TrainingSettings = TrainingSettings()
    timing: TimingSettings = TimingSettings()
    # None: the model's own input size (as ComplexityRequest.input_size); images are resized
    # on the device when it differs from theirs.
    input_size: int | None = None
    # The side an ImageFolder's images are decoded at (`dataset.image_size`); None for the
    # built-in datasets, whose images are 32x32.
    image_size: int | None = None
    # How to build `model` when its name alone does not say (config `models:` mapping).
    model_source: ModelSource | None = None

    def seed_of(self, process: int) -> int:
        """Worker process `process`'s seed: `training.seed` plus its index, so processes
        differ in initial weights and data order as real retrainings do."""
        return self.training.seed + process

    @property
    def target_ci(self) -> float:
        """The relative CI half-width this configuration is measured to."""
        return self.timing.target_for(self.device)

    @property
    def root(self) -> str:
        """Where the prepared dataset is."""
        return dataset_root(self.data_root, self.dataset)

    @property
    def key(self) -> RunKey:
        """The configuration this request is for."""
        return RunKey.of(self)

    def keys(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "device": self.device,
            "precision": self.precision,
            "batch_size": self.batch_size,
            "variant": self.variant,
            "dataset": self.dataset,
        }

    def header(self) -> dict[str, Any]:
        """Keys, variant, training and timing settings: the head of every run document."""
        return {
            **self.keys(),
            **({"image_size": self.image_size} if self.image_size is not None else {}),
            "variant_settings": to_dict(self.settings),
            **to_dict(self.training),
            "timing": {**to_dict(self.timing), "target_ci": self.target_ci},
        }


@dataclass(frozen=True)
class ProfileStepRequest:
    """One NVTX-marked training step for Nsight Compute (rule `ncu_profile`, `nnperf step`).

    The run's `training.warmup_steps` are `ncu.warmup_steps`; its timed steps and timing
    settings are unused. The profiled process is the configuration's process 0 (its seed).
    """

    run: RunRequest
    # None: nnperf.ncu.ranges.CALIBRATION_GEMM_MNK, the size the parser checks against.
    calibration_gemm_size: int | None = None


@dataclass(frozen=True)
class OperatorProfileRequest:
    """One configuration's operator profile under torch.profiler (`nnperf.torchprof.profile`).

    The training is built as the timed runs build it, with process 0's seed; the run's
    `training.warmup_steps`, timed steps and timing settings are unused (`settings` has the
    profile's own steps and budget).
    """

    run: RunRequest
    settings: OperatorProfileSettings = OperatorProfileSettings()


@dataclass(frozen=True)
class TablesRequest:
    """Aggregate run JSONs into runs.csv and summary.csv (rule `aggregate_runs`)."""

    cv_threshold: float = ReportSettings.cv_threshold

    def __post_init__(self) -> None:
        check_cv_threshold(self.cv_threshold)


@dataclass(frozen=True)
class FigureRequest:
    """One figure: its kind and the keys it is drawn for (the `plot_*` rules)."""

    kind: str
    device: str
    dataset: str | None = None
    model: str | None = None
    precision: str | None = None
    batch_size: int | None = None
    variant: str | None = None


@dataclass(frozen=True)
class ReportRequest:
    """The written summary (rule `render_report`, `nnperf render-report`)."""

    title: str = StudyInfo.name
    description: str = ""
    # The study's dataset: other machines' folders are read for the same one.
    dataset: str | None = None
    notes: tuple[str, ...] = ()
    cv_threshold: float = ReportSettings.cv_threshold
    extra_results: tuple[str, ...] = ReportSettings.extra_results

    def __post_init__(self) -> None:
        check_cv_threshold(self.cv_threshold)


@dataclass(frozen=True)
class TrainingRunRequest:
    """One configuration trained to accuracy under one recipe (the training stage,
    `nnperf.training.to_accuracy`).

    A training run is keyed like a timed run (dataset, device, model, precision, batch size,
    variant) plus `recipe`, the name of its `ConvergenceSettings` the way `variant` names a
    set of toggles: two recipes of one configuration (another lr, schedule or seed) are two
    runs side by side. What the run computes is `definition()`; its checkpoints carry it, so
    one can only be resumed by the run that wrote it.
    """

    device: str
    model: str
    precision: str
    batch_size: int
    variant: str = vocab.REFERENCE_VARIANT
    settings: VariantSettings = VariantSettings()
    recipe: str = vocab.DEFAULT_RECIPE
    convergence: ConvergenceSettings = ConvergenceSettings()
    dataset: str = DatasetSettings.name
    # None: resources/data/<dataset>, where rule `prepare_dataset` puts it.
    data_root: str | None = None
    # None: the model's own input size (as RunRequest.input_size); seed 004 fed ResNet-50
    # CIFAR's 32x32 images as they are (input_size 32).
    input_size: int | None = None
    # As RunRequest.image_size.
    image_size: int | None = None
    # How to build `model` when its name alone does not say (config `models:` mapping).
    model_source: ModelSource | None = None

    @property
    def root(self) -> str:
        """Where the prepared dataset is."""
        return dataset_root(self.data_root, self.dataset)

    @property
    def key(self) -> RunKey:
        """The configuration this request is for."""
        return RunKey.of(self)

    def keys(self) -> dict[str, Any]:
        """The run's keys, in `vocab.TRAINING_KEYS` order."""
        return {key: getattr(self, key) for key in vocab.TRAINING_KEYS}

    def definition(self) -> dict[str, Any]:
        """Everything that decides what is trained, as plain data: the keys' meanings (not the
        variant's and recipe's names but their settings), less the convergence fields that
        only decide when to stop (`ConvergenceSettings.OUTSIDE_IDENTITY`)."""
        convergence = {
            key: value
            for key, value in to_dict(self.convergence).items()
            if key not in ConvergenceSettings.OUTSIDE_IDENTITY
        }
        # A model from a mapping entry (user factory, timm name) is defined by it too; left
        # out when absent so that earlier checkpoints of registry models still resume.
        source = {"model_source": to_dict(self.model_source)} if self.model_source else {}
        return {
            **source,
            "dataset": self.dataset,
            "device": self.device,
            "model": self.model,
            "precision": self.precision,
            "batch_size": self.batch_size,
            "input_size": self.input_size,
            **({"image_size": self.image_size} if self.image_size is not None else {}),
            "variant_settings": to_dict(self.settings),
            "convergence": convergence,
        }

    def header(self) -> dict[str, Any]:
        """Keys and settings: the head of the run's summary document."""
        return {
            **self.keys(),
            "variant_settings": to_dict(self.settings),
            "convergence": to_dict(self.convergence),
            "requested_input_size": self.input_size,
        }
