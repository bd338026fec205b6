"""Nsight Compute: which metrics to collect, how to run `ncu`, and how to read its CSV export.

This module knows three things about Nsight Compute (`ncu`) and nothing else:

* **What to collect** for a hierarchical roofline on each GPU architecture (`METRIC_SETS`):
  kernel time, CUDA-core FLOPs per dtype, Tensor-Core FLOPs, bytes at DRAM/L2/L1, and the
  `peak_sustained` values and clocks that turn into ceilings.
* **How to run it**: the profile command line (NVTX-filtered to one training step plus the
  calibration GEMM, explicit clock control, the `.ncu-rep` kept) and the export command
  (`ncu --import X.ncu-rep --csv --page raw`).
* **How to read the export**: `parse_raw_csv` turns the raw page into one row per kernel with
  every metric in SI base units, and fails with one `NnperfError` line naming file and line on
  anything malformed.

It does not classify kernels (`nnperf.ncu.kernels`), compute roofline points
(`nnperf.roofline.points`) or draw anything. Nothing here needs a GPU or `ncu`; running the
commands is `nnperf.ncu.command`'s job.

Sources (read for the formats; nothing copied):
* Nsight Compute CLI manual (docs.nvidia.com/nsight-compute/NsightComputeCli): options
  `--metrics`, `--nvtx`, `--nvtx-include`, `--clock-control {base,none}`,
  `--replay-mode {kernel,application,...}`, `--cache-control`, `--target-processes all`,
  `-o/--export`, `-f/--force-overwrite`, `--import`, `--csv`, `--page raw`, `--print-units`,
  `--query-metrics`; sections "NVTX Filtering" and "Metrics and Units".
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

import csv
import gzip
import math
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Iterable, Mapping, Sequence

import pandas as pd

from nnperf.core.errors import NnperfError
from nnperf.core.vocab import CLOCK_CONTROLS

# --------------------------------------------------------------------------------------------
# NVTX ranges. The timing stream (`nnperf step`) opens them with torch.cuda.nvtx.range_start /
# range_end. Those are *start/end* ranges: process-wide, so they also cover the backward kernels
# that autograd launches from its own thread (a push/pop range lives on one thread's stack and
# misses them).
#
# How `--nvtx-include` matches (Nsight Compute CLI manual, "NVTX Filtering"): a configuration
# WITHOUT a trailing "/" names a start/end range ("nnperf_step" = kernels launched while the
# start/end range "nnperf_step" of the default domain is open); a configuration WITH a trailing
# "/" names a push/pop range on the launching thread's stack ("nnperf_step/"). `domain@range`
# selects a domain, `regex:` switches to regular expressions. Several --nvtx-include options are
# a union. So we pass the plain range names, without "/".
# --------------------------------------------------------------------------------------------
STEP_RANGE = "nnperf_step"
PHASE_RANGES = ("forward", "backward", "optimizer")
CALIBRATION_RANGE = "nnperf_calibration_gemm"

# The calibration GEMM: C[M,N] = A[M,K] @ B[K,N] in the run's precision, inside its own range.
# 2*M*N*K FLOPs (one multiply and one add per MAC); the measured/expected ratio checks the FLOP
# counting of every profile. The timing stream should import these so both sides agree.
CALIBRATION_GEMM_MNK = (4096, 4096, 4096)
CALIBRATION_TOLERANCE = 0.02  # measured FLOPs must be within 2 % of 2*M*N*K

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


def nvtx_include_filters() -> list[str]:
    """`--nvtx-include` configurations: the step and the calibration GEMM, as start/end ranges."""
    return [STEP_RANGE, CALIBRATION_RANGE]


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
# Units. The raw page has a units row under the header; with `--print-units auto` (default)
# ncu scales values to a prefixed unit per column (Kbyte, Mbyte, usecond, msecond, Ghz,
# cycle/nsecond, ...), with `--print-units base` it prints base units. Byte prefixes are
# decimal (Nsight shows 65,536 bytes as 65.54 Kbyte). Newer releases abbreviate (ns, us, ms,
# KB, MB); both spellings are accepted.
# --------------------------------------------------------------------------------------------
_PREFIX = {"": 1.0, "K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_SMALL_PREFIX = {"m": 1e-3, "u": 1e-6, "n": 1e-9, "p": 1e-12}
# base word -> (SI name, kind). Time bases accept the small prefixes too.
_BASES = {
    "byte": ("byte", "count"),
    "B": ("byte", "count"),
    "second": ("second", "time"),
    "s": ("second", "time"),
    "hz": ("1/second", "count"),
    "Hz": ("1/second", "count"),
    "cycle": ("cycle", "count"),
    "inst": ("inst", "count"),
    "warp": ("warp", "count"),
    "thread": ("thread", "count"),
    "block": ("block", "count"),
    "sector": ("sector", "count"),
    "request": ("request", "count"),
    "register": ("register", "count"),
}


def _parse_unit_word(word: str) -> tuple[float, str, str] | None:
    if word in ("", "1"):
        return 1.0, "", "count"
    for base, (si_name, kind) in _BASES.items():
        if not word.endswith(base):
            continue
        prefix = word[: -len(base)]
        if prefix in _PREFIX:
            return _PREFIX[prefix], si_name, kind
        if kind == "time" and prefix in _SMALL_PREFIX:
            return _SMALL_PREFIX[prefix], si_name, kind
    return None


def parse_unit(unit: str) -> tuple[float, str]:
    """`(factor, si_unit)` such that value_in_si = value * factor.

    Accepts `%`, counts (`""`, `inst`, `Kinst`, `cycle`, `Mcycle`, ...), bytes (`byte`,
    `Kbyte`, `Mbyte`, `Gbyte`, `KB`, ...), times (`nsecond`, `usecond`, `msecond`, `second`,
    `ns`, `us`, `ms`, `s`), frequencies (`hz`, `Mhz`, `Ghz`) and ratios of these
    (`cycle/nsecond`, `Gbyte/second`, `byte/cycle`, `inst/cycle`).
    Raises ValueError for anything else (the parser turns it into an NnperfError).
    """
    text = unit.strip()
    if text == "%":
        return 1.0, "%"
    parts = text.split("/")
    if len(parts) > 2:
        raise ValueError(f"unit {unit!r} has more than one '/'")
    parsed = [_parse_unit_word(part.strip()) for part in parts]
    if any(p is None for p in parsed):
        raise ValueError(f"unit {unit!r} is not a known Nsight Compute unit")
    if len(parsed) == 1:
        factor, si_name, _ = parsed[0]
        return factor, si_name
    (num_factor, num_name, _), (den_factor, den_name, _) = parsed
    return num_factor / den_factor, f"{num_name or '1'}/{den_name or '1'}"


# Thousands separators: ncu formats numbers with "," between groups of three digits.
_NUMBER = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][+-]?\d+)?")
_MISSING = {"", "n/a", "N/A", "NaN", "nan"}


def parse_number(text: str) -> float:
    """One CSV cell as a float: thousands separators removed, `n/a` and empty as NaN.

    Raises ValueError on anything else (a decimal comma from a non-English locale included:
    "1.234,5" is refused rather than misread)."""
    cell = text.strip()
    if cell in _MISSING:
        return math.nan
    if not _NUMBER.fullmatch(cell) or not any(ch.isdigit() for ch in cell):
        raise ValueError(f"{text!r} is not a number")
    return float(cell.replace(",", ""))


# --------------------------------------------------------------------------------------------
# The raw-page CSV.
# --------------------------------------------------------------------------------------------
# Metadata columns of the raw page and their tidy names. The two NVTX columns appear only when
# the profile ran with --nvtx; their headers spell out the fields of each entry.
_METADATA = {
    "ID": "id",
    "Process ID": "process_id",
    "Process Name": "process_name",
    "Host Name": "host_name",
    "Kernel Name": "kernel_name",
    "Kernel Time": "kernel_time",
    "Context": "context",
    "Stream": "stream",
    "Block Size": "block_size",
    "Grid Size": "grid_size",
    "Device": "device",
    "CC": "cc",
}
NVTX_PUSH_POP_PREFIX = "thread Domain:Push/Pop_Range"
NVTX_START_END_PREFIX = "Id:Domain:Start/Stop_Range"
_METRIC_NAME = re.compile(r"[A-Za-z0-9_]+__[A-Za-z0-9_.]+")
_TOOL_LINE = re.compile(r"^==(PROF|WARNING|ERROR|INFO)==")
# What `ncu` prints when its filters matched no kernel (Nsight Compute 2019.5 to 2025.3).
NO_KERNELS_WARNING = "No kernels were profiled"
# The columns of the *details* page (`ncu --csv` without `--page raw`, the default): one row
# per kernel and metric. nnperf reads only the raw page, where every metric is a column.
DETAILS_PAGE_COLUMNS = ("Metric Name", "Metric Value")


def _tidy_metadata_name(header: str) -> str | None:
    if header in _METADATA:
        return _METADATA[header]
    if header.startswith(NVTX_PUSH_POP_PREFIX):
        return "nvtx_push_pop"
    if header.startswith(NVTX_START_END_PREFIX):
        return "nvtx_start_end"
    return None


def _fail(source: str, line: int, message: str) -> NnperfError:
    return NnperfError(f"{source}:{line}: {message}")


def _split_line(line: str, source: str, number: int) -> list[str]:
    try:
        return next(csv.reader([line], strict=True))
    except csv.Error as exc:
        raise _fail(source, number, f"not valid CSV ({exc})") from None
    except StopIteration:
        return []


def report_of(source: str) -> str:
    """The `.ncu-rep` an export was presumably made from: `x.csv` -> `x.ncu-rep`."""
    stem = re.sub(r"(\.csv)?(\.gz)?( \(export\))?$", "", str(source))
    return stem if stem.endswith(".ncu-rep") else stem + ".ncu-rep"


def remake_hint(source: str) -> str:
    """The exact commands that write a raw-page export nnperf reads, for `source`."""
    report = report_of(source)
    target = re.sub(r"( \(export\))$", "", str(source))
    if not target.endswith(".csv"):
        target = re.sub(r"\.ncu-rep$", "", target) + ".csv"
    return (
        f"make one with `nnperf ncu-command export --report {report} --csv {target}` "
        f"(or `ncu --import {report} --csv --page raw > {target}`)"
    )


def _quoted(messages: Sequence[str]) -> str:
    """ncu's own lines, verbatim, joined into one line."""
    return " | ".join(message.strip() for message in messages)


