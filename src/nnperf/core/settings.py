"""The settings of a study, one frozen dataclass per config section.

`TrainingSettings` is config `training:`, `VariantSettings` one entry of `variants:`, ... and
`StudyConfig` the whole file. A field's default is written once, in the config schema
(workflow/schemas/config.schema.yaml): `schema_defaults` gives each class the defaults of its
section, and `tests/core/test_contract.py` holds the schema's keys to these fields. What a
job is asked to do is a request (`nnperf.core.requests`), made of keys and these settings;
both cross into a job as plain data (`nnperf.core.plaindata`). `nnperf.core.contract` is the
one name to import them all by.
"""

from __future__ import annotations

import math
import os
import re
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path, PurePath
from typing import Any

import yaml

from nnperf.core import vocab
from nnperf.core.errors import NnperfError
from nnperf.core.plaindata import to_dict

# Every config key with its description and default (`nnperf.core.config` validates by it).
SCHEMA_PATH = Path(__file__).resolve().parents[3] / "workflow" / "schemas" / "config.schema.yaml"
with open(SCHEMA_PATH, encoding="utf-8") as _handle:
    SCHEMA = yaml.safe_load(_handle)


def schema_defaults(pointer: str):
    """Class decorator, applied before `dataclass`: each field the class gives no value takes
    the default the schema states for it under `pointer` (`properties/timing`, `$defs/variant`),
    a list as a tuple and a whole number as a float where the field is a float."""
    node = SCHEMA
    for step in filter(None, pointer.split("/")):
        node = node[int(step) if step.isdigit() else step]

    def apply(cls):
        for name, annotation in cls.__annotations__.items():
            if name in vars(cls):
                continue
            spec = node["properties"].get(name, {})
            if "default" not in spec:
                continue  # required: no default
            value = spec["default"]
            if isinstance(value, list):
                value = tuple(value)
            elif type(value) is int and re.match(r"float\b", str(annotation)):
                value = float(value)
            setattr(cls, name, value)
        return cls

    return apply


def check_finite(settings: Any, section: str) -> None:
    """Refuse a NaN or infinite number in any field of `settings`, with one line naming
    `section.field`.

    The bounds in the `__post_init__`s below cannot catch them: every comparison with NaN is
    false, so `not x > 0` is the only spelling that refuses it, and infinity passes every
    lower bound. The config loader refuses them too (`nnperf.core.config.check_finite`);
    this is for a request built outside Snakemake (`nnperf run`, a JSON file).
    """
    for item in fields(settings):
        value = getattr(settings, item.name)
        values = value if isinstance(value, tuple) else (value,)
        if any(isinstance(v, float) and not math.isfinite(v) for v in values):
            raise NnperfError(
                f"{section}.{item.name} = {value!r} is not a finite number; allowed: a finite "
                "number"
            )


@dataclass(frozen=True)
@schema_defaults("properties/study")
class StudyInfo:
    """What this study is, for the report (config `study:`)."""

    name: str
    description: str


@dataclass(frozen=True)
@schema_defaults("properties/dataset/properties/synthetic")
class SyntheticData:
    """Size and seed of the synthetic, CIFAR-shaped dataset (config `dataset.synthetic:`)."""

    train_images: int
    test_images: int
    seed: int


# An ImageFolder's images are decoded at this side when `dataset.image_size` is null:
# torchvision's ImageNet training size.
DEFAULT_IMAGE_SIZE = 224


