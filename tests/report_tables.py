"""Results folders as the pipeline writes them, for the report tests.

The report reads what the timing, roofline, ceilings and complexity stages write, where
`nnperf.core.layout` puts them. These builders write those files with hand-picked numbers, so the
tests can compute every number the report prints by hand: summary.csv (one row per
configuration), runs.csv (one row per worker process) and windows.csv (one row per timed
window) in the shapes nnperf.report.aggregate writes, one run JSON per configuration (kind
"timed_run", with its processes, windows and an `environment` record as nnperf.core.environment
records it), roofline_points.csv (nnperf.roofline.points.POINT_COLUMNS), kernels.csv
(nnperf.ncu.kernels.KERNEL_COLUMNS), the ceilings JSON (nnperf.roofline.ceilings) and the
complexity JSON (nnperf.workload.complexity), each JSON with the start and end of its job.

How a measured configuration is built (defaults: 3 processes x 4 windows of 2 s):
process k's throughput is mean + between_rsd x mean x (k - 1) (-1, 0, +1 for three), its
windows alternate -/+ within_rsd x mean around it. So the mean of the processes is `mean`,
the median of the windows is `mean`, and the CV across windows is
sqrt((8 between_rsd^2 + 12 within_rsd^2) / 11) (1% with the defaults, 8% for 8% / 4%).
The 95% CI is given explicitly. A configuration's job i (its position in the folder) runs
from start + 100 i s for 4 s + its processes (12 s each by default, 40 s in all), or 10 s when
it was not measured; the ceilings job runs from start - 50 s to start + 10 s and the
complexity job from start - 60 s to start - 55 s.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from nnperf.core import files, layout  # noqa: E402
from nnperf.core.vocab import DEFAULT_TARGET_CI, PHASES, WINDOW_CSV_COLUMNS  # noqa: E402
from nnperf.roofline import points as roofline  # noqa: E402

# Where a folder's timeline starts (2023-11-14 22:13:20 UTC) and how far apart its jobs are.
START_UNIX = 1_700_000_000.0
JOB_SPACING_S = 100.0
# Seconds of a worker process outside its windows: start-up (1.5 s) and warm-up (1.5 s);
# processes are 1 s apart; a job starts its first worker 0.5 s in and ends 4.5 s after its
# last one.
PROCESS_OVERHEAD_S = 3.0
NOT_MEASURED_JOB_S = 10.0


# The dataset of the studies these folders hold.
DATASET = "synthetic"


def inside(root: Path, kind: str, **keys) -> Path:
    """The layout's path of `kind` inside the results folder `root` (of DATASET's study
    unless `dataset` is given)."""
    if "dataset" in layout.fields(kind):
        keys = {"dataset": DATASET, **keys}
    return root / layout.path(kind, **keys).removeprefix("results/")


@dataclass
class Config:
    device: str
    model: str
    precision: str
    batch_size: int
    variant: str
    # The headline: mean of the per-process throughputs; None when not measured.
    mean: float | None
    # The 95% CI of the mean, given explicitly; None: no CI (a single window).
    ci: tuple[float, float] | None = None
    status: str = "ok"
    phases_s: dict = field(
        default_factory=lambda: {
            "data_wait": 0.01,
            "h2d": 0.0,
            "forward": 0.03,
            "backward": 0.05,
            "optimizer": 0.01,
        }
    )
    processes: int = 3
    windows_per_process: int = 4
    window_s: float = 2.0
    # Relative standard deviations of the process means and of the windows within one.
    between_rsd: float = 0.01
    within_rsd: float = 0.005
    # None: the device's default (nnperf.core.vocab.DEFAULT_TARGET_CI).
    target_ci: float | None = None
    stop_reason: str | None = None
    fixed_cost_s: float = 2.0
    process_fixed_cost_s: float = 1.5
    compile_time_s: float | None = None
    compile_time_s_later: float | None = None
    unstable_reasons: tuple[str, ...] = ()
    # The numbers the reasons are worded with (run JSON `unstable_numbers`).
    unstable_numbers: dict = field(default_factory=dict)
    # The first `flagged_windows` windows of process 0 are flagged (other processes busy).
    flagged_windows: int = 0
    single_step_time_s: float | None = None
    single_step_time_is_lower_bound: bool = False
    error: str | None = None
    # What the engine records with its stop reason (run JSON `stop_numbers`).
    stop_numbers: dict = field(default_factory=dict)

    def keys(self) -> dict:
        return {
            "device": self.device,
            "model": self.model,
            "precision": self.precision,
            "batch_size": self.batch_size,
            "variant": self.variant,
        }

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def target(self) -> float:
        return self.target_ci if self.target_ci is not None else DEFAULT_TARGET_CI[self.device]

    @property
    def half_width(self) -> float | None:
        return (self.ci[1] - self.ci[0]) / 2 / self.mean if self.ok and self.ci else None

    @property
    def target_met(self) -> bool:
        return self.half_width is not None and self.half_width <= self.target

    @property
    def stopped_on(self) -> str | None:
        if not self.ok:
            return "over_budget" if self.status == "over_budget" else None
        return self.stop_reason or ("ci_target" if self.target_met else "budget")

    def process_throughputs(self) -> list[float]:
        offsets = [k - (self.processes - 1) / 2 for k in range(self.processes)]
        return [self.mean * (1 + self.between_rsd * o) for o in offsets]

    def window_throughputs(self) -> list[list[float]]:
        """Per process, its windows' throughputs (alternating below and above its mean)."""
        signs = [(-1) ** (j + 1) for j in range(self.windows_per_process)]
        if self.windows_per_process == 1:
            signs = [0]
        return [
            [p + self.mean * self.within_rsd * sign for sign in signs]
            for p in self.process_throughputs()
        ]

    @property
    def process_span_s(self) -> float:
        return PROCESS_OVERHEAD_S + self.windows_per_process * self.window_s

    @property
    def job_s(self) -> float:
        if not self.ok:
            return NOT_MEASURED_JOB_S
        return 4.0 + self.processes * (self.process_span_s + 1.0)

    @property
    def timed_window_s(self) -> float:
        return self.processes * self.windows_per_process * self.window_s if self.ok else 0.0

    @property
    def unstable(self) -> bool:
        return bool(self.unstable_reasons)


