"""What one timed run is, and the names its files use; importable without torch.

The run engine (`nnperf.train`, `nnperf.timing`, `nnperf.runner`) and the readers of its files
(`nnperf.aggregate`, the figures, the CLI's argument parsing) share these
names. Keeping them here, free of torch, lets the readers start in a fraction of a second.

Holds: the configuration keys, the phases of a step and the per-step CSV columns, the hyper-parameters and the run
request. (The NVTX range names of the profiled step are defined by the Nsight Compute parser,
`nnperf.ncu`, and used from there by `nnperf.profile_step`.)
"""

from __future__ import annotations

import dataclasses
from typing import Any

from nnperf.variant import VariantSettings

# The keys of one configuration, in the order results paths and tables use them.
CONFIG_KEYS = ("device", "model", "precision", "batch_size", "variant")

# Phases of one training step, in order; per-step CSV columns are `<phase>_s`.
PHASES = ("data_wait", "h2d", "forward", "backward", "optimizer")
STEP_CSV_COLUMNS = ("step", *(f"{phase}_s" for phase in PHASES), "step_time_s", "loss")

OPTIMIZERS = ("sgd", "adam")


@dataclasses.dataclass(frozen=True)
class Hyper:
    """Optimisation hyper-parameters of the timed runs (config `training:`)."""

    optimizer: str = "sgd"
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 5e-4
    seed: int = 0
    augment: bool = True


@dataclasses.dataclass(frozen=True)
class RunRequest:
    """The keys and knobs of one run (what `nnperf run` is given)."""

    model: str
    device: str
    precision: str
    batch_size: int
    variant: str = "baseline"
    settings: VariantSettings = VariantSettings()
    rep: int = 0
    dataset: str = "synthetic"
    warmup_steps: int = 5
    timed_steps: int = 20
    hyper: Hyper = Hyper()

    @property
    def seed(self) -> int:
        """The run's seed: config `training.seed` plus the rep index (schema: "each rep adds
        its index"), so reps differ in initial weights and data order as real retrainings do."""
        return self.hyper.seed + self.rep

    def keys(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "device": self.device,
            "precision": self.precision,
            "batch_size": self.batch_size,
            "variant": self.variant,
            "rep": self.rep,
            "dataset": self.dataset,
        }

    def header(self) -> dict[str, Any]:
        """Keys, variant settings and hyper-parameters: the head of every document."""
        return {
            **self.keys(),
            "variant_settings": self.settings.to_dict(),
            "warmup_steps": self.warmup_steps,
            "timed_steps": self.timed_steps,
            **dataclasses.asdict(self.hyper),
            "effective_seed": self.seed,
        }