@dataclass(frozen=True)
@schema_defaults("properties/dataset")
class DatasetSettings:
    """Training data (config `dataset:`).

    `name: imagefolder` reads the user's folder `path` (`train/<class>/*.jpg|png`, and
    `val/` alike); its images are decoded at `image_size`, and its results are filed under
    `key`: `label`, or the folder's own name. The other names are built in and are their own
    key.
    """

    name: str
    source: str | None
    md5: str | None
    synthetic: SyntheticData = SyntheticData()
    path: str | None
    # None: DEFAULT_IMAGE_SIZE for an ImageFolder.
    image_size: int | None
    label: str | None

    def __post_init__(self) -> None:
        if self.name != vocab.IMAGEFOLDER:
            for key in ("path", "image_size", "label"):
                if getattr(self, key) is not None:
                    raise NnperfError(
                        f"dataset.{key} is for dataset.name {vocab.IMAGEFOLDER}; allowed with "
                        f"{self.name}: null"
                    )
            return
        if not self.path:
            raise NnperfError(
                "dataset.path is missing; dataset.name imagefolder needs the folder that "
                "holds train/ and val/"
            )
        for key in ("source", "md5"):
            if getattr(self, key) is not None:
                raise NnperfError(
                    f"dataset.{key} is for cifar10 and cifar100; allowed with imagefolder: "
                    "null (dataset.path names the folder)"
                )
        if self.image_size is not None and self.image_size < 8:
            raise NnperfError(
                f"dataset.image_size = {self.image_size!r} is too small; allowed: an integer "
                ">= 8 or null (224)"
            )
        self.key  # noqa: B018 - a name that cannot be a path key fails here, not in a job

    @property
    def key(self) -> str:
        """The dataset's name in results paths (`layout`'s `{dataset}`)."""
        if self.name != vocab.IMAGEFOLDER:
            return self.name
        if self.label is not None:
            where, key = "dataset.label", self.label
        else:
            where = "the folder name of dataset.path"
            key = PurePath(os.path.normpath(os.path.expanduser(self.path))).name
        if not re.fullmatch(vocab.DATASET_KEY_PATTERN, key):
            raise NnperfError(
                f"{where} {key!r} cannot name results; set dataset.label to a name of letters, "
                "digits, _ and -, starting with a letter or digit"
            )
        if key in vocab.DATASET_NAMES:
            raise NnperfError(
                f"{where} {key!r} is the name of a built-in dataset, whose results it would "
                "share; set dataset.label to another name"
            )
        return key

    @property
    def side(self) -> int | None:
        """The side an ImageFolder's images are decoded at; None for the built-in datasets
        (their images are 32x32)."""
        if self.name != vocab.IMAGEFOLDER:
            return None
        return self.image_size or DEFAULT_IMAGE_SIZE


@dataclass(frozen=True)
@schema_defaults("properties/training")
class TrainingSettings:
    """The training step that is timed and its optimiser (config `training:`)."""

    warmup_steps: int
    timed_steps: int
    optimizer: str
    lr: float
    momentum: float
    weight_decay: float
    seed: int
    augment: bool

    def __post_init__(self) -> None:
        check_finite(self, "training")
        if not self.lr > 0:
            raise NnperfError(f"training.lr = {self.lr!r} is not allowed; allowed: a number > 0")
        if not 0 <= self.momentum < 1:
            raise NnperfError(
                f"training.momentum = {self.momentum!r} is not allowed; allowed: a number in [0, 1)"
            )


# The share of `timing.max_seconds` that a null `timing.min_seconds` stands for: the default
# study's own ratio (config/config.yaml measured its example with 20 s of 60), so one key
# (`timing={max_seconds: 10}`) sets a budget and the default study measures as it did.
MIN_SECONDS_SHARE = 1 / 3