def job_start(start_unix: float, index: int) -> float:
    return start_unix + JOB_SPACING_S * index


def environment(device: str, device_name: str, hostname: str, **extra) -> dict:
    """An environment record with the fields nnperf.core.environment.collect_environment writes."""
    record = {
        "device": device,
        "device_name": device_name,
        "driver": "580.95" if device == "cuda" else None,
        "cuda": "13.0",
        "cudnn": 91300,
        "torch": "2.14.1",
        "torchvision": "0.29.1",
        "numpy": "2.3.0",
        "python": "3.11.2",
        "nnperf": "0.1.0",
        "platform": "Linux-6.1-x86_64",
        "cpu_model": "AMD EPYC 7B13",
        "cpu_count_logical": 2,
        "cpu_affinity_count": 2,
        "cpu_threads": 2,
        "cpu_interop_threads": 2,
        "clocks": {
            "cpu_mhz": {"mean": 2450.0, "min": 2450.0, "max": 2450.0},
            "cpufreq": None,
            "gpu_sm_mhz": "1980" if device == "cuda" else None,
            "gpu_mem_mhz": None,
            "gpu_max_sm_mhz": "1980" if device == "cuda" else None,
            "gpu_max_mem_mhz": None,
            "gpu_applications_sm_mhz": None,
        },
        "tf32": False,
        "cudnn_benchmark": False,
        "memory_format": "contiguous",
        "amp_dtype": None,
        "grad_scaler": False,
        "compile_mode": None,
        "optimizer_impl": "default",
        "optimizer_impl_resolved": "foreach",
        "data_path": "dataloader",
        "gpu": (
            {
                "name": device_name,
                "uuid": "GPU-1234",
                "capability": "9.0",
                "multiprocessors": 132,
                "total_memory_bytes": 85_000_000_000,
                "cuda_visible_devices": None,
                "nvidia_smi": None,
            }
            if device == "cuda"
            else None
        ),
        "hostname": hostname,
        "slurm": None,
        "git_commit": "abc123",
        "git_dirty": False,
    }
    record.update(extra)
    return record


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    series = pd.Series(values)
    return float(series.quantile(0.25)), float(series.median()), float(series.quantile(0.75))


def _dominant(c: Config) -> str:
    return "process" if c.between_rsd > c.within_rsd else "window"


