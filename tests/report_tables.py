"""Results folders as the pipeline writes them, for the report tests.

The report reads what the timing, roofline, ceilings and complexity stages write, where
`nnperf.layout` puts them. These builders write those files with hand-picked numbers, so the
tests can compute every number the report prints by hand: summary.csv and runs.csv (columns
as nnperf.aggregate writes them), run JSONs with an `environment` record (fields as
nnperf.envinfo records them), roofline_points.csv (nnperf.roofline.POINT_COLUMNS),
kernels.csv (nnperf.kernels.KERNEL_COLUMNS), the ceilings JSON (nnperf.ceilings) and the
complexity JSON (nnperf.complexity).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from nnperf import files, layout  # noqa: E402
from nnperf.vocab import PHASES  # noqa: E402


def inside(root: Path, kind: str, **keys) -> Path:
    """The layout's path of `kind` inside the results folder `root`."""
    return root / layout.path(kind, **keys).removeprefix("results/")


@dataclass
class Config:
    device: str
    model: str
    precision: str
    batch_size: int
    variant: str
    # Per-rep throughputs; the median/CI in summary.csv are given explicitly below.
    median: float | None
    ci: tuple[float, float] | None = None
    cv: float = 0.01
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
    reps: int = 3
    error: str | None = None

    def keys(self) -> dict:
        return {
            "device": self.device,
            "model": self.model,
            "precision": self.precision,
            "batch_size": self.batch_size,
            "variant": self.variant,
        }


def environment(device: str, device_name: str, hostname: str, **extra) -> dict:
    """An environment record with the fields nnperf.envinfo.collect_environment writes."""
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


def summary_rows(configs: list[Config]) -> pd.DataFrame:
    rows = []
    for c in configs:
        ok = c.status == "ok"
        low, high = c.ci if c.ci else (None, None)
        row = {
            **c.keys(),
            "dataset": "synthetic",
            "n_reps": c.reps,
            "n_ok": c.reps if ok else 0,
            "status": c.status,
            "throughput_img_s_median": c.median if ok else None,
            "throughput_img_s_q1": low if ok else None,
            "throughput_img_s_q3": high if ok else None,
            "throughput_img_s_iqr": (high - low) if ok and c.ci else None,
            "throughput_img_s_ci95_low": low if ok else None,
            "throughput_img_s_ci95_high": high if ok else None,
            "throughput_img_s_cv": c.cv if ok else None,
            "high_variance": bool(ok and c.cv > 0.05),
            "step_time_s_median": sum(c.phases_s.values()) if ok else None,
            "error": c.error,
        }
        for phase in PHASES:
            row[f"{phase}_s_median"] = c.phases_s[phase] if ok else None
        rows.append(row)
    frame = pd.DataFrame(rows)
    return frame


def runs_rows(configs: list[Config], hostname: str, device_name: str) -> pd.DataFrame:
    rows = []
    for c in configs:
        for rep in range(c.reps):
            ok = c.status == "ok"
            low, high = c.ci if c.ci else (c.median, c.median)
            value = [low, c.median, high][rep % 3] if ok else None
            row = {
                **c.keys(),
                "rep": rep,
                "dataset": "synthetic",
                "status": c.status,
                "error": c.error,
                "throughput_img_s": value,
                "step_time_s_median": sum(c.phases_s.values()) if ok else None,
                "hostname": hostname,
                "device_name": device_name,
            }
            for phase in PHASES:
                row[f"{phase}_s"] = c.phases_s[phase] if ok else None
            rows.append(row)
    return pd.DataFrame(rows)


def write_run_jsons(root: Path, configs: list[Config], env: dict) -> None:
    for c in configs:
        for rep in range(c.reps):
            files.write_json(
                inside(root, "run", **c.keys(), rep=rep),
                {
                    "status": c.status,
                    "error": c.error,
                    **c.keys(),
                    "rep": rep,
                    "dataset": "synthetic",
                    "variant_settings": {},
                    "throughput_img_s": c.median if c.status == "ok" else None,
                    "environment": {**env, "device": c.device},
                },
            )


def ceilings_document(
    device: str, device_name: str, *, gemm: dict, bandwidth: float, datasheet: dict | None = None
) -> dict:
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
    }


def complexity_document(model: str = "resnet18_cifar") -> dict:
    return {
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


def laptop_configs() -> list[Config]:
    m = "resnet18_cifar"
    return [
        Config("cpu", m, "fp32", 16, "baseline", 100.0, (95.0, 105.0)),
        Config("cpu", m, "fp32", 32, "baseline", 190.0, (180.0, 200.0)),
        Config("cpu", m, "fp32", 64, "baseline", 200.0, (190.0, 210.0)),
        Config("cpu", m, "bf16", 64, "baseline", 150.0, (140.0, 160.0)),
        Config("cpu", m, "fp32", 64, "tuned", 260.0, (250.0, 270.0), cv=0.08),
        Config(
            "cpu",
            m,
            "fp32",
            128,
            "baseline",
            None,
            status="oom",
            error="DefaultCPUAllocator: not enough memory",
        ),
    ]


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
        Config("cuda", m, "fp32", 64, "baseline", 1000.0, (980.0, 1020.0)),
        Config("cuda", m, "bf16", 64, "baseline", 1800.0, (1750.0, 1850.0), phases_s=input_bound),
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
    figures: list[str] = (),
) -> Path:
    """One complete results folder of one machine."""
    device, device_name, hostname = machine
    env = environment(device, device_name, hostname)
    write_run_jsons(root, configs, env)
    files.write_csv(inside(root, "table", name="summary"), summary_rows(configs))
    files.write_csv(inside(root, "table", name="runs"), runs_rows(configs, hostname, device_name))
    files.write_csv(inside(root, "table", name="roofline_points"), pd.DataFrame(points))
    if kernels is not None:
        files.write_csv(inside(root, "table", name="kernels"), kernels)
    if environment_csv:
        from nnperf import machines

        docs = [files.read_json(p) for p in sorted((root / "runs").rglob("rep*.json"))]
        files.write_csv(inside(root, "table", name="environment"), machines.environment_frame(docs))
    files.write_json(inside(root, "ceilings", device=device), ceilings)
    files.write_json(inside(root, "complexity", model="resnet18_cifar"), complexity_document())
    for name in figures:
        write_figure(root / "figures" / name, name)
    return root


def laptop_folder(root: Path, **kwargs) -> Path:
    configs = laptop_configs()
    # Ridge fp32 = 1e11 / 1e10 = 10 FLOP/B; this step has intensity 5 -> memory-bound,
    # attainable 5 x 1e10 = 5e10 FLOP/s, achieved 2.5e10 -> 50% of the roof, 25% of peak.
    points = [
        roofline_point(
            configs[2], source="analytic", level="algorithmic", flops=2.5e9, bytes_=5e8, time_s=0.1
        )
    ]
    ceilings = ceilings_document(
        "cpu", LAPTOP[1], gemm={"fp32": 1e11, "bf16": 2e11}, bandwidth=1e10
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
            ("ampere_sgemm_128x64_nn", "gemm", 10e-6, 2.1e9, 1e6),
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
    )
    return write_machine(
        root,
        GPU_BOX,
        configs,
        ceilings=ceilings,
        points=points,
        kernels=gpu_kernels(),
        figures=["breakdown/cuda/resnet18_cifar.png"],
        **kwargs,
    )
