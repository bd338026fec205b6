"""Kernel kinds from kernel names, and the per-kernel table `results/tables/kernels.csv`.

A training step on a GPU is a few hundred kernels from cuDNN, cuBLAS(Lt), CUTLASS, PyTorch's
ATen and (with torch.compile) Triton. Their names say what they do, in each library's own
convention; `classify_kernel` maps a name (plus the NVTX phase it ran in) to one of `KINDS` so
roofline points can be coloured by what they are.

`write_table()` builds the table from the profiles' CSV exports; each profile's configuration
keys, architecture and clock control come from its meta (`.ncu.json`, written by
`nnperf ncu-command profile --request`) or from the request it ran, never from its path.

Not here: parsing the export (`nnperf.ncu.raw_csv`) or the metric formulas
(`nnperf.ncu.metrics`), roofline points (`nnperf.roofline.points`). No library classifies kernel
names, hence the hand-written rules below; each rule names the library convention it relies on.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Iterable

import pandas as pd

from nnperf.core.contract import ProfileStepRequest, read_request
from nnperf.core.errors import NnperfError
from nnperf.core.files import read_json, write_csv
from nnperf.core.vocab import CONFIG_KEYS
from nnperf.ncu import metrics
from nnperf.ncu import ranges, raw_csv

KINDS = (
    "conv_fwd",
    "conv_dgrad",
    "conv_wgrad",
    "gemm",
    "batchnorm",
    "elementwise",
    "reduction",
    "optimizer",
    "copy",
    "other",
)
KIND_LABELS = {
    "conv_fwd": "conv forward",
    "conv_dgrad": "conv data-grad",
    "conv_wgrad": "conv weight-grad",
    "gemm": "GEMM",
    "batchnorm": "batch-norm",
    "elementwise": "elementwise",
    "reduction": "reduction",
    "optimizer": "optimizer",
    "copy": "copy",
    "other": "other",
}


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


# Ordered rules: the first match wins. Order matters where names overlap (an implicit-GEMM
# convolution has "gemm" in its name; an Inductor kernel names every op it fused).
_RULES: list[tuple[str, re.Pattern[str]]] = [
    # Copies the driver reports as activities (ncu shows kernels only, nsys-style names kept).
    ("copy", _rx(r"^\[?(cuda )?mem(cpy|set)|^memcpy|^memset")),
    # Pure data movement that would otherwise match a broader rule below (seen in the H100
    # exports): Inductor's bare dtype casts `triton_poi_fused__to_copy_<n>`, the foreach copy
    # `multi_tensor_apply_kernel<..., UnaryOpFunctor<..., at::Copy<...>>` (CUDA graphs copy
    # inputs into their static buffers with it), cuDNN's `nhwcAddPaddingKernel`.
    (
        "copy",
        _rx(r"^triton_poi_fused__to_copy_\d+$|multi_tensor_apply_kernel.*\bCopy<|AddPadding"),
    ),
    # Triton kernels from torch.compile (Inductor): triton_poi_* pointwise, triton_red_* and
    # triton_per_* (persistent) reductions, triton_tem_* templates (matmul/conv).
    ("elementwise", _rx(r"\btriton_poi_")),
    ("reduction", _rx(r"\btriton_(red|per)_")),
    ("gemm", _rx(r"\btriton_tem_.*(mm|bmm|addmm)")),
    # Optimizers: PyTorch foreach/fused optimizers run `multi_tensor_apply_kernel` with
    # functors such as FusedSgdMathFunctor / FusedAdamMathFunctor; GradScaler's unscale and
    # scale update belong to the optimizer step as well.
    (
        "optimizer",
        _rx(
            r"multi_tensor_apply|fused_?sgd|fused_?adam|FusedOptimizer|"
            r"amp_foreach_non_finite_check_and_unscale|amp_update_scale"
        ),
    ),
    # Batch-norm: cuDNN `cudnn::bn_fw_tr_1C11_kernel_NCHW`, `cudnn::bn_bw_1C11_kernel_new`,
    # `bn_fw_inf_*`; ATen `batch_norm_collect_statistics_kernel`, `batch_norm_backward_kernel`,
    # `batch_norm_elemt_kernel`, `batch_norm_transform_input_kernel`, channels-last variants.
    ("batchnorm", _rx(r"\bbn_(fw|bw)|batch_?norm|bnorm")),
    # Convolutions with an explicit direction: cuDNN/XMMA `sm80_xmma_fprop_implicit_gemm_*`,
    # `sm90_xmma_dgrad_implicit_gemm_*`, `sm86_xmma_wgrad_implicit_gemm_*`; CUTLASS
    # `cutlass_tensorop_s1688fprop_*`, `*_h16816dgrad_*`, `*wgrad*`; cuDNN
    # `cudnn::detail::dgrad_engine`, `dgrad2d_alg1_1`, `wgrad_alg0_engine`.
    (
        "conv_wgrad",
        _rx(r"wgrad|convolve_?(bwd|backward)_?filter|bwd_?filter|" r"scudnn.*stridedB_splitK"),
    ),
    ("conv_dgrad", _rx(r"dgrad|convolve_?(bwd|backward)_?data|bwd_?data")),
    ("conv_fwd", _rx(r"fprop")),
    # Convolutions whose name carries no direction: cuDNN `implicit_convolve_sgemm`,
    # `explicit_convolve_sgemm`, `precomputed_convolve_sgemm`, `convolve_common_engine_*`,
    # `*_scudnn_*` / `*_hcudnn_*` kernels, winograd and FFT kernels. Resolved by phase below.
    (
        "conv",
        _rx(
            r"convolve|[shi]cudnn_|winograd|fft2d|fft_|conv2d|convolution|"
            r"implicit_gemm|im2col|col2im"
        ),
    ),
    # GEMM: cuBLAS `ampere_sgemm_128x64_nn`, `volta_sgemm_*`, `ampere_bf16_s16816gemm_*`,
    # `sm80_xmma_gemm_*`, `sm90_xmma_gemm_*_cublas`, Hopper cuBLAS 12 `nvjet_*`, CUTLASS
    # `cutlass::Kernel2<cutlass_80_tensorop_*gemm*>`, GEMV kernels, cuBLASLt split-K reduction.
    ("gemm", _rx(r"gemm|gemv|nvjet|splitKreduce|cublas|cutlass|\bdot_kernel")),
    # Layout changes and dtype casts are data movement: cuDNN `nchwToNhwcKernel`,
    # `nhwcToNchwKernel`, ATen `CatArrayBatchedCopy`, `direct_copy_kernel_cuda` (inside an
    # elementwise kernel's template arguments), `copy_kernel`, transposes.
    (
        "copy",
        _rx(
            r"nchwToNhwc|nhwcToNchw|CatArrayBatchedCopy|direct_copy_kernel|copy_kernel|"
            r"transpose|\bcopy_device_to_device"
        ),
    ),
    # Reductions: ATen `reduce_kernel<...>`, CUB `DeviceReduceKernel`, softmax and loss
    # kernels (`cunn_SoftMaxForward`, `softmax_warp_forward`, `nll_loss_forward_reduce_cuda_
    # kernel_2d`), norms.
    (
        "reduction",
        _rx(
            r"reduce|softmax|nll_loss|cross_entropy|ClassNLLCriterion|\bnorm_kernel|"
            r"DeviceScan|DeviceSegmentedReduce|welford"
        ),
    ),
    # Elementwise: ATen `vectorized_elementwise_kernel`, `unrolled_elementwise_kernel`,
    # `elementwise_kernel`, `index_elementwise_kernel`, activation kernels.
    (
        "elementwise",
        _rx(
            r"elementwise|pointwise|\brelu|threshold|fill_kernel|FillFunctor|"
            r"launch_clamp_scalar|\bdropout"
        ),
    ),
]


def classify_kernel(name: str, phase: str | None = None) -> str:
    """Kind (one of `KINDS`) of a kernel called `name`, run in NVTX `phase`.

    The phase settles what a name cannot: a convolution kernel without a direction in its name
    is `conv_fwd` in the forward phase and `conv_dgrad` in the backward phase (cuDNN runs the
    data gradient as a forward convolution of the flipped filter, with the same kernels; weight
    gradients use kernels that say wgrad or split-K); and the elementwise/reduction kernels of
    a for-loop optimizer are `optimizer`.
    """
    kind = "other"
    for candidate, pattern in _RULES:
        if pattern.search(name or ""):
            kind = candidate
            break
    if kind == "conv":
        kind = "conv_dgrad" if phase == "backward" else "conv_fwd"
    if phase == "optimizer" and kind in ("elementwise", "reduction", "other"):
        kind = "optimizer"
    return kind


# --------------------------------------------------------------------------------------------
# The table.
# --------------------------------------------------------------------------------------------
# The profile's own ceilings per kernel: `peak_sustained x clock` of each unit.
PEAK_COLUMNS = (
    "peak_flop_s_fp64",
    "peak_flop_s_fp32",
    "peak_flop_s_fp16",
    "peak_flop_s_tensor",
    "peak_bytes_s_dram",
    "peak_bytes_s_l2",
    "peak_bytes_s_l1",
)
KERNEL_COLUMNS = (
    *CONFIG_KEYS,
    "kernel_index",
    "kernel_name",
    "kind",
    "phase",
    "duration_s",
    "flops_fp64",
    "flops_fp32",
    "flops_fp16",
    "flops_tensor",
    "flops_total",
    "bytes_dram",
    "bytes_l2",
    "bytes_l1",
    "clock_hz",
    "dram_clock_hz",
    "l2_clock_hz",
    "l1_clock_hz",
    *PEAK_COLUMNS,
    "arch",
    "cc",
    "clock_control",
)


def arch_of_export(raw: pd.DataFrame) -> str:
    """Architecture of a parsed export, from its `CC` column (one GPU per export)."""
    source = raw.attrs.get("source", "<ncu csv>")
    if "cc" not in raw.columns:
        raise NnperfError(
            f"{source}: the export has no CC (compute capability) column, as raw pages of "
            "Nsight Compute before 2021 do, so its GPU architecture is unknown; give it "
            f"(`nnperf ncu-kernels --arch {'|'.join(metrics.ARCHITECTURES)}`, or `arch` in the "
            f"profile's .ncu.json), or re-export the report with a current ncu: "
            f"{raw_csv.remake_hint(source)}"
        )
    capabilities = sorted(set(raw["cc"]))
    if len(capabilities) != 1:
        raise NnperfError(
            f"{source}: cannot tell the GPU architecture: the CC column holds "
            f"{capabilities or 'no value'}; an export must profile one GPU"
        )
    return metrics.arch_for_compute_capability(capabilities[0])


def kernels_table(
    raw: pd.DataFrame,
    config: dict,
    *,
    arch: str | None = None,
    clock_control: str = "unknown",
) -> pd.DataFrame:
    """One row per profiled kernel (columns `KERNEL_COLUMNS`) from a parsed raw export.

    `arch` defaults to the architecture of the export's compute capability (`CC` column).
    An export with no kernels is an error: the NVTX filter matched nothing, which means the
    step ranges were not emitted under the names `ncu` was told to look for.
    """
    source = raw.attrs.get("source", "<ncu csv>")
    if raw.empty:
        said = raw.attrs.get("ncu_messages") or []
        raise NnperfError(
            f"{source}: no kernels in the export; ncu found no kernel inside the NVTX ranges "
            f"{ranges.STEP_RANGE!r} / {ranges.CALIBRATION_RANGE!r} (start/end ranges)"
            + (f"; ncu said: {' | '.join(said)}" if said else "")
        )
    if arch is None:
        arch = arch_of_export(raw)
    mset = metrics.metric_set(arch)
    missing = [name for name in mset.metrics() if name not in raw.columns]
    if missing:
        raise NnperfError(
            f"{source}: metrics of the {mset.arch} set missing from the export: {', '.join(missing)}"
        )
    raw_csv.check_values(raw, mset.metrics())
    quantities = metrics.kernel_quantities(raw, mset, precision=config.get("precision"))
    nvtx = (
        raw["nvtx_start_end"] if "nvtx_start_end" in raw.columns else pd.Series("", index=raw.index)
    )
    phases = [ranges.phase_of(cell) for cell in nvtx]
    table = pd.DataFrame({key: config[key] for key in CONFIG_KEYS}, index=raw.index)
    table["kernel_index"] = raw["id"].to_numpy()
    table["kernel_name"] = raw["kernel_name"].to_numpy()
    table["phase"] = phases
    table["kind"] = [classify_kernel(n, p) for n, p in zip(raw["kernel_name"], phases)]
    table = pd.concat([table, quantities], axis=1)
    table["arch"] = mset.arch
    table["cc"] = raw["cc"].to_numpy() if "cc" in raw.columns else ""
    table["clock_control"] = clock_control
    return table.loc[:, list(KERNEL_COLUMNS)].reset_index(drop=True)


# --------------------------------------------------------------------------------------------
# From files.
# --------------------------------------------------------------------------------------------
def profile_context(path: str | os.PathLike) -> dict:
    """Configuration keys, `arch` and `clock_control` of one profile, from its meta or request.

    The meta (`.ncu.json` of `nnperf ncu-command profile --request`) has all three; a
    `ProfileStepRequest` JSON has the keys only (the architecture then comes from the
    export's CC column, the clock control is "unknown").
    """
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        document = None  # read_json below says what is wrong
    if isinstance(document, dict) and "run" in document:  # a request: {"run": {...}, ...}
        run = read_request(ProfileStepRequest, path).run
        keys = {key: getattr(run, key) for key in CONFIG_KEYS}
        return {**keys, "arch": None, "clock_control": "unknown"}
    meta = read_json(path)
    missing = [key for key in CONFIG_KEYS if key not in meta]
    if missing:
        raise NnperfError(
            f"{path}: the meta names no {missing[0]!r}; allowed: the .ncu.json of "
            "`nnperf ncu-command profile --request FILE`, or that request JSON"
        )
    arch = meta.get("arch")
    if arch is not None and arch not in metrics.ARCHITECTURES:
        raise NnperfError(
            f"{path}: arch {arch!r} is unknown; allowed: {', '.join(metrics.ARCHITECTURES)}"
        )
    keys = {key: meta[key] for key in CONFIG_KEYS}
    return {**keys, "arch": arch, "clock_control": meta.get("clock_control", "unknown")}


def table_from_files(
    csv_path: str | os.PathLike, context_path: str | os.PathLike, arch: str | None = None
) -> pd.DataFrame:
    """The kernels of one raw-page export, keyed by its meta or request (`profile_context`).

    The architecture is the meta's, else `arch`, else the export's CC column. ncu's own
    warnings in the export are printed verbatim (to the job's log).
    """
    context = profile_context(context_path)
    arch = context["arch"] or (metrics.metric_set(arch).arch if arch else None)
    if arch is None:
        first = raw_csv.read_raw_csv(csv_path)
        arch = arch_of_export(first) if not first.empty else None
    # With the set's metrics required, a missing column or a bad value names its file and line.
    required = metrics.metric_set(arch).metrics() if arch is not None else ()
    raw = raw_csv.read_raw_csv(csv_path, required=required)
    for message in raw.attrs.get("ncu_messages", []):
        print(f"{csv_path}: ncu said: {message}")
    return kernels_table(raw, context, arch=arch, clock_control=context["clock_control"])


def write_table(
    profiles: Iterable[tuple[str | os.PathLike, str | os.PathLike]],
    out: str | os.PathLike,
    arch: str | None = None,
) -> pd.DataFrame:
    """`results/tables/kernels.csv` from (CSV export, meta or request) pairs; `arch` names
    the architecture of exports whose meta and CC column do not.

    No profiles is an error: a table of zero kernels would read as "nothing ran on the GPU"
    (the workflow builds this table only when it profiles something).
    """
    profiles = list(profiles)
    if not profiles:
        raise NnperfError(
            "no profiles given; allowed: one or more (raw-page CSV export, its .ncu.json or "
            "request JSON) pairs (`nnperf ncu-kernels --profile CSV META ...`)"
        )
    tables = [table_from_files(csv_path, context, arch) for csv_path, context in profiles]
    frame = pd.concat(tables, ignore_index=True)
    write_csv(out, frame)
    print(f"{len(frame)} kernels from {len(tables)} profiles -> {out}")
    return frame