def summary_rows(
    configs: list[Config], cv_threshold: float = 0.05, start_unix: float = START_UNIX
) -> pd.DataFrame:
    """summary.csv: one row per configuration, columns as nnperf.report.aggregate writes them."""
    rows = []
    for index, c in enumerate(configs):
        job = job_start(start_unix, index)
        ok = c.ok
        windows = [w for process in c.window_throughputs() for w in process] if ok else []
        q1, median, q3 = _quartiles(windows) if ok else (None, None, None)
        cv = statistics.stdev(windows) / statistics.mean(windows) if len(windows) > 1 else None
        low, high = c.ci if ok and c.ci else (None, None)
        row = {
            **c.keys(),
            "dataset": "synthetic",
            "status": c.status,
            "stop_reason": c.stopped_on,
            **{f"stop_{name}": value for name, value in c.stop_numbers.items()},
            "over_budget_phase": "steady" if c.status == "over_budget" else None,
            "error": c.error,
            "n_processes": c.processes if ok else 1,
            "n_windows": c.processes * c.windows_per_process if ok else 0,
            "throughput_img_s_mean": c.mean if ok else None,
            "throughput_img_s_ci95_low": low,
            "throughput_img_s_ci95_high": high,
            "ci_half_width_rel": c.half_width,
            "ci_target": c.target,
            "ci_target_met": c.target_met if ok else None,
            "ci_method": ("processes" if c.processes > 1 else "windows") if ok and c.ci else None,
            "throughput_img_s_median": median,
            "throughput_img_s_q1": q1,
            "throughput_img_s_q3": q3,
            "throughput_img_s_iqr": q3 - q1 if ok else None,
            "throughput_img_s_cv": cv,
            "high_variance": bool(cv is not None and cv > cv_threshold),
            "variance_between_processes": (c.between_rsd * c.mean) ** 2 if ok else None,
            "variance_within_process": (c.within_rsd * c.mean) ** 2 if ok else None,
            "dominant_level": _dominant(c) if ok else None,
            "optimal_windows_per_process": 2 if ok else None,
            "step_time_s_median": sum(c.phases_s.values()) if ok else None,
            "sm_clock_hz_median": 1.98e9 if ok and c.device == "cuda" else None,
        }
        for phase in PHASES:
            row[f"{phase}_s_median"] = c.phases_s[phase] if ok else None
        row.update(
            {
                "single_step_time_s": (sum(c.phases_s.values()) if ok else c.single_step_time_s),
                "single_step_time_is_lower_bound": c.single_step_time_is_lower_bound,
                "compile_time_s": c.compile_time_s if ok else None,
                "compile_time_s_later": c.compile_time_s_later if ok else None,
                "first_step_time_s": 0.5 if ok else None,
                "warmup_time_s": 1.5 if ok else None,
                "fixed_cost_s": c.fixed_cost_s if ok else None,
                "process_fixed_cost_s": c.process_fixed_cost_s if ok else None,
                "images_timed": sum(round(w * c.window_s) for w in windows) if ok else None,
                "timed_window_s": c.timed_window_s if ok else None,
                "elapsed_s": c.job_s - 5.0 if ok else None,
                "duty_cycle": c.timed_window_s / c.job_s if ok else None,
                "unstable": c.unstable,
                "unstable_reasons": "|".join(c.unstable_reasons),
                **{f"unstable_{k}": v for k, v in c.unstable_numbers.items()},
                "peak_memory_device_bytes_max": (
                    2_000_000_000 if ok and c.device == "cuda" else None
                ),
                "peak_memory_host_bytes_max": 1_000_000_000 if ok else None,
                "process_started_at_unix": job,
                "started_at_unix": job + 0.5,
                "ended_at_unix": job + c.job_s,
                "overlap": False,
            }
        )
        rows.append(row)
    return pd.DataFrame(rows)


def _process_times(c: Config, job_started: float, process: int) -> tuple[float, float]:
    started = job_started + 0.5 + process * (c.process_span_s + 1.0)
    return started, started + c.process_span_s