@dataclass(frozen=True)
@schema_defaults("properties/timing")
class TimingSettings:
    """How long and how often a configuration is measured (config `timing:`).

    A configuration is timed by worker processes (at least `min_processes`, at most
    `max_processes`), each running `training.warmup_steps` untimed steps and then between
    `min_windows` and `max_windows` timed windows of `training.timed_steps` steps. It stops
    once the 95% confidence interval of its throughput is within `target_ci` of the estimate
    and `min_seconds` (null: a third of `max_seconds`) of timed windows have run, or when
    `max_seconds` of wall time are spent (`nnperf.engine.stopping` has the rule). A
    configuration whose minimal measurement cannot fit in `max_seconds` ends early with status
    `over_budget` and its measured step time.

    One-time costs are judged apart (`nnperf.engine.stopping.one_time_kinds`): the first step of
    every process (allocation, cuDNN autotuning), compilation and CUDA-graph recording each
    have a bound of their own, and the first process's one-time steps do not spend
    `max_seconds`, which budgets steady steps: a 6 s cuDNN autotune ahead of 30 ms steps
    says nothing about whether the measurement fits.
    """

    # None: the device's default (vocab.DEFAULT_TARGET_CI: 1% on GPUs, 3% on CPUs).
    target_ci: float | None
    # None: MIN_SECONDS_SHARE of max_seconds, resolved in __post_init__ (a float after it).
    min_seconds: float | None
    max_seconds: float
    min_processes: int
    max_processes: int
    min_windows: int
    max_windows: int
    # Bounds of the one-time steps (seconds); None: max_seconds.
    max_first_step_seconds: float | None
    max_compile_seconds: float
    max_recording_seconds: float | None
    # vocab.DISTURBED_WINDOW_POLICIES: a disturbed window measured again, or flagged and kept.
    disturbed_windows: str
    # vocab.PAIRING_GRAINS: compared members' windows alternating in shared processes, or not.
    pairing: str

    def __post_init__(self) -> None:
        check_finite(self, "timing")
        for key, allowed in (
            ("disturbed_windows", vocab.DISTURBED_WINDOW_POLICIES),
            ("pairing", vocab.PAIRING_GRAINS),
        ):
            if getattr(self, key) not in allowed:
                raise NnperfError(
                    f"timing.{key} = {getattr(self, key)!r} is not allowed; "
                    f"allowed: {', '.join(allowed)}"
                )
        if self.min_seconds is None:
            object.__setattr__(self, "min_seconds", MIN_SECONDS_SHARE * self.max_seconds)
        if self.target_ci is not None and not 0 < self.target_ci < 1:
            raise NnperfError(
                f"timing.target_ci = {self.target_ci!r} is not allowed; allowed: a number "
                "between 0 and 1 (a relative half-width, 0.01 = 1%) or null"
            )
        for low, high in (
            ("min_seconds", "max_seconds"),
            ("min_processes", "max_processes"),
            ("min_windows", "max_windows"),
        ):
            if getattr(self, low) > getattr(self, high):
                raise NnperfError(
                    f"timing.{low} = {getattr(self, low)!r} is larger than timing.{high} = "
                    f"{getattr(self, high)!r}; allowed: {low} <= {high}"
                )

    def one_time_bound(self, kind: str) -> tuple[float, str]:
        """(seconds, config key) bounding one one-time step of `kind`
        (`nnperf.engine.stopping.ONE_TIME_KINDS`)."""
        key = f"max_{kind}_seconds"
        bound = getattr(self, key)
        return (self.max_seconds if bound is None else float(bound)), key

    def target_for(self, device: str) -> float:
        """The CI target on `device`: `target_ci`, or the device's default when null."""
        if self.target_ci is not None:
            return self.target_ci
        return vocab.DEFAULT_TARGET_CI[device]


@dataclass(frozen=True)
@schema_defaults("$defs/variant")
class VariantSettings:
    """One variant's optimisation toggles (config `variants: {name: ...}`); the defaults are
    the plain PyTorch training script."""

    channels_last: bool
    cudnn_benchmark: bool
    compile: str | bool
    optimizer_impl: str
    data_path: str
    num_workers: int
    pin_memory: bool
    # None: torch's default (2 when num_workers > 0); DataLoader refuses one with 0 workers.
    prefetch_factor: int | None
    cpu_threads: int | None

    def __post_init__(self) -> None:
        if self.prefetch_factor is not None and self.num_workers == 0:
            raise NnperfError(
                f"variant setting prefetch_factor={self.prefetch_factor!r} needs num_workers > 0;"
                " allowed with num_workers=0: null"
            )

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


@dataclass(frozen=True)
@schema_defaults("properties/ncu")
class NcuSettings:
    """Nsight Compute profiling of one training step (config `ncu:`)."""

    enabled: str | bool
    clock_control: str
    warmup_steps: int
    batch_sizes: tuple[int, ...] | None
    variants: tuple[str, ...] | None
    precisions: tuple[str, ...] | None


