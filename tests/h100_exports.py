"""The real H100 Nsight Compute exports in tests/data/ncu/h100 and what is known about them.

Each export is one profiled `resnet18_cifar` training step at batch 256 plus the calibration
GEMM (see tests/data/ncu/h100/README.md). The sidecars beside them predate the configuration
keys, so the keys are given here; the timed step times and clocks are those of the same
machine's timed runs (shared/h100/runs/sweep: 30 warm-up + 200 timed steps at 1.98 GHz).
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from nnperf.ncu import kernels
from nnperf.ncu import metrics as ncu
from nnperf.ncu import raw_csv

H100_DIR = Path(__file__).parent / "data" / "ncu" / "h100"
H100_RUN_CLOCK_HZ = 1.98e9  # NVML SM clock of every timed run on that machine


@dataclass(frozen=True)
class Export:
    name: str
    precision: str
    variant: str
    step_kernels: int  # kernels in the step (the calibration GEMM excluded)
    kernels_per_phase: dict
    # The timed runs' median step time of the same configuration (shared/h100/runs/sweep), or
    # None where none was timed.
    timed_step_s: float | None = None

    @property
    def path(self) -> Path:
        return H100_DIR / f"resnet18_cifar_{self.name}.csv.gz"

    @property
    def config(self) -> dict:
        return {
            "device": "cuda",
            "model": "resnet18_cifar",
            "precision": self.precision,
            "batch_size": 256,
            "variant": self.variant,
        }

    def text(self) -> str:
        return gzip.decompress(self.path.read_bytes()).decode("utf-8")

    def kernels(self) -> pd.DataFrame:
        raw = raw_csv.read_raw_csv(self.path, required=ncu.metric_set("hopper").metrics())
        return kernels.kernels_table(raw, self.config, clock_control="base")


EXPORTS = {
    e.name: e
    for e in (
        Export(
            "fp32_bs256_baseline",
            "fp32",
            "baseline",
            330,
            {"forward": 127, "backward": 198, "optimizer": 5, "calibration": 1},
        ),
        Export(
            "fp32_bs256_tuned",
            "fp32",
            "tuned",
            389,
            {"forward": 139, "backward": 248, "optimizer": 2, "calibration": 1},
        ),
        Export(
            "bf16_bs256_tuned",
            "bf16",
            "tuned",
            344,
            {"forward": 173, "backward": 169, "optimizer": 2, "calibration": 1},
            timed_step_s=0.010379,  # sweep/eager_bf16_bs256.json: 10.4 ms, 24,112 img/s
        ),
        Export(
            "bf16_bs256_cudagraphs",
            "bf16",
            "cudagraphs",
            299,
            {"forward": 135, "backward": 162, "optimizer": 2, "calibration": 1},
            timed_step_s=0.004080,  # sweep/cudagraphs_bf16_bs256.json: 4.1 ms, 62,603 img/s
        ),
    )
}