def runs_rows(
    configs: list[Config], hostname: str, device_name: str, start_unix: float = START_UNIX
) -> pd.DataFrame:
    """runs.csv: one row per worker process; a configuration that was not measured has one
    row (process 0, numbers empty) so it appears."""
    rows = []
    for index, c in enumerate(configs):
        job = job_start(start_unix, index)
        throughputs = c.process_throughputs() if c.ok else [None]
        for process, value in enumerate(throughputs):
            started, ended = _process_times(c, job, process)
            rows.append(
                {
                    **c.keys(),
                    "process": process,
                    "dataset": "synthetic",
                    "status": c.status,
                    "error": c.error,
                    "throughput_img_s": value,
                    "n_windows": c.windows_per_process if c.ok else 0,
                    "compile_time_s": (
                        (c.compile_time_s if process == 0 else c.compile_time_s_later)
                        if c.ok
                        else None
                    ),
                    "first_step_time_s": 0.5 if c.ok else None,
                    "warmup_time_s": 1.5 if c.ok else None,
                    "fixed_cost_s": c.process_fixed_cost_s if c.ok else None,
                    "peak_memory_device_bytes": 2_000_000_000 if c.device == "cuda" else None,
                    "peak_memory_host_bytes": 1_000_000_000,
                    "started_at_unix": started,
                    "ended_at_unix": ended if c.ok else job + c.job_s - 0.5,
                    "device_name": device_name,
                    "hostname": hostname,
                    "torch": "2.14.1",
                    "cuda": "13.0",
                    "source": "runs/x.json",
                    "overlapping_processes": "",
                }
            )
    return pd.DataFrame(rows)


FLAG_REASON = "host_overloaded"


def window_records(c: Config, job_started: float) -> list[dict]:
    """Every timed window of `c` (nnperf.core.vocab.WINDOW_CSV_COLUMNS)."""
    if not c.ok:
        return []
    records = []
    for process, windows in enumerate(c.window_throughputs()):
        process_started, _ = _process_times(c, job_started, process)
        for window, throughput in enumerate(windows):
            started = process_started + PROCESS_OVERHEAD_S + window * c.window_s
            flagged = process == 0 and window < c.flagged_windows
            record = {
                "process": process,
                "window": window,
                "steps": 10,
                "images": round(throughput * c.window_s),
                "window_s": c.window_s,
                "throughput_img_s": throughput,
                "started_at_unix": started,
                "ended_at_unix": started + c.window_s,
                "loss_end": 2.0,
                "peak_memory_device_bytes": 2_000_000_000 if c.device == "cuda" else None,
                "sm_clock_mhz": 1980 if c.device == "cuda" else None,
                "memory_clock_mhz": 2619 if c.device == "cuda" else None,
                "throttle_reasons": "" if c.device == "cuda" else None,
                "power_capped": False if c.device == "cuda" else None,
                "load_1m": 0.5,
                "other_cores": 1.3 if flagged else 0.1,
                "steal_share": 0.0,
                "runnable_threads": 2,
                "own_threads": 2,
                "cores": 2,
                "flagged": flagged,
                "flag_reasons": FLAG_REASON if flagged else "",
                # Flagged, but from finished estimates that kept it.
                "discarded": False,
                "discard_reasons": "",
            }
            assert tuple(record) == WINDOW_CSV_COLUMNS
            records.append(record)
    return records


def windows_rows(configs: list[Config], start_unix: float = START_UNIX) -> pd.DataFrame:
    """windows.csv: one row per timed window, the configuration's keys first."""
    rows = [
        {**c.keys(), **record, "dataset": "synthetic"}
        for index, c in enumerate(configs)
        for record in window_records(c, job_start(start_unix, index))
    ]
    return pd.DataFrame(rows)


