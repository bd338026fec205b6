"""Nsight Compute: which metrics to collect, what they mean per kernel, and how to run `ncu`.

This module knows three things about Nsight Compute (`ncu`):

* **What to collect** for a hierarchical roofline on each GPU architecture (`METRIC_SETS`):
  kernel time, CUDA-core FLOPs per dtype, Tensor-Core FLOPs, bytes at DRAM/L2/L1, and the
  `peak_sustained` values and clocks that turn into ceilings.
* **What the counters mean** per kernel (`kernel_quantities`): FLOPs per dtype, bytes per
  level, clocks and the roofs at those clocks.
* **How to run it**: whether a study gets ncu rules at all (`ncu_included`), the profile
  command line (NVTX-filtered to one training step plus the calibration GEMM, see
  `nnperf.ncu.ranges`; explicit clock control; the `.ncu-rep` kept) and the export command
  (`ncu --import X.ncu-rep --csv --page raw`).

Reading the export is `nnperf.ncu.raw_csv`; classifying kernels `nnperf.ncu.kernels`; roofline
points `nnperf.roofline.points`. Nothing here needs a GPU or `ncu`; running the commands is
`nnperf.ncu.command`'s job.

Sources (read for the formats; nothing copied):
* Nsight Compute CLI manual (docs.nvidia.com/nsight-compute/NsightComputeCli): options
  `--metrics`, `--nvtx`, `--nvtx-include`, `--clock-control {base,none}`,
  `--replay-mode {kernel,application,...}`, `--cache-control`, `--target-processes all`,
  `-o/--export`, `-f/--force-overwrite`, `--query-metrics`; sections "NVTX Filtering" and
  "Metrics and Units".
* The section files Nsight Compute ships (`sections/SpeedOfLight_Hierarchical*RooflineChart
  .section`), which define per-chip which `sm__ops_path_tensor_*` counters exist and how the
  half-precision roofline weights packed instructions.
* NERSC "Roofline on NVIDIA GPUs" (gitlab.com/NERSC/roofline-on-nvidia-gpus) and C. Yang,
  T. Kurth, S. Williams, "Hierarchical Roofline analysis for GPUs: Accelerating performance
  optimization for the NERSC-9 Perlmutter system", CCPE 2020: the metric recipe (FLOPs =
  add + mul + 2*fma per dtype, Volta Tensor-Core FLOPs = 512 x `sm__inst_executed_pipe_tensor
  .sum`, bytes = `dram__bytes.sum`, `lts__t_bytes.sum`, `l1tex__t_bytes.sum`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Mapping, Sequence

import pandas as pd

from nnperf.core.errors import NnperfError
from nnperf.core.vocab import CLOCK_CONTROLS
from nnperf.ncu.ranges import nvtx_include_filters

# --------------------------------------------------------------------------------------------
# Metric sets per architecture.
# --------------------------------------------------------------------------------------------
TIME_METRIC = "gpu__time_duration.sum"

# CUDA-core instruction counters, per dtype: (add, mul, fma) thread-level instructions
# executed with the predicate on (NERSC recipe).
CUDA_CORE_METRICS = {
    "fp64": tuple(
        f"sm__sass_thread_inst_executed_op_d{op}_pred_on.sum" for op in ("add", "mul", "fma")
    ),
    "fp32": tuple(
        f"sm__sass_thread_inst_executed_op_f{op}_pred_on.sum" for op in ("add", "mul", "fma")
    ),
    "fp16": tuple(
        f"sm__sass_thread_inst_executed_op_h{op}_pred_on.sum" for op in ("add", "mul", "fma")
    ),
}

# FLOPs per (add, mul, fma) instruction. fp64/fp32: 1, 1, 2 (NERSC). fp16: 2, 2, 4, because the
# half-precision SASS instructions PyTorch kernels use are the packed HADD2/HMUL2/HFMA2 forms
# (two halves per instruction); Nsight Compute's own HierarchicalHalfRooflineChart section
# defines `derived__..._hadd_pred_on_x2`, `..._hmul_pred_on_x2` and `..._hfma_pred_on_x4` for the
# same reason. Caveat: a scalar (unpacked) HADD/HMUL/HFMA would be over-counted 2x; the NERSC
# material weights them 1/1/2 and so under-counts packed code 2x. Neither can be told apart from
# these counters; the calibration GEMM does not exercise them (it runs on tensor cores).
FLOPS_PER_INSTRUCTION = {
    "fp64": (1, 1, 2),
    "fp32": (1, 1, 2),
    "fp16": (2, 2, 4),
}

BYTES_METRICS = {
    "dram": "dram__bytes.sum",
    "l2": "lts__t_bytes.sum",
    "l1": "l1tex__t_bytes.sum",
}

# Clock of each unit (cycles per second over the kernel): the ceilings are per-cycle peaks times
# these, i.e. the peak at the clock the profile actually ran at (see --clock-control).
CLOCK_METRICS = {
    "sm": "sm__cycles_elapsed.avg.per_second",
    "dram": "dram__cycles_elapsed.avg.per_second",
    "l2": "lts__cycles_elapsed.avg.per_second",
    "l1": "l1tex__cycles_elapsed.avg.per_second",
}
CLOCK_OF_LEVEL = {"dram": "dram", "l2": "l2", "l1": "l1"}

ARCHITECTURES = ("volta", "ampere", "ada", "hopper")
ARCH_OF_COMPUTE_CAPABILITY = {
    (7, 0): "volta",
    (7, 2): "volta",
    (8, 0): "ampere",
    (8, 6): "ampere",
    (8, 7): "ampere",
    (8, 9): "ada",
    (9, 0): "hopper",
}

# Which tensor dtype a training precision runs its matmuls in (fp32 = TF32 off = CUDA cores).
TENSOR_DTYPE_OF_PRECISION = {"fp32": None, "tf32": "tf32", "fp16": "fp16", "bf16": "bf16"}


def compute_peak_column(precision: str) -> str:
    """The kernels-table column with the compute roof of `precision`: the tensor cores' peak
    for a precision whose matmuls run on them, the FP32 pipe's otherwise."""
    return "peak_flop_s_tensor" if TENSOR_DTYPE_OF_PRECISION.get(precision) else "peak_flop_s_fp32"