@dataclass(frozen=True)
@schema_defaults("properties/ceilings")
class CeilingsSettings:
    """Measured compute and bandwidth roofs (config `ceilings:`)."""

    # None: the device's own sizes (`nnperf.roofline.ceilings.DEFAULT_GEMM_SIZES`).
    gemm_sizes: tuple[int, ...] | None
    trials: int
    bandwidth_bytes: int | None
    sweep_min_bytes: int
    sweep_max_bytes: int


@dataclass(frozen=True)
@schema_defaults("properties/report")
class ReportSettings:
    """The written summary (config `report:`)."""

    cv_threshold: float
    extra_results: tuple[str, ...]

    def __post_init__(self) -> None:
        check_cv_threshold(self.cv_threshold)


def check_cv_threshold(value: float) -> None:
    """`report.cv_threshold` is a fraction in (0, 1] (config `report:`; the report requests
    carry it too)."""
    if not (isinstance(value, (int, float)) and math.isfinite(value) and 0 < value <= 1):
        raise NnperfError(
            f"report.cv_threshold = {value!r} is not allowed; allowed: a fraction in (0, 1] "
            "(0.05 = 5%)"
        )


@dataclass(frozen=True)
@schema_defaults("properties/operator_profile")
class OperatorProfileSettings:
    """torch.profiler operator profiles, apart from the timed runs (config
    `operator_profile:`; `nnperf.torchprof.profile` runs them, `nnperf.torchprof.analysis`
    reads them).

    After `warmup_steps` untimed steps, `steps` training steps run under `torch.profiler`
    (CPU activity, plus CUDA on a GPU; shapes and memory always recorded). The job's warm-up
    and profiled steps must fit in `max_seconds` (the model's build and the trace export are
    not counted; neither are the one-time first steps, allocation and autotuning,
    compilation, CUDA-graph recording, which `nnperf.torchprof.profile.ONE_TIME_MAX_S` bounds):
    steps are cut down to fit, down to one warm-up and one profiled step, and a
    configuration whose single step is too slow even for that ends with status
    `over_budget`, as a timed run does. `top_operators` rows of the operator and layer
    tables are named in the report (the CSVs hold them all). `label_layers` marks every
    module's forward call with a profiler range named by its module path, which is what
    groups operators by layer; `layer_depth` groups by the first N path components (null:
    the innermost module). `with_stack` records Python stacks in the trace (slower, larger).
    `batch_sizes`, `variants` and `precisions` limit which configurations are profiled (null:
    all).
    """

    enabled: bool
    warmup_steps: int
    steps: int
    max_seconds: float
    top_operators: int
    label_layers: bool
    layer_depth: int | None
    with_stack: bool
    batch_sizes: tuple[int, ...] | None
    variants: tuple[str, ...] | None
    precisions: tuple[str, ...] | None

    def __post_init__(self) -> None:
        check_finite(self, "operator_profile")
        minimums = {"warmup_steps": 0, "steps": 1, "top_operators": 1}
        for key, minimum in minimums.items():
            if getattr(self, key) < minimum:
                raise NnperfError(
                    f"operator_profile.{key} = {getattr(self, key)!r} is not allowed; "
                    f"allowed: an integer >= {minimum}"
                )
        if not self.max_seconds > 0:
            raise NnperfError(
                f"operator_profile.max_seconds = {self.max_seconds!r} is not allowed; "
                "allowed: a number of seconds > 0"
            )
        if self.layer_depth is not None and self.layer_depth < 1:
            raise NnperfError(
                f"operator_profile.layer_depth = {self.layer_depth!r} is not allowed; "
                "allowed: an integer >= 1 or null"
            )