def run_document(c: Config, env: dict, job_started: float) -> dict:
    """The run JSON of one configuration (kind "timed_run")."""
    summary = summary_rows([c]).iloc[0].to_dict()
    windows = window_records(c, job_started)
    ok = c.ok

    def number(name):
        value = summary[name]
        return None if value is None or (isinstance(value, float) and math.isnan(value)) else value

    processes = []
    throughputs = c.process_throughputs() if ok else [None]
    for process, value in enumerate(throughputs):
        started, ended = _process_times(c, job_started, process)
        processes.append(
            {
                "process": process,
                "seed": process,
                "pid": 1000 + process,
                "status": c.status,
                "started_at_unix": started,
                "ended_at_unix": ended,
                "fixed_cost_s": c.process_fixed_cost_s,
                "warmup_step_time_s": [0.5, 0.1, 0.1],
                "first_step_time_s": 0.5,
                "warmup_time_s": 0.7,
                "compile_time_s": c.compile_time_s if process == 0 else c.compile_time_s_later,
                "n_windows": c.windows_per_process if ok else 0,
                "throughput_img_s": value,
                "peak_memory_device_bytes": 2_000_000_000 if c.device == "cuda" else None,
                "peak_memory_host_bytes": 1_000_000_000,
            }
        )
    return {
        "kind": "timed_run",
        "status": c.status,
        "error": c.error,
        "stop_reason": c.stopped_on,
        "stop_numbers": c.stop_numbers,
        "over_budget_phase": "steady" if c.status == "over_budget" else None,
        **c.keys(),
        "dataset": "synthetic",
        "variant_settings": {},
        "warmup_steps": 3,
        "timed_steps": 10,
        "timing": {
            "target_ci": c.target,
            "min_seconds": 5.0,
            "max_seconds": 60.0,
            "min_processes": 2,
            "max_processes": 10,
            "min_windows": 2,
            "max_windows": 10,
        },
        "throughput_img_s": c.mean if ok else None,
        "throughput_img_s_ci95_low": number("throughput_img_s_ci95_low"),
        "throughput_img_s_ci95_high": number("throughput_img_s_ci95_high"),
        "ci_half_width_rel": c.half_width,
        "ci_method": summary["ci_method"],
        "ci_target_met": c.target_met,
        "throughput_img_s_median": number("throughput_img_s_median"),
        "throughput_img_s_q1": number("throughput_img_s_q1"),
        "throughput_img_s_q3": number("throughput_img_s_q3"),
        "throughput_img_s_cv": number("throughput_img_s_cv"),
        "variance": {
            "between_processes": number("variance_between_processes"),
            "within_process": number("variance_within_process"),
            "dominant_level": summary["dominant_level"],
            "optimal_windows_per_process": 2 if ok else None,
        },
        "n_processes": int(summary["n_processes"]),
        "n_windows": int(summary["n_windows"]),
        "images_timed": sum(w["images"] for w in windows),
        "timed_window_s": c.timed_window_s,
        "single_step_time_s": number("single_step_time_s"),
        "single_step_time_is_lower_bound": c.single_step_time_is_lower_bound,
        "compile_time_s": c.compile_time_s,
        "compile_time_s_later": c.compile_time_s_later,
        "fixed_cost_s": c.fixed_cost_s if ok else None,
        "process_fixed_cost_s": c.process_fixed_cost_s if ok else None,
        "elapsed_s": number("elapsed_s"),
        "duty_cycle": number("duty_cycle"),
        "unstable": c.unstable,
        "unstable_reasons": list(c.unstable_reasons),
        "unstable_numbers": dict(c.unstable_numbers),
        "processes": processes,
        "windows": windows,
        "environment": {**env, "device": c.device},
        "process_started_at_unix": job_started,
        "started_at_unix": job_started + 0.5,
        "ended_at_unix": job_started + c.job_s,
    }


def write_run_jsons(
    root: Path, configs: list[Config], env: dict, start_unix: float = START_UNIX
) -> None:
    for index, c in enumerate(configs):
        files.write_json(
            inside(root, "run", **c.keys()), run_document(c, env, job_start(start_unix, index))
        )


def ceilings_document(
    device: str,
    device_name: str,
    *,
    gemm: dict,
    bandwidth: float,
    datasheet: dict | None = None,
    start_unix: float = START_UNIX,
) -> dict:
    """The ceilings JSON; its job runs from start - 50 s to start + 10 s."""
    return {
        "device": device,
        "device_name": device_name,
        "threads": 2,
        "measured": {
            "gemm_flop_s": gemm,
            "memory_bandwidth_bytes_s": bandwidth,
            "sweep": [{"working_set_bytes": 16384, "bandwidth_bytes_s": 4 * bandwidth}],
        },
        "datasheet": datasheet,
        "ratio_measured_to_datasheet": {},
        "note": "",
        "started_at_unix": start_unix - 50.0,
        "ended_at_unix": start_unix + 10.0,
    }


