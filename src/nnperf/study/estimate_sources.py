"""Where a plan's numbers come from: a machine's recorded costs, its rehearsal model, an
earlier study's results.

`nnperf plan` (`nnperf.study.plan`) estimates each job of a study from one of three sources,
and every estimate says which (the source labels below):

* a machine's defaults (`H100`, `CPU`): the recorded fixed costs of that machine (process
  imports, device init, the ceilings stage, an ncu profile), and assumptions where nothing
  was recorded, labelled "assumed";
* the rehearsal (`nnperf.engine.rehearsal`): the machine's model of its step timings, with
  which the plan runs each timed run through the real engine on a fake clock;
* an earlier study's results folder (`MeasuredResults`): its run documents, ncu sidecars,
  operator profiles and training summaries, where it has the configuration.

`timings_from` turns `--timings` into a `Timings`, which bundles the three. This module holds
the numbers and reads the folder; the per-stage arithmetic is `nnperf.study.plan`'s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from nnperf.core import config as study_config
from nnperf.core import contract, layout
from nnperf.core.errors import NnperfError
from nnperf.engine import rehearsal

# Source labels: where a number comes from.
ASSUMED = "assumed"
H100_RECORDED = "H100 recorded (shared/h100)"
CPU_RECORDED = "2-core CPU recorded (reports/examples)"
BUDGET_BOUND = "budget bound"


@dataclass(frozen=True)
class Cost:
    """Seconds and where they come from."""

    seconds: float
    source: str


@dataclass(frozen=True)
class Machine:
    """The fixed costs of one kind of machine: everything a job pays besides its steps."""

    name: str
    description: str
    # The device whose recorded timings these are; a study's devices default to it.
    device: str
    # Snakemake starting a `script:` job: the job's interpreter and Snakemake's preamble.
    job_start: Cost
    # A fresh job process importing torch, torchvision and nnperf.workload.models.
    imports: Cost
    # A fresh process initialising the device (0 on a CPU).
    device_init: Cost
    # Building the model in a process that has the imports.
    model_build: Cost
    # The first timed job starting the machine's warm fork server (`nnperf.engine.warmserver`).
    warm_server: Cost
    # rule prepare_dataset, per dataset name.
    prepare: dict[str, Cost]
    # rule complexity: counting one model's FLOPs and traffic, after the imports.
    complexity: Cost
    # rule ceilings is priced from its settings (`nnperf.study.ceilings_cost`) with this
    # machine's recorded ceilings stage, `recordings/ceilings_<name>.json`.
    # rule ncu_profile (wall time of the profiled process under ncu), per precision for an
    # eager variant; `ncu_compiled` for a compiled one; `ncu_other` where none was recorded.
    ncu_eager: dict[str, Cost]
    ncu_compiled: Cost | None
    ncu_other: Cost | None
    # rule ncu_export: `ncu --import ... --csv --page raw` of one report.
    ncu_export: Cost
    # A table or figure job (pandas, matplotlib), and rule render_report.
    script_job: Cost
    report_job: Cost
    # torch.profiler: how much slower a profiled step is than a timed one, and the trace
    # export and analysis after the profiled steps.
    profiler_slowdown: Cost
    profile_export: Cost
    # Reading the dataset into memory at the start of a training run.
    training_data_load: Cost
    # An evaluation step (forward only, no gradients) as a fraction of a training step.
    eval_step_fraction: Cost
    # A timed run where no step timing can be replayed (None: its budget, max_seconds).
    timed_run: Cost | None
    # Seconds per training image where no step time is known (a model nothing was recorded
    # for): the slowest recorded rate of the reference model.
    fallback_image_s: Cost
    # Cores of the machine: jobs that do not measure run this many at a time.
    cores: int
    # A `snakemake` call's own start: imports, the Snakefile, schema validation, the DAG.
    snakemake_start: Cost
    # The `onstart` preflight of a call with CUDA jobs pending (`nnperf.study.session`
    # absent_device_problem -> `nnperf.study.preflight`): torch imported into Snakemake's
    # process, CUDA initialised (torch.cuda.get_device_name), nvidia-smi, `ncu --version`,
    # NVML; and with ncu_profile jobs pending the counter probe, a fresh python importing
    # torch and running one kernel under ncu.
    preflight_torch: Cost
    # `snakemake --report` after the run (`nnperf gpu-study`'s last stage).
    report_call: Cost
    preflight_cuda_init: Cost
    preflight_tools: Cost
    ncu_probe: Cost


# An NVIDIA H100 80GB HBM3 (132 SMs) in a 16-vCPU Xeon VM, nnperf at 0df04b2, torch 2.11,
# Nsight Compute 2025.3.1: the measurements under shared/h100 (README there).
H100 = Machine(
    name="h100",
    description="an NVIDIA H100 80GB in a 16-vCPU VM",
    device="cuda",
    # Not recorded: a script job with nnperf's light imports (no torch in the job process).
    job_start=Cost(1.5, ASSUMED),
    # A fresh process spends 11-12 s on the imports (runs/process_overheads.txt: warm
    # `import torch, torchvision` 8.9 s, nnperf.workload.models' torchvision.ops -> torch._dynamo).
    imports=Cost(12.0, H100_RECORDED),
    # process_overheads.txt: CUDA init 4.7 s in a fresh process.
    device_init=Cost(4.7, H100_RECORDED),
    # Forked warm workers: model build 0.15-0.25 s.
    model_build=Cost(0.25, H100_RECORDED),
    # The warm server's parent importing torch, torchvision and nnperf.workload.models: 9.4 s.
    warm_server=Cost(9.4, H100_RECORDED),
    # Not recorded: a synthetic set is generated in memory; CIFAR is a ~170 MB download,
    # MD5-checked and unpacked.
    prepare={
        "synthetic": Cost(5.0, ASSUMED),
        "cifar10": Cost(30.0, ASSUMED),
        "cifar100": Cost(30.0, ASSUMED),
    },
    complexity=Cost(5.0, ASSUMED),
    # ncu/*.ncu.json wall_time_s, batch 256: bf16 tuned 93.4 s, fp32 baseline 98.2 s, fp32
    # tuned 111.7 s. fp16 takes bf16's (both 16-bit tensor-core paths, the same kernels),
    # tf32 fp32's (fp32 tensors, cuDNN choosing among the same algorithms); the slowest
    # eager profile stands for anything else.
    ncu_eager={
        "bf16": Cost(93.4, H100_RECORDED),
        "fp16": Cost(93.4, H100_RECORDED),
        "fp32": Cost(111.7, H100_RECORDED),
        "tf32": Cost(111.7, H100_RECORDED),
    },
    # reduce-overhead (CUDA graphs), bf16 batch 256: 160 s of ncu wall time.
    ncu_compiled=Cost(160.0, H100_RECORDED),
    ncu_other=Cost(111.7, H100_RECORDED),
    ncu_export=Cost(5.0, ASSUMED),
    script_job=Cost(4.0, ASSUMED),
    report_job=Cost(8.0, ASSUMED),
    profiler_slowdown=Cost(2.0, ASSUMED),
    profile_export=Cost(5.0, ASSUMED),
    training_data_load=Cost(3.0, ASSUMED),
    eval_step_fraction=Cost(1 / 3, ASSUMED),
    # runs/study1: fp32 baseline at batch 256, 5,174 img/s, the slowest resnet18_cifar run.
    timed_run=None,
    fallback_image_s=Cost(1 / 5174, H100_RECORDED),
    cores=16,
    # Not recorded there: the 2-core VM's (below); a 16-core host is not slower at it.
    snakemake_start=Cost(2.2, ASSUMED),
    # process_overheads.txt: warm `import torch, torchvision` 8.9 s (an upper bound for
    # torch alone), CUDA init 4.7 s.
    preflight_torch=Cost(8.9, H100_RECORDED),
    # Not recorded there: the 2-core VM's (below).
    report_call=Cost(12.0, ASSUMED),
    preflight_cuda_init=Cost(4.7, H100_RECORDED),
    # Not recorded: three short subprocesses and an NVML init.
    preflight_tools=Cost(1.5, ASSUMED),
    # The probe's python pays the imports (8.9 s) and CUDA init (4.7 s) as above; ncu's own
    # start and one kernel's replay are assumed at 3 s.
    ncu_probe=Cost(8.9 + 4.7 + 3.0, ASSUMED),
)

# A 2-vCPU AMD EPYC VM without a GPU: the default study of reports/examples/cpu-default-study
# (at 86f1d4d: 51 jobs in 8.6 min; its step timings are `rehearsal.cpu_model`), the job costs
# read off the study before it (make run at 19b83be, 9.0 min), and the import time
# nnperf.engine.warmserver records there.
CPU = Machine(
    name="cpu",
    description="a 2-core CPU VM without a GPU",
    device="cpu",
    job_start=Cost(1.5, ASSUMED),
    # nnperf.engine.warmserver: a fresh process pays 5.4 s of imports on the 2-core machine.
    imports=Cost(5.4, CPU_RECORDED),
    device_init=Cost(0.0, ASSUMED),
    model_build=Cost(0.3, ASSUMED),
    warm_server=Cost(5.4, CPU_RECORDED),
    prepare={
        "synthetic": Cost(3.0, ASSUMED),
        "cifar10": Cost(30.0, ASSUMED),
        "cifar100": Cost(30.0, ASSUMED),
    },
    complexity=Cost(5.0, ASSUMED),
    ncu_eager={},
    ncu_compiled=None,
    ncu_other=None,
    ncu_export=Cost(5.0, ASSUMED),
    # make run at 19b83be (the example): its 25 table and figure jobs took 2.0 s each from
    # start to finish, render_report 2 s, job start (1.5 s) included.
    script_job=Cost(0.5, CPU_RECORDED),
    report_job=Cost(0.5, CPU_RECORDED),
    # The example's summary: recording the profile slowed the step 1.34x.
    profiler_slowdown=Cost(1.34, CPU_RECORDED),
    # The example's 8 operator_profile jobs took 8.8 s on average: what the other parts
    # leave of that for writing and reading the trace.
    profile_export=Cost(0.5, CPU_RECORDED),
    training_data_load=Cost(1.0, ASSUMED),
    eval_step_fraction=Cost(1 / 3, ASSUMED),
    # summary.csv of the example: fp32 at batch 32, 47 img/s (bf16 ran twice as fast).
    # summary.csv of the example: its 8 timed runs took 42.4 s each on average (process start
    # to end; max_seconds 60, min_seconds 20, a 3% CI target).
    timed_run=Cost(42.4, CPU_RECORDED),
    fallback_image_s=Cost(1 / 47, CPU_RECORDED),
    cores=2,
    # `snakemake -n --cores 2` of the default study (51 jobs) on a 2-core VM of the same
    # kind: 2.2 s, measured for this plan.
    snakemake_start=Cost(2.2, CPU_RECORDED),
    # No CUDA on this machine: a CPU study's calls never run the CUDA preflight.
    preflight_torch=Cost(0.0, ASSUMED),
    # make run at 19b83be: `snakemake --report` took 5 s (9.0 minutes of jobs, 9.1 with it).
    report_call=Cost(5.0, CPU_RECORDED),
    preflight_cuda_init=Cost(0.0, ASSUMED),
    preflight_tools=Cost(0.0, ASSUMED),
    ncu_probe=Cost(0.0, ASSUMED),
)

MACHINES = {machine.name: machine for machine in (H100, CPU)}


# --- an earlier study's measurements -------------------------------------------------------


class MeasuredResults:
    """The results folder of an earlier study on the same machine, read file by file.

    `root` is the `results/` folder or the working directory holding it. Each getter returns
    None where the earlier study has no such file (the plan then falls back to the machine's
    defaults and says so).
    """

    def __init__(self, root: str | Path):
        root = Path(root)
        if (root / "results").is_dir() and not (root / "runs").is_dir():
            root = root / "results"
        if not root.is_dir():
            raise NnperfError(f"--timings {root}: no such results folder")
        self.root = root
        self.source = f"measured in {root}"

    def _read(self, kind: str, **keys: Any) -> dict | None:
        path = self.root / layout.path(kind, **keys).removeprefix("results/")
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def run_document(self, dataset: str, key: study_config.RunKey) -> dict | None:
        document = self._read("run", dataset=dataset, **key.as_dict())
        return document if document and document.get("kind") == "timed_run" else None

    def ncu_wall_s(self, dataset: str, key: study_config.RunKey) -> float | None:
        meta = self._read("profile_meta", dataset=dataset, **key.as_dict()) or {}
        return _positive(meta.get("wall_time_s"))

    def operator_profile_s(self, dataset: str, key: study_config.RunKey) -> float | None:
        return _span(self._read("opprofile", dataset=dataset, **key.as_dict()))

    def training_s(
        self,
        dataset: str,
        key: study_config.RunKey,
        recipe: str,
        settings: contract.ConvergenceSettings,
    ) -> float | None:
        """A training run's duration, when the earlier run trained under the same recipe."""
        summary = self._read("training_run", dataset=dataset, recipe=recipe, **key.as_dict())
        if not summary or summary.get("convergence") != contract.to_dict(settings):
            return None
        return _span(summary)

    def ceilings_s(self, device: str) -> float | None:
        return _positive((self._read("ceilings", device=device) or {}).get("duration_s"))