@dataclass(frozen=True)
class MetricSet:
    """The counters one architecture needs for a hierarchical roofline.

    `tensor` maps a tensor dtype (fp16, bf16, tf32, fp64) to the counters whose sum times
    `tensor_flops_per_count` is that dtype's Tensor-Core FLOPs. `tensor_peak` maps the same dtype
    to a per-cycle `.peak_sustained` metric of the same unit, and `tensor_peak_divisor` to how
    many times that exported peak exceeds the *dense* rate (2 where the chip reports its 2:4
    sparse rate): dense training is bound by the dense rate, so the roof is the exported peak
    divided by it. `tensor_peak_basis` says where the divisor comes from.
    """

    arch: str
    tensor: Mapping[str, tuple[str, ...]]
    tensor_peak: Mapping[str, str]
    tensor_flops_per_count: float
    note: str = ""
    tensor_peak_divisor: Mapping[str, float] = field(default_factory=dict)
    tensor_peak_basis: str = "ncu peak_sustained x clock (dense rate)"
    cuda_core: Mapping[str, tuple[str, str, str]] = field(default_factory=lambda: CUDA_CORE_METRICS)
    bytes: Mapping[str, str] = field(default_factory=lambda: BYTES_METRICS)
    clocks: Mapping[str, str] = field(default_factory=lambda: CLOCK_METRICS)

    @property
    def cuda_core_peaks(self) -> dict[str, str]:
        """Per-cycle FMA peak per dtype (FLOPs/cycle = peak x 2, or x 4 for packed fp16)."""
        return {dtype: f"{names[2]}.peak_sustained" for dtype, names in self.cuda_core.items()}

    @property
    def bytes_peaks(self) -> dict[str, str]:
        """Per-cycle byte peaks per memory level.

        The `.peak_sustained` of the very counters the points use, so a point and its roof
        measure the same stage. Nsight Compute's own roofline sections use other L1/L2 peaks
        (`l1tex__lsu_writeback_active*` x 128 B, `lts__lts2xbar_cycles_active` x 32 B) and
        NERSC measures L1/L2 roofs with the Empirical Roofline Toolkit; all three differ, so
        figures label these roofs "ncu" and draw measured roofs separately.
        """
        return {level: f"{name}.peak_sustained" for level, name in self.bytes.items()}

    def dense_divisor(self, dtype: str) -> float:
        """How many times the exported tensor peak of `dtype` exceeds its dense rate."""
        return float(self.tensor_peak_divisor.get(dtype, 1.0))

    def metrics(self) -> list[str]:
        """Every metric to pass to `ncu --metrics`, sorted and without duplicates."""
        names = {TIME_METRIC}
        for triple in self.cuda_core.values():
            names.update(triple)
        for counters in self.tensor.values():
            names.update(counters)
        names.update(self.tensor_peak.values())
        names.update(self.bytes.values())
        names.update(self.clocks.values())
        names.update(self.cuda_core_peaks.values())
        names.update(self.bytes_peaks.values())
        return sorted(names)