def complexity_document(
    model: str = "resnet18_cifar", start_unix: float | None = START_UNIX
) -> dict:
    """The complexity JSON; its job runs from start - 60 s to start - 55 s (no timestamps
    when `start_unix` is None, as complexity JSONs written before they recorded them)."""
    times = (
        {"started_at_unix": start_unix - 60.0, "ended_at_unix": start_unix - 55.0}
        if start_unix is not None
        else {}
    )
    return {
        **times,
        "model": model,
        "dataset": "synthetic",
        "num_classes": 10,
        "input_shape": [3, 32, 32],
        "params": 11_173_962,
        "trainable_params": 11_173_962,
        "forward_flops_per_image": 1.114e9,
        "train_step_flops_per_image": 3.342e9,
        "backward_flops_per_image": 2.228e9,
        "saved_activation_bytes_per_image": 9_830_400,
        "weight_bytes": 44_695_848,
        "gradient_bytes": 44_695_848,
        "optimizer_state_bytes": 44_695_848,
        "traffic": {
            p: {"fixed_bytes": 178_783_392, "per_image_bytes": 39_321_600}
            for p in ("fp32", "tf32", "fp16", "bf16")
        },
    }


def roofline_point(
    c: Config,
    *,
    source: str,
    level: str,
    flops: float,
    bytes_: float,
    time_s: float,
    granularity: str = "step",
    kernel_name: str = "",
    kind: str = "step",
) -> dict:
    return {
        **c.keys(),
        "source": source,
        "granularity": granularity,
        "kernel_name": kernel_name,
        "kind": kind,
        "memory_level": level,
        "flops": flops,
        "bytes": bytes_,
        "time_s": time_s,
        "arithmetic_intensity_flop_per_byte": flops / bytes_,
        "performance_flop_s": flops / time_s,
    }