def parse_raw_csv(
    text: str, source: str = "<ncu csv>", required: Iterable[str] = ()
) -> pd.DataFrame:
    """Parse `ncu --csv --page raw` output into one row per kernel, metrics in SI base units.

    Layout (Nsight Compute raw page): optional preamble (`==PROF==` lines, the profiled
    program's own output), a header row starting with "ID", a units row (empty under the
    metadata columns), then one row per profiled kernel. Every field is quoted; kernel names
    may contain commas; numbers may carry thousands separators; `n/a` marks a metric the
    kernel has no value for.

    Returns columns `source_line`, `id`, the tidy metadata names (`kernel_name`, `cc`,
    `nvtx_start_end`, ...) and one column per metric under its ncu name, converted to SI
    base units (bytes, seconds, counts, .../second; `%` stays percent).
    `frame.attrs["units"]` maps each metric to its SI unit; `frame.attrs["source"]` is
    `source`; `frame.attrs["ncu_messages"]` holds ncu's own `==WARNING==`/`==INFO==` lines,
    verbatim, for the caller to show.

    It refuses, with one NnperfError line naming the file and line, what it cannot read
    exactly instead of guessing: anything malformed; another page of the export (the
    details page); an export without its units row (the values' scale would be unknown);
    a kernel ID twice; and, for a metric in `required`, a missing column, an unknown unit,
    `n/a`, a negative value or a value that is not a number (`check_values`). Other metrics
    that are not numeric (device names, ...) are kept as text. An `==ERROR==` line of ncu is
    an error, quoted verbatim.

    Parsed line by line (not as one CSV stream) because ncu writes one record per line and
    never a newline inside a field; that keeps preamble junk away from the CSV reader and gives
    every error its exact line.
    """
    required = list(required)
    header: list[str] | None = None
    header_line = 0
    units: list[str] | None = None
    units_line = 0
    rows: list[tuple[int, list[str]]] = []
    messages: list[str] = []
    lines = text.split("\n")
    for number, raw_line in enumerate(lines, start=1):
        line = raw_line[:-1] if raw_line.endswith("\r") else raw_line
        stripped = line.strip()
        if not stripped:
            continue
        if _TOOL_LINE.match(stripped):
            if stripped.startswith("==ERROR=="):
                raise _fail(source, number, f"ncu reported an error: {stripped[:300]}")
            if not stripped.startswith("==PROF=="):
                messages.append(stripped)
            continue
        if header is None:
            if not (stripped.startswith('"ID"') or stripped.startswith("ID,")):
                continue  # preamble: the profiled program's output, banners
            cells = [cell.strip() for cell in _split_line(line, source, number)]
            if "Kernel Name" in cells:
                header, header_line = cells, number
                if all(name in cells for name in DETAILS_PAGE_COLUMNS):
                    raise _fail(
                        source,
                        number,
                        "this is the details page of an Nsight Compute export (one row per "
                        "kernel and metric, 'Metric Name'/'Metric Value' columns: `ncu --csv` "
                        "without `--page raw`); nnperf reads the raw page (one row per kernel, "
                        f"one column per metric, a units row): {remake_hint(source)}",
                    )
            continue
        row = _split_line(line, source, number)
        if len(row) != len(header):
            raise _fail(
                source, number, f"row has {len(row)} fields but the header has {len(header)}"
            )
        if units is None and not rows:
            if row[0].strip() != "":
                raise _fail(
                    source,
                    number,
                    f"no units row under the header (this line is kernel {row[0].strip()!r}): "
                    "without it the scale of every value is unknown (ncu prints Mbyte, us, "
                    f"Ghz, ... per column); {remake_hint(source)}",
                )
            units, units_line = [cell.strip() for cell in row], number
            continue
        rows.append((number, row))
    if header is None:
        where = max(len(lines), 1)
        if any(NO_KERNELS_WARNING in message for message in messages):
            raise _fail(
                source,
                where,
                f"ncu profiled no kernels (it said: {_quoted(messages)}): no kernel ran inside "
                f"the NVTX ranges {STEP_RANGE!r} / {CALIBRATION_RANGE!r}; check the profiled "
                "step's log (did it reach the marked step? is the nvtx package installed?)",
            )
        said = f"; ncu said: {_quoted(messages)}" if messages else ""
        raise _fail(
            source,
            where,
            f'no header row starting with "ID" and naming "Kernel Name"{said}; '
            f"{remake_hint(source)}",
        )
    if len(set(header)) != len(header):
        duplicates = sorted({name for name in header if header.count(name) > 1})
        raise _fail(source, header_line, f"duplicate columns in header: {', '.join(duplicates)}")
    if units is None:
        # A header and nothing else: no kernel (the units row comes with the first kernel).
        units, units_line = [""] * len(header), header_line

    index = {name: i for i, name in enumerate(header)}
    metric_columns = [name for name in header if _METRIC_NAME.fullmatch(name)]
    missing = [name for name in required if name not in index]
    if missing:
        raise _fail(
            source, header_line, f"required metrics missing from the export: {', '.join(missing)}"
        )

    data: dict[str, list] = {"source_line": [number for number, _ in rows]}
    ids: list[int] = []
    first_line_of: dict[int, int] = {}
    for number, row in rows:
        try:
            value = parse_number(row[index["ID"]])
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value != int(value):
            raise _fail(source, number, f"ID {row[index['ID']].strip()!r} is not an integer")
        if int(value) in first_line_of:
            raise _fail(
                source,
                number,
                f"kernel ID {int(value)} appears twice (first on line {first_line_of[int(value)]})"
                f": an export lists each profiled kernel once; were two exports joined? "
                f"{remake_hint(source)}",
            )
        first_line_of[int(value)] = number
        ids.append(int(value))
    data["id"] = ids
    for name in header:
        tidy = _tidy_metadata_name(name)
        if tidy is not None and tidy != "id":
            data[tidy] = [row[index[name]].strip() for _, row in rows]

    si_units: dict[str, str] = {}
    for name in metric_columns:
        col = index[name]
        cells = [row[col] for _, row in rows]
        try:
            factor, si_unit = parse_unit(units[col])
        except ValueError as exc:
            if name in required:
                raise _fail(source, units_line, f"column {name}: {exc}") from None
            data[name] = [cell.strip() for cell in cells]
            si_units[name] = units[col]
            continue
        values: list[float] | None = []
        for (number, _), cell in zip(rows, cells):
            try:
                values.append(parse_number(cell) * factor)
            except ValueError:
                if name in required:
                    raise _fail(
                        source, number, f"column {name}: {cell.strip()!r} is not a number or n/a"
                    ) from None
                values = None
                break
        data[name] = values if values is not None else [cell.strip() for cell in cells]
        si_units[name] = si_unit if values is not None else units[col]

    frame = pd.DataFrame(data)
    frame.attrs["units"] = si_units
    frame.attrs["source"] = source
    frame.attrs["ncu_messages"] = messages
    check_values(frame, required)
    return frame