# Volta (sm_70): no per-dtype tensor counters. NERSC recipe: 512 FLOPs per warp-level
# instruction on the tensor pipe (`sm__inst_executed_pipe_tensor.sum`); the calibration GEMM checks it.
_VOLTA = MetricSet(
    arch="volta",
    tensor={"fp16": ("sm__inst_executed_pipe_tensor.sum",)},
    tensor_peak={"fp16": "sm__inst_executed_pipe_tensor.sum.peak_sustained"},
    tensor_flops_per_count=512.0,
    note="Volta: Tensor-Core FLOPs = 512 x sm__inst_executed_pipe_tensor.sum (NERSC).",
    tensor_peak_basis="512 x ncu tensor-pipe instruction peak x clock (Volta has no sparsity)",
)

# Ampere (GA100 sm_80, GA10x sm_86, GA10y sm_87) and Ada (AD10x sm_89): the section files use
# per source/destination counters with an explicit sparsity split. Dense training never issues
# 2:4-sparse MMA, so only `_sparsity_off` is collected. The counters count tensor "math ops";
# one op is one FLOP (a MAC is two), which the calibration GEMM checks.
_AMPERE_TENSOR = {
    "fp16": (
        "sm__ops_path_tensor_src_fp16_dst_fp16_sparsity_off.sum",
        "sm__ops_path_tensor_src_fp16_dst_fp32_sparsity_off.sum",
    ),
    "bf16": ("sm__ops_path_tensor_src_bf16_dst_fp32_sparsity_off.sum",),
    "tf32": ("sm__ops_path_tensor_src_tf32_dst_fp32_sparsity_off.sum",),
    "fp64": ("sm__ops_path_tensor_src_fp64.sum",),
}
_AMPERE_TENSOR_PEAK = {
    # fp16 with an fp32 accumulator is the path PyTorch autocast uses.
    "fp16": "sm__ops_path_tensor_src_fp16_dst_fp32_sparsity_off.sum.peak_sustained",
    "bf16": "sm__ops_path_tensor_src_bf16_dst_fp32_sparsity_off.sum.peak_sustained",
    "tf32": "sm__ops_path_tensor_src_tf32_dst_fp32_sparsity_off.sum.peak_sustained",
    "fp64": "sm__ops_path_tensor_src_fp64.sum.peak_sustained",
}
_AMPERE = MetricSet(
    arch="ampere",
    tensor=_AMPERE_TENSOR,
    tensor_peak=_AMPERE_TENSOR_PEAK,
    tensor_flops_per_count=1.0,
    note="Ampere: sm__ops_path_tensor_src_<dtype>_dst_<acc>_sparsity_off.sum.",
    tensor_peak_basis=(
        "ncu peak_sustained x clock of the sparsity-off counters (taken as the dense rate; "
        "unverified on silicon: the calibration GEMM checks it)"
    ),
)
_ADA = MetricSet(
    arch="ada",
    tensor=_AMPERE_TENSOR,
    tensor_peak=_AMPERE_TENSOR_PEAK,
    tensor_flops_per_count=1.0,
    note="Ada: same tensor counters as Ampere (fp8 paths not collected).",
    tensor_peak_basis=_AMPERE.tensor_peak_basis,
)