def write_figure(path: Path, title: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure, axis = plt.subplots(figsize=(3, 2))
    axis.plot([1, 2, 3], [1, 4, 9])
    axis.set_title(title)
    figure.savefig(path, dpi=60)
    plt.close(figure)
    return path


# ------------------------------------------------------------------------------------------
# Two machines: a CPU laptop and a GPU box, each a complete results folder.
# ------------------------------------------------------------------------------------------
LAPTOP = ("cpu", "Intel(R) Core(TM) i7-1185G7", "laptop")
GPU_BOX = ("cuda", "NVIDIA H100 80GB HBM3", "gpu01")


# The laptop's study measured to timing.target_ci 0.06: the CIs below are 5.0%, 5.3%, 5.0%,
# 6.7% (bf16: missed, the budget ran out) and 3.8% of their means.
LAPTOP_TARGET_CI = 0.06
UNSTABLE_REASON = "host_overloaded"
UNSTABLE_NUMBERS = {"windows": 12, "host_overloaded_windows": 2, "other_cores": 1.3, "cores": 2}
UNSTABLE_WORDS = "2 of 12 windows: host overloaded: other processes used 1.3 of 2 cores"
# Job starts: the GPU box ran its study a day after the laptop.
LAPTOP_START_UNIX = START_UNIX
GPU_START_UNIX = START_UNIX + 86_400.0


def laptop_configs() -> list[Config]:
    m = "resnet18_cifar"
    target = {"target_ci": LAPTOP_TARGET_CI}
    return [
        Config("cpu", m, "fp32", 16, "baseline", 100.0, (95.0, 105.0), **target),
        Config("cpu", m, "fp32", 32, "baseline", 190.0, (180.0, 200.0), **target),
        Config("cpu", m, "fp32", 64, "baseline", 200.0, (190.0, 210.0), **target),
        Config("cpu", m, "bf16", 64, "baseline", 150.0, (140.0, 160.0), **target),
        # Compiled; disturbed by other processes in two windows; CV 8% (between 8%, within 4%).
        Config(
            "cpu",
            m,
            "fp32",
            64,
            "tuned",
            260.0,
            (250.0, 270.0),
            between_rsd=0.08,
            within_rsd=0.04,
            compile_time_s=20.0,
            compile_time_s_later=2.0,
            unstable_reasons=(UNSTABLE_REASON,),
            unstable_numbers=UNSTABLE_NUMBERS,
            flagged_windows=2,
            **target,
        ),
        Config(
            "cpu",
            m,
            "fp32",
            128,
            "baseline",
            None,
            status="oom",
            error="DefaultCPUAllocator: not enough memory",
            **target,
        ),
    ]


def over_budget_config() -> Config:
    """A configuration whose one step (at least 13.2 s: the worker was stopped mid-step) is
    too slow to measure within timing.max_seconds."""
    return Config(
        "cpu",
        "resnet18_cifar",
        "bf16",
        256,
        "baseline",
        None,
        status="over_budget",
        target_ci=LAPTOP_TARGET_CI,
        single_step_time_s=13.2,
        single_step_time_is_lower_bound=True,
        stop_numbers={
            "step_s": 13.2,
            "step_lower_bound": True,
            "steps_left": 19,
            "min_windows": 2,
            "timed_steps": 8,
            "needed_s": 250.8,
            "left_s": 55.0,
            "budget_s": 60.0,
        },
    )


def gpu_configs() -> list[Config]:
    m = "resnet18_cifar"
    input_bound = {
        "data_wait": 0.004,
        "h2d": 0.0,
        "forward": 0.002,
        "backward": 0.003,
        "optimizer": 0.001,
    }
    return [
        # CIs of 0.5% and 0.83%: both within the GPU default target of 1%.
        Config("cuda", m, "fp32", 64, "baseline", 1000.0, (995.0, 1005.0)),
        Config("cuda", m, "bf16", 64, "baseline", 1800.0, (1785.0, 1815.0), phases_s=input_bound),
    ]


def write_machine(
    root: Path,
    machine: tuple[str, str, str],
    configs: list[Config],
    *,
    ceilings: dict,
    points: list[dict],
    kernels: pd.DataFrame | None = None,
    environment_csv: bool = True,
    windows_csv: bool = True,
    figures: list[str] = (),
    start_unix: float = START_UNIX,
) -> Path:
    """One complete results folder of one machine (without windows.csv, as folders written
    before it existed, when `windows_csv` is False)."""
    device, device_name, hostname = machine
    env = environment(device, device_name, hostname)
    write_run_jsons(root, configs, env, start_unix)
    files.write_csv(
        inside(root, "table", name="summary"), summary_rows(configs, start_unix=start_unix)
    )
    files.write_csv(
        inside(root, "table", name="runs"), runs_rows(configs, hostname, device_name, start_unix)
    )
    if windows_csv:
        files.write_csv(inside(root, "table", name="windows"), windows_rows(configs, start_unix))
    files.write_csv(inside(root, "table", name="roofline_points"), pd.DataFrame(points))
    if kernels is not None:
        files.write_csv(inside(root, "table", name="kernels"), kernels)
    if environment_csv:
        from nnperf.report import machines

        docs = [files.read_json(p) for p in sorted((root / "runs").rglob("*.json"))]
        files.write_csv(inside(root, "table", name="environment"), machines.environment_frame(docs))
    if environment_csv:
        compare_with(root)
    files.write_json(inside(root, "ceilings", device=device), ceilings)
    files.write_json(
        inside(root, "complexity", model="resnet18_cifar"),
        complexity_document(start_unix=start_unix),
    )
    for name in figures:
        write_figure(root / "figures" / name, name)
    return root


def compare_with(root: Path, *extra: Path) -> Path:
    """`root`'s comparisons.csv as rule comparisons_table writes it with `extra` as
    report.extra_results (none: this folder alone, no machine rows)."""
    from nnperf.report import results

    results.write_comparisons(
        results.local_files(results_dir=root), extra, inside(root, "table", name="comparisons")
    )
    return root


def laptop_folder(root: Path, extra: list[Config] = (), **kwargs) -> Path:
    """The laptop's folder; `extra` configurations (say `over_budget_config()`) run last."""
    configs = laptop_configs() + list(extra)
    # Ridge fp32 = 1e11 / 1e10 = 10 FLOP/B; this step has intensity 5 -> memory-bound,
    # attainable 5 x 1e10 = 5e10 FLOP/s, achieved 2.5e10 -> 50% of the roof, 25% of peak.
    points = [
        roofline_point(
            configs[2], source="analytic", level="algorithmic", flops=2.5e9, bytes_=5e8, time_s=0.1
        )
    ]
    ceilings = ceilings_document(
        "cpu",
        LAPTOP[1],
        gemm={"fp32": 1e11, "bf16": 2e11},
        bandwidth=1e10,
        start_unix=LAPTOP_START_UNIX,
    )
    return write_machine(
        root,
        LAPTOP,
        configs,
        ceilings=ceilings,
        points=points,
        figures=[
            "throughput/cpu/resnet18_cifar/fp32.png",
            "roofline/cpu/resnet18_cifar/fp32/bs64/baseline.png",
        ],
        start_unix=LAPTOP_START_UNIX,
        **kwargs,
    )


def gpu_kernels() -> pd.DataFrame:
    c = gpu_configs()[1]
    rows = []
    for i, (name, kind, duration, flops, dram) in enumerate(
        [
            ("sm90_xmma_gemm_bf16bf16_bf16f32", "conv forward", 300e-6, 3e10, 1e8),
            ("sm90_xmma_gemm_bf16bf16_bf16f32", "conv forward", 200e-6, 2e10, 1e8),
            ("cudnn::bn_fw_tr_1C11_kernel_NCHW", "batch-norm", 100e-6, 1e8, 2e8),
            (
                "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
                "elementwise",
                50e-6,
                0.0,
                1e7,
            ),
            # The calibration GEMM: 2 x 4096^3 FLOPs at 90% of the 5e14 roof.
            ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "gemm", 305.4e-6, 2 * 4096**3, 1e6),
        ]
    ):
        rows.append(
            {
                **c.keys(),
                "kernel_index": i,
                "kernel_name": name,
                "kind": kind,
                "phase": "calibration" if i == 4 else "forward",
                "duration_s": duration,
                "flops_fp64": 0.0,
                "flops_fp32": 0.0,
                "flops_fp16": 0.0,
                "flops_tensor": flops,
                "flops_total": flops,
                "bytes_dram": dram,
                "bytes_l2": 2 * dram,
                "bytes_l1": 4 * dram,
                "clock_hz": 1.98e9,
                "peak_flop_s_fp32": 6.7e13,
                "peak_flop_s_tensor": 5e14,
                "peak_bytes_s_dram": 3e12,
                "peak_bytes_s_l2": 1e13,
                "peak_bytes_s_l1": 3e13,
                "arch": "hopper",
                "clock_control": "base",
            }
        )
    return pd.DataFrame(rows)