@dataclass(frozen=True)
@schema_defaults("$defs/recipe")
class ConvergenceSettings:
    """How a configuration is trained to accuracy (config `convergence:`;
    `nnperf.training.to_accuracy`).

    A training run trains for `epochs` epochs, evaluating the test split after each one, and
    ends early once test top-1 reaches `target_accuracy` when `stop_at_target` is set (the
    rule of MLPerf Training and DAWNBench: the clock stops at the target). The learning rate
    rises linearly over `warmup_epochs` and then follows `schedule` (see
    `nnperf.training.to_accuracy.make_lr_scheduler`), stepped every iteration.

    Every field but those in `OUTSIDE_IDENTITY` decides the trajectory (the run's identity,
    see `TrainingRunRequest.definition`); those decide when the run stops, how often it is
    saved and where the weights file lies, so they may change between a run and its
    resumption.
    """

    epochs: int
    # A fraction of the test split (0.9 = 90% top-1); None: no target, train every epoch.
    target_accuracy: float | None
    stop_at_target: bool
    # Training seconds the run may spend: an epoch that would take it past them is not
    # started (status over_budget); projected from the last epoch or the timed runs' step.
    max_seconds: float | None
    # Write last.pt every this many epochs (0: only best.pt and final.pt).
    checkpoint_every: int
    optimizer: str
    lr: float
    momentum: float
    nesterov: bool
    weight_decay: float
    schedule: str
    # Fractional epochs are allowed: the warm-up is round(warmup_epochs * steps per epoch)
    # iterations (seed 000's 500 steps at 390 steps per epoch are 1.282 epochs).
    warmup_epochs: float
    label_smoothing: float
    seed: int
    augment: bool
    # A torchvision weights name of the model ("IMAGENET1K_V2", "DEFAULT"); None: random init.
    pretrained: str | None
    # The weights file; None: torch hub's cache (`torch.hub.get_dir()/checkpoints/<file>`).
    pretrained_path: str | None
    freeze_backbone: bool
    # The image size fed to the model; None: the model's own (32 for *_cifar models, 224 for
    # ImageNet ones, images resized on the device). Seeds 000 and 004 fed ImageNet ResNets
    # CIFAR's 32x32 images as they are: 32.
    input_size: int | None

    # The fields that do not change what is trained.
    OUTSIDE_IDENTITY: typing.ClassVar[tuple[str, ...]] = (
        "target_accuracy",
        "stop_at_target",
        "max_seconds",
        "checkpoint_every",
        "pretrained_path",
    )

    def __post_init__(self) -> None:
        def refuse(key: str, allowed: str) -> None:
            raise NnperfError(
                f"recipe setting {key} = {getattr(self, key)!r} is not allowed; "
                f"allowed: {allowed}"
            )

        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, float) and not math.isfinite(value):
                refuse(item.name, "a finite number")
        if self.epochs < 1:
            refuse("epochs", "an integer >= 1")
        if self.target_accuracy is not None and not 0 < self.target_accuracy <= 1:
            refuse("target_accuracy", "a fraction in (0, 1] (0.9 = 90% top-1) or null")
        if self.max_seconds is not None and self.max_seconds <= 0:
            refuse("max_seconds", "a number > 0 or null")
        if self.checkpoint_every < 0:
            refuse("checkpoint_every", "an integer >= 0 (0: best and final checkpoints only)")
        if self.optimizer not in vocab.TRAINING_OPTIMIZERS:
            refuse("optimizer", ", ".join(vocab.TRAINING_OPTIMIZERS))
        if self.lr <= 0:
            refuse("lr", "a number > 0")
        if not 0 <= self.momentum < 1:
            refuse("momentum", "a number in [0, 1)")
        if self.nesterov and (self.optimizer != "sgd" or self.momentum == 0):
            refuse("nesterov", "true only with optimizer sgd and momentum > 0")
        if self.weight_decay < 0:
            refuse("weight_decay", "a number >= 0")
        if self.schedule not in vocab.LR_SCHEDULES:
            refuse("schedule", ", ".join(vocab.LR_SCHEDULES))
        if not 0 <= self.warmup_epochs <= self.epochs:
            refuse("warmup_epochs", f"a number between 0 and epochs ({self.epochs})")
        if self.schedule == "one_cycle" and not 0 < self.warmup_epochs < self.epochs:
            refuse(
                "warmup_epochs",
                "with schedule one_cycle, a number strictly between 0 and "
                f"epochs ({self.epochs}): the rising part of the cycle",
            )
        if not 0 <= self.label_smoothing < 1:
            refuse("label_smoothing", "a number in [0, 1)")
        if self.seed < 0:
            refuse("seed", "an integer >= 0")
        if self.pretrained_path is not None and self.pretrained is None:
            refuse("pretrained_path", "null unless the recipe's pretrained names the weights")
        if self.freeze_backbone and self.pretrained is None:
            refuse("freeze_backbone", "true only with the recipe's pretrained weights")
        if self.input_size is not None and self.input_size < 16:
            refuse("input_size", "an integer >= 16 or null")