# Hopper (GH100 sm_90): the section file's aggregate counters have no sparsity suffix and fp16
# is one counter for both accumulators; they sum the legacy `hmma` and the warpgroup `hgmma`
# (wgmma) paths, both of which cuBLAS/cuDNN use on H100.
_HOPPER = MetricSet(
    arch="hopper",
    tensor={
        "fp16": ("sm__ops_path_tensor_src_fp16.sum",),
        "bf16": ("sm__ops_path_tensor_src_bf16_dst_fp32.sum",),
        "tf32": ("sm__ops_path_tensor_src_tf32_dst_fp32.sum",),
        "fp64": ("sm__ops_path_tensor_src_fp64.sum",),
    },
    tensor_peak={
        "fp16": "sm__ops_path_tensor_src_fp16.sum.peak_sustained",
        "bf16": "sm__ops_path_tensor_src_bf16_dst_fp32.sum.peak_sustained",
        "tf32": "sm__ops_path_tensor_src_tf32_dst_fp32.sum.peak_sustained",
        "fp64": "sm__ops_path_tensor_src_fp64.sum.peak_sustained",
    },
    tensor_flops_per_count=1.0,
    note="Hopper: sm__ops_path_tensor_src_{fp16,bf16_dst_fp32,tf32_dst_fp32,fp64}.sum.",
    # Measured on an H100 SXM (shared/h100/ncu, Nsight Compute 2025.3): the exported
    # `.peak_sustained` of the bf16 and fp16 paths is 8192 FLOP per SM per cycle and of tf32
    # 4096, the 2:4-sparse rates; the dense rates are 4096 and 2048 (H100 SXM datasheet:
    # 989.4 dense BF16 TFLOP/s = 132 SMs x 1.83 GHz x 4096). The calibration GEMM confirms it:
    # 90% of the dense roof at its clock, 45% of the exported one. FP64 has no sparse mode.
    tensor_peak_divisor={"fp16": 2.0, "bf16": 2.0, "tf32": 2.0, "fp64": 1.0},
    tensor_peak_basis=(
        "ncu peak_sustained / 2 x clock: Hopper exports the 2:4-sparse tensor rate, dense "
        "work runs at half of it"
    ),
)

METRIC_SETS: dict[str, MetricSet] = {
    "volta": _VOLTA,
    "ampere": _AMPERE,
    "ada": _ADA,
    "hopper": _HOPPER,
}


def arch_for_compute_capability(capability: str | tuple[int, int]) -> str:
    """Map a compute capability ("9.0", "sm_90", (9, 0)) to an entry of `ARCHITECTURES`."""
    text = capability if isinstance(capability, str) else f"{capability[0]}.{capability[1]}"
    match = re.fullmatch(r"\s*(?:sm_?)?(\d+)\.?(\d)\s*", str(text))
    if match is None:
        raise NnperfError(f"compute capability {capability!r} is not of the form '9.0' or 'sm_90'")
    key = (int(match.group(1)), int(match.group(2)))
    if key not in ARCH_OF_COMPUTE_CAPABILITY:
        known = ", ".join(f"{a}.{b}" for a, b in sorted(ARCH_OF_COMPUTE_CAPABILITY))
        raise NnperfError(
            f"compute capability {key[0]}.{key[1]} has no ncu metric set; known: {known}"
        )
    return ARCH_OF_COMPUTE_CAPABILITY[key]


def metric_set(arch: str) -> MetricSet:
    """The metric set of `arch` (a name from `ARCHITECTURES` or a compute capability)."""
    if arch in METRIC_SETS:
        return METRIC_SETS[arch]
    if re.fullmatch(r"(sm_?)?\d+\.?\d", arch):
        return METRIC_SETS[arch_for_compute_capability(arch)]
    raise NnperfError(
        f"architecture {arch!r} is unknown; allowed: {', '.join(ARCHITECTURES)} "
        "or a compute capability such as 9.0 / sm_90"
    )


# --------------------------------------------------------------------------------------------
# Which configs get ncu rules.
# --------------------------------------------------------------------------------------------
NCU_SETTINGS = ("auto", "true", "false")


def _normalise_setting(setting: object) -> str:
    if isinstance(setting, bool):
        return "true" if setting else "false"
    text = str(setting).strip().lower()
    if text not in NCU_SETTINGS:
        raise NnperfError(f"ncu.enabled {setting!r} is not allowed; allowed: auto, true, false")
    return text


def ncu_included(setting: object, device: str, ncu_on_path: bool) -> bool:
    """Whether the DAG gets ncu profiling rules for `device`.

    `auto`: CUDA devices, when the machine building the DAG has `ncu` on PATH; `true`: CUDA
    devices regardless (a cluster login node builds the DAG without a GPU or ncu); `false`:
    never. Only CUDA devices can be profiled by ncu.
    """
    mode = _normalise_setting(setting)
    if device != "cuda" or mode == "false":
        return False
    return mode == "true" or bool(ncu_on_path)