def _positive(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def _span(document: dict | None) -> float | None:
    if not document:
        return None
    start, end = document.get("started_at_unix"), document.get("ended_at_unix")
    if isinstance(start, (int, float)) and isinstance(end, (int, float)) and end > start:
        return float(end - start)
    return None


# --- timings: a machine, its rehearsal model, maybe an earlier study -----------------------


@dataclass
class Timings:
    """Where a plan's numbers come from: a machine's fixed costs, the rehearsal's model of
    its step timings (None: timed runs are bounded by their budget), and optionally an
    earlier study's measurements, which win where they have the configuration."""

    machine: Machine
    model: Any = None
    model_source: str = ASSUMED
    measured: MeasuredResults | None = None
    name: str = ""

    def __post_init__(self) -> None:
        self.name = self.name or self.machine.name


def machine_timings(machine: Machine) -> Timings:
    """A machine's defaults with its rehearsal model (`rehearsal.h100_model`,
    `rehearsal.cpu_model` where the rehearsal has one)."""
    factory = getattr(rehearsal, f"{machine.name}_model", None)
    return Timings(
        machine=machine,
        model=factory() if factory is not None else None,
        model_source=H100_RECORDED if machine is H100 else CPU_RECORDED,
    )


def timings_from(choice: str | None, devices: Iterable[str]) -> Timings:
    """`--timings`: "h100", "cpu", or an earlier study's results folder; None picks h100
    when the study's devices include cuda, else cpu. An earlier study falls back to the
    defaults of the machine kind its devices name."""
    kind = "h100" if "cuda" in set(devices) else "cpu"
    if choice is None or choice in MACHINES:
        return machine_timings(MACHINES[choice or kind])
    timings = machine_timings(MACHINES[kind])
    timings.measured = MeasuredResults(choice)
    timings.name = str(choice)
    return timings