@dataclass(frozen=True)
@schema_defaults("properties/models/items/oneOf/1")
class ModelSource:
    """One mapping entry of config `models:`: a model that its name alone does not say how to
    build (`nnperf.core.model_names`). `factory` is the user's code (`"models/mynet.py:build"`,
    a file relative to the working directory, or `"package.module:build"`), called with
    `num_classes=`; `timm` a timm model name; neither: `name` resolves as a plain entry does
    (registry, torchvision, `timm_<name>`) and `input_size` overrides its own size."""

    name: str
    factory: str | None
    timm: str | None
    # The square image side the model is fed; None: the model's own (a factory's: the
    # dataset's image size).
    input_size: int | None

    def __post_init__(self) -> None:
        if self.factory is not None and self.timm is not None:
            raise NnperfError(
                f"config models entry {self.name!r} gives both factory and timm; allowed: one"
            )
        if self.input_size is not None and self.input_size < 1:
            raise NnperfError(
                f"config models entry {self.name!r}: input_size = {self.input_size!r} is not "
                "allowed; allowed: an integer >= 1 or null"
            )


@dataclass(frozen=True)
@schema_defaults("properties/convergence")
class ConvergenceSelection:
    """Which configurations of the matrix are trained to accuracy, under every recipe of
    config `recipes:` (config `convergence:`). null selects all of a key's values."""

    enabled: bool
    precisions: tuple[str, ...] | None
    batch_sizes: tuple[int, ...] | None
    variants: tuple[str, ...] | None


def _baseline_only() -> dict[str, VariantSettings]:
    return {vocab.REFERENCE_VARIANT: VariantSettings()}


def _default_recipe() -> dict[str, ConvergenceSettings]:
    return {vocab.DEFAULT_RECIPE: ConvergenceSettings()}


@dataclass(frozen=True)
@schema_defaults("")
class StudyConfig:
    """A whole study file (config/config.yaml) with every default filled in."""

    study: StudyInfo = StudyInfo()
    dataset: DatasetSettings = DatasetSettings()
    # A name, or a ModelSource for a model its name alone does not say how to build.
    models: tuple[str | ModelSource, ...]
    devices: tuple[str, ...]
    precisions: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    variants: dict[str, VariantSettings] = field(default_factory=_baseline_only)
    training: TrainingSettings = TrainingSettings()
    timing: TimingSettings = TimingSettings()
    ncu: NcuSettings = NcuSettings()
    operator_profile: OperatorProfileSettings = OperatorProfileSettings()
    convergence: ConvergenceSelection = ConvergenceSelection()
    recipes: dict[str, ConvergenceSettings] = field(default_factory=_default_recipe)
    ceilings: CeilingsSettings = CeilingsSettings()
    report: ReportSettings = ReportSettings()

    @property
    def model_names(self) -> tuple[str, ...]:
        """The names of `models`, in order: the `{model}` key of every path."""
        return tuple(entry if isinstance(entry, str) else entry.name for entry in self.models)

    def model_source(self, name: str) -> ModelSource | None:
        """The mapping entry of model `name`, or None where its name says it all."""
        for entry in self.models:
            if isinstance(entry, ModelSource) and entry.name == name:
                return entry
        return None