def ncu_exclusion_reason(setting: object, device: str, ncu_on_path: bool) -> str | None:
    """One line saying why ncu rules are left out for `device`, or None when included."""
    if ncu_included(setting, device, ncu_on_path):
        return None
    mode = _normalise_setting(setting)
    if device != "cuda":
        return f"device {device!r}: Nsight Compute profiles CUDA devices only; roofline is analytic"
    if mode == "false":
        return "ncu.enabled is false: no Nsight Compute profiles; roofline is analytic"
    return (
        f"ncu.enabled is auto and ncu is not on PATH here (nor in {searched_places(path=False)}): "
        "no Nsight Compute profiles, the roofline is analytic; set true to force"
    )


# Where Nsight Compute is when it is not on PATH (`nnperf.ncu.command.find_ncu` looks there): the
# CUDA toolkit's bin folder (the /usr/local/cuda link, then the versioned installs beside it)
# and the standalone Nsight Compute installer's folder. A GPU machine often has the toolkit
# without its bin folder on PATH.
NCU_SEARCH = (
    "/usr/local/cuda/bin/ncu",
    "/usr/local/cuda-*/bin/ncu",
    "/opt/nvidia/nsight-compute/*/ncu",
)


def searched_places(search: Sequence[str] = NCU_SEARCH, path: bool = True) -> str:
    """Where `ncu` is looked for, for messages: PATH, /usr/local/cuda/bin, ..."""
    folders = [str(PurePosixPath(pattern).parent) for pattern in search]
    return ", ".join((["PATH"] if path else []) + folders)


# --------------------------------------------------------------------------------------------
# Command lines.
# --------------------------------------------------------------------------------------------
REPLAY_MODES = ("kernel", "application")
CACHE_CONTROLS = ("all", "none")