def gpu_folder(root: Path, **kwargs) -> Path:
    configs = gpu_configs()
    bf16 = configs[1]
    # Profile roofs: tensor peak 5e14, DRAM 3e12, L2 1e13, L1 3e13 B/s. Intensities 100, 20
    # and 5 FLOP/B give memory roofs 3e14, 2e14 and 1.5e14: L1 is the lowest (below the
    # peak), so the step is memory-bound at L1; 1e14 FLOP/s achieved = 66.7% of that roof.
    points = [
        roofline_point(bf16, source="ncu", level=level, flops=1e11, bytes_=1e11 / ai, time_s=1e-3)
        for level, ai in (("dram", 100.0), ("l2", 20.0), ("l1", 5.0))
    ]
    ceilings = ceilings_document(
        "cuda",
        GPU_BOX[1],
        gemm={"fp32": 5e13, "tf32": 3e14, "fp16": 6e14, "bf16": 6e14},
        bandwidth=2.5e12,
        datasheet={
            "key": "h100_sxm",
            "name": "NVIDIA H100 SXM5 80GB",
            "flop_s": {"fp32": 6.7e13, "tf32": 4.945e14, "fp16": 9.895e14, "bf16": 9.895e14},
            "memory_bandwidth_bytes_s": 3.35e12,
            "source": "datasheet",
        },
        start_unix=GPU_START_UNIX,
    )
    folder = write_machine(
        root,
        GPU_BOX,
        configs,
        ceilings=ceilings,
        points=points,
        kernels=gpu_kernels(),
        figures=["breakdown/cuda/resnet18_cifar.png"],
        start_unix=GPU_START_UNIX,
        **kwargs,
    )
    # 650 us of kernels at 1.98 GHz in a 10 ms step: the GPU is busy 6.5% (input-bound).
    profiles = roofline.profiles_table(
        gpu_kernels(),
        pd.DataFrame(points),
        summary_rows(configs, start_unix=GPU_START_UNIX),
    )
    files.write_csv(inside(root, "table", name="profiles"), profiles)
    return folder


# /proc/cpuinfo of a 2-core VM without bf16 arithmetic (AVX2, no AVX512_BF16, AMX or
# AVX-NE-CONVERT): its derived bf16 peak is null.
CPUINFO_NO_BF16 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model name\t: AMD EPYC
cpu MHz\t\t: 2450.000
physical id\t: 0
core id\t\t: 0
flags\t\t: fpu sse sse2 avx fma avx2 sha_ni vaes
"""