# What each kind of metric is needed for, so a refused value says what would have gone wrong.
def _purpose(metric: str) -> str:
    if metric == TIME_METRIC:
        return "every point's time (a step without it would keep its FLOPs and lose its time)"
    if metric.endswith(".peak_sustained"):
        return "the profile's own roofs"
    if metric.endswith(".per_second"):
        return "the clock the roofs are scaled to"
    if "bytes" in metric:
        return "the bytes of the roofline points"
    return "the FLOPs of the roofline points"


def check_values(frame: pd.DataFrame, metrics: Iterable[str]) -> None:
    """Refuse a kernel whose value of one of `metrics` is missing (`n/a`), not a number or
    negative, and a kernel time of zero: NnperfError naming the file, line, kernel and metric.

    A missing counter is not zero: summing it as zero under-counts FLOPs by orders of
    magnitude, and a step whose kernel lost its time keeps its FLOPs and lands far above every
    roof. Counters, times, clocks and peaks are never negative.
    """
    source = frame.attrs.get("source", "<ncu csv>")
    for metric in metrics:
        if metric not in frame.columns:
            raise NnperfError(f"{source}: required metric {metric} is not in the export")
        values = pd.to_numeric(frame[metric], errors="coerce")
        positive = metric == TIME_METRIC
        bad = values.isna() | (values <= 0 if positive else values < 0)
        if not bad.any():
            continue
        position = int(bad.to_numpy().nonzero()[0][0])
        row = frame.iloc[position]
        line = int(row["source_line"]) if "source_line" in frame.columns else position + 1
        name = str(row.get("kernel_name", "?"))
        name = name if len(name) <= 80 else name[:77] + "..."
        cell = frame[metric].iloc[position]
        unit = frame.attrs.get("units", {}).get(metric, "")
        if values.isna().iloc[position]:
            shown = "'n/a'" if not isinstance(cell, str) else repr(cell)
        else:
            shown = f"{cell:g} {unit}".strip()
        what = "must be positive" if positive else "must be a number >= 0"
        raise _fail(
            source,
            line,
            f"kernel {row.get('id', '?')} ({name}): {metric} is {shown}, which {what}; "
            f"nnperf needs it for {_purpose(metric)} and never guesses it. Profile again "
            "with `nnperf ncu-command profile` (it collects every metric of the GPU's set) "
            "and check ncu's warnings in the profile's log",
        )