def _check_choice(key: str, value: str, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise NnperfError(f"{key} {value!r} is not allowed; allowed: {', '.join(allowed)}")


def report_stem(report_path: str | Path) -> str:
    """`-o` takes the name without `.ncu-rep`; ncu appends the extension itself."""
    text = str(report_path)
    return text[: -len(".ncu-rep")] if text.endswith(".ncu-rep") else text


def profile_command(
    target: Sequence[str],
    report_path: str | Path,
    metrics: Sequence[str],
    *,
    ncu: str = "ncu",
    clock_control: str = "base",
    replay_mode: str = "kernel",
    cache_control: str = "all",
    nvtx_include: Sequence[str] | None = None,
) -> list[str]:
    """The `ncu` argv that profiles `target` (a command line) into `report_path`.

    * `--target-processes all`: `nnperf step` may be started through a wrapper process.
    * `--nvtx --nvtx-include <range>` per range: only kernels inside the marked step and the
      calibration GEMM are profiled; warm-up steps run unprofiled.
    * `--clock-control base` (ncu's default) locks clocks to base so counters are repeatable;
      `none` leaves boost on. Either way the ceilings use the clock ncu measured.
    * `--replay-mode kernel` (default) replays each kernel until all counters are collected;
      `application` reruns the whole program instead (needs a deterministic program).
    * `--cache-control all` (default) flushes caches before each replay pass: DRAM bytes are
      cold-cache bytes, which is what a roofline of one kernel wants.
    * `-f -o stem`: overwrite, keep the `.ncu-rep` for the Nsight Compute UI.
    """
    _check_choice("ncu.clock_control", clock_control, CLOCK_CONTROLS)
    _check_choice("ncu.replay_mode", replay_mode, REPLAY_MODES)
    _check_choice("ncu.cache_control", cache_control, CACHE_CONTROLS)
    if not target:
        raise NnperfError("ncu profile: no target command given after '--'")
    if not metrics:
        raise NnperfError("ncu profile: the metric list is empty")
    argv = [ncu, "--target-processes", "all", "--nvtx"]
    for config in nvtx_include if nvtx_include is not None else nvtx_include_filters():
        argv += ["--nvtx-include", config]
    argv += [
        "--clock-control",
        clock_control,
        "--replay-mode",
        replay_mode,
        "--cache-control",
        cache_control,
        "--metrics",
        ",".join(metrics),
        "--force-overwrite",
        "-o",
        report_stem(report_path),
    ]
    return argv + list(target)


def export_command(report_path: str | Path, *, ncu: str = "ncu") -> list[str]:
    """`ncu --import X.ncu-rep --csv --page raw`: one row per kernel, one column per metric,
    a units row under the header (stdout)."""
    return [ncu, "--import", str(report_path), "--csv", "--page", "raw"]


def query_metrics_command(chip: str, *, ncu: str = "ncu") -> list[str]:
    """`ncu --query-metrics --chip <chip>`: lists the base metric names a chip (e.g. gh100,
    ga100) has, to check `METRIC_SETS` on a machine with ncu."""
    return [ncu, "--query-metrics", "--chip", chip]


# --------------------------------------------------------------------------------------------
# Per-kernel quantities.
# --------------------------------------------------------------------------------------------
def _column(frame: pd.DataFrame, name: str) -> pd.Series:
    if name in frame.columns:
        return pd.to_numeric(frame[name], errors="coerce")
    return pd.Series(math.nan, index=frame.index, dtype=float)


def _sum(parts: Sequence[pd.Series]) -> pd.Series:
    # NaN (n/a) components count as absent, but a quantity with no value at all stays NaN.
    return pd.concat(parts, axis=1).sum(axis=1, min_count=1)


def cuda_core_flops(frame: pd.DataFrame, dtype: str, mset: MetricSet) -> pd.Series:
    """add x w_add + mul x w_mul + fma x w_fma for one dtype (see FLOPS_PER_INSTRUCTION)."""
    names = mset.cuda_core[dtype]
    weights = FLOPS_PER_INSTRUCTION[dtype]
    return _sum([_column(frame, n) * w for n, w in zip(names, weights)])


def tensor_flops(frame: pd.DataFrame, mset: MetricSet) -> pd.Series:
    """All Tensor-Core FLOPs: the sum of every tensor counter x `tensor_flops_per_count`."""
    counters = sorted({n for names in mset.tensor.values() for n in names})
    return _sum([_column(frame, n) for n in counters]) * mset.tensor_flops_per_count


def kernel_quantities(
    frame: pd.DataFrame, mset: MetricSet, precision: str | None = None
) -> pd.DataFrame:
    """Time, FLOPs per dtype, bytes per level, clocks and ceilings of each kernel.

    Columns: `duration_s, flops_fp64, flops_fp32, flops_fp16, flops_tensor, flops_total,
    bytes_dram, bytes_l2, bytes_l1, clock_hz, dram_clock_hz, l2_clock_hz, l1_clock_hz,
    peak_flop_s_fp64, peak_flop_s_fp32, peak_flop_s_fp16, peak_flop_s_tensor,
    peak_bytes_s_dram, peak_bytes_s_l2, peak_bytes_s_l1`. Peaks are `peak_sustained` (per
    cycle) x the unit's measured clock. `peak_flop_s_tensor` is the *dense* peak of the tensor
    dtype of `precision` (the exported peak / `MetricSet.dense_divisor`; NaN for fp32 or when
    not given).
    """
    out = pd.DataFrame(index=frame.index)
    out["duration_s"] = _column(frame, TIME_METRIC)
    for dtype in ("fp64", "fp32", "fp16"):
        out[f"flops_{dtype}"] = cuda_core_flops(frame, dtype, mset)
    out["flops_tensor"] = tensor_flops(frame, mset)
    out["flops_total"] = _sum(
        [out[c] for c in ("flops_fp64", "flops_fp32", "flops_fp16", "flops_tensor")]
    )
    for level, name in mset.bytes.items():
        out[f"bytes_{level}"] = _column(frame, name)
    out["clock_hz"] = _column(frame, mset.clocks["sm"])
    for unit in ("dram", "l2", "l1"):
        out[f"{unit}_clock_hz"] = _column(frame, mset.clocks[unit])
    for dtype, peak in mset.cuda_core_peaks.items():
        # the FMA peak in instructions/cycle; x FLOPs per FMA instruction
        out[f"peak_flop_s_{dtype}"] = (
            _column(frame, peak) * FLOPS_PER_INSTRUCTION[dtype][2] * out["clock_hz"]
        )
    tensor_dtype = TENSOR_DTYPE_OF_PRECISION.get(precision or "")
    if tensor_dtype and tensor_dtype in mset.tensor_peak:
        out["peak_flop_s_tensor"] = (
            _column(frame, mset.tensor_peak[tensor_dtype])
            * mset.tensor_flops_per_count
            * out["clock_hz"]
            / mset.dense_divisor(tensor_dtype)
        )
    else:
        out["peak_flop_s_tensor"] = math.nan
    for level, peak in mset.bytes_peaks.items():
        out[f"peak_bytes_s_{level}"] = (
            _column(frame, peak) * out[f"{CLOCK_OF_LEVEL[level]}_clock_hz"]
        )
    return out