def read_raw_csv(path: str | Path, required: Iterable[str] = ()) -> pd.DataFrame:
    """`parse_raw_csv` on a file (plain or gzip-compressed); a missing or undecodable file is
    an NnperfError too."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise NnperfError(f"{path}: file not found") from None
    except OSError as exc:
        raise NnperfError(f"{path}: cannot read ({exc.strerror})") from None
    if raw[:2] == b"\x1f\x8b":  # gzip magic: an export kept compressed
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise NnperfError(f"{path}: not a readable gzip file ({exc})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise NnperfError(f"{path}:{line}: not UTF-8 text") from None
    return parse_raw_csv(text, source=str(path), required=required)


# --------------------------------------------------------------------------------------------
# NVTX context of a kernel.
# --------------------------------------------------------------------------------------------
def nvtx_ranges(cell: str) -> list[str]:
    """Names of the NVTX ranges in one `Id:Domain:Start/Stop_Range:...` (or push/pop) cell.

    Each entry reads `<id>:<domain>:<range>:<PL_Type>:<PL_Value>:<CLR_Type>:<Color>:<Msg_Type>:
    <Msg>` (push/pop entries lack the id and follow the thread id); entries are quoted and
    separated by spaces. Only our own range names are looked for, as whole `:`-delimited fields,
    so the parse does not depend on how many optional fields follow.
    """
    names = (STEP_RANGE, CALIBRATION_RANGE, *PHASE_RANGES)
    found = []
    for name in names:
        if re.search(rf"(?:^|[:\s\"]){re.escape(name)}(?=:|\"|\s|$)", cell or ""):
            found.append(name)
    return found


def phase_of(nvtx_cell: str) -> str:
    """`calibration`, `forward`, `backward`, `optimizer`, `step` (inside the step but in no
    phase range) or `none` (outside every range we set)."""
    ranges = nvtx_ranges(nvtx_cell)
    if CALIBRATION_RANGE in ranges:
        return "calibration"
    for phase in PHASE_RANGES:
        if phase in ranges:
            return phase
    return "step" if STEP_RANGE in ranges else "none"


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
