"""Tests for nnperf.ncu.kernels: the kernel-name classifier and the kernels table."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from h100_exports import EXPORTS
from nnperf.core.contract import ProfileStepRequest, RunRequest, write_request
from nnperf.core.errors import NnperfError
from nnperf.core.files import write_json
from nnperf.ncu import kernels
from nnperf.ncu import raw_csv

DATA = Path(__file__).parents[1] / "data" / "ncu"

# Kernel names as cuDNN, cuBLAS(Lt), CUTLASS, ATen and Inductor name them (phase, expected kind).
NAMES = [
    # convolutions with a direction in the name
    (
        "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_"
        "warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn",
        "forward",
        "conv_fwd",
    ),
    (
        "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x16_stage4_"
        "warpsize2x2x1_g1_tensor16x8x8_kernel",
        "forward",
        "conv_fwd",
    ),
    (
        "sm90_xmma_dgrad_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_"
        "warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn",
        "backward",
        "conv_dgrad",
    ),
    (
        "sm86_xmma_wgrad_implicit_gemm_indexed_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize64x64x64_"
        "stage3_warpsize2x2x1_g1_tensor16x8x16_kernel",
        "backward",
        "conv_wgrad",
    ),
    (
        "void cutlass__5x_cudnn::Kernel<cutlass_tensorop_s1688fprop_optimized_tf32_128x128_32x3_nhwc_"
        "align4>(cutlass_tensorop_s1688fprop_optimized_tf32_128x128_32x3_nhwc_align4::Params)",
        "forward",
        "conv_fwd",
    ),
    ("cutlass_tensorop_h16816dgrad_optimized_128x128_32x5_nhwc", "backward", "conv_dgrad"),
    (
        "void cudnn::detail::dgrad_engine<float, 128, 6, 7, 3, 3, 5, false>(int, int, int, "
        "const float *, int, const float *, int, float *, kernel_grad_params, unsigned long long, "
        "int, unsigned long long, int, float, int, int, int)",
        "backward",
        "conv_dgrad",
    ),
    (
        "void cudnn::detail::wgrad_alg0_engine<float, 128, 5, 5, 3, 3, 3, false, 512>(int, int, int, "
        "const float *, int, float *, const float *, kernel_grad_params, unsigned long long, int, "
        "float, int, int, int, int)",
        "backward",
        "conv_wgrad",
    ),
    ("ampere_scudnn_128x64_stridedB_splitK_small_nn_v1", "backward", "conv_wgrad"),
    # convolutions without a direction: the phase decides
    ("ampere_scudnn_128x64_relu_interior_nn_v1", "forward", "conv_fwd"),
    ("ampere_scudnn_128x64_relu_interior_nn_v1", "backward", "conv_dgrad"),
    (
        "void cudnn::detail::implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, "
        "false, true>(int, int, int, const float *, int, float *, const float *, kernel_conv_params, "
        "unsigned long long, int, float, float, int, const float *, const float *, bool, int, int)",
        "forward",
        "conv_fwd",
    ),
    (
        "void cudnn::winograd_nonfused::winogradForwardFilter4x4<float, float>(cudnn::winograd_"
        "nonfused::WinogradFilterParams<float, float>)",
        "forward",
        "conv_fwd",
    ),
    (
        "void fft2d_r2c_32x32<float, false, 1u, false>(float2 *, const float *, int, int, int, int, "
        "int, int, int, int, int, cudnn::reduced_divisor, bool, int2, int, int)",
        "forward",
        "conv_fwd",
    ),
    # GEMMs
    ("ampere_sgemm_128x64_nn", "forward", "gemm"),
    ("volta_sgemm_128x64_tn", "backward", "gemm"),
    ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x3_tn", "forward", "gemm"),
    (
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_"
        "segment_k_off_kernel__5x_cublas",
        "forward",
        "gemm",
    ),
    ("nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "backward", "gemm"),
    (
        "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8>"
        "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8::Params)",
        "forward",
        "gemm",
    ),
    (
        "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false, "
        "cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<const float>, "
        "cublasGemvTensorStridedBatched<const float>, cublasGemvTensorStridedBatched<float>, float>>"
        "(T13, T6, T6)",
        "backward",
        "gemm",
    ),
    (
        "void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false, false, "
        "false>(cublasLt::cublasSplitKParams<float>, const float *, const float *, float *, "
        "const float *, const float *, const float *, const float *, float *, void *, long, float *, "
        "int *)",
        "backward",
        "gemm",
    ),
    # batch-norm
    (
        "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>(cudnnTensorStruct, "
        "const float *, cudnnTensorStruct, float *, const float *, const float *, float, float, "
        "float *, float *, float *, float *, float, float)",
        "forward",
        "batchnorm",
    ),
    (
        "void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 512, true, 1, true>(float, float, "
        "float, float, cudnnTensorStruct, const float *, cudnnTensorStruct, const float *, "
        "cudnnTensorStruct, float *, const float *, float *, float *, const float *, const float *, "
        "float)",
        "backward",
        "batchnorm",
    ),
    (
        "void at::native::batch_norm_collect_statistics_kernel<at::native::InvStd, float, float, "
        "float, int>(at::GenericPackedTensorAccessor<const float, 3, at::RestrictPtrTraits, int>, "
        "float, float, at::GenericPackedTensorAccessor<float, 1, at::RestrictPtrTraits, int>, "
        "at::GenericPackedTensorAccessor<float, 1, at::RestrictPtrTraits, int>)",
        "forward",
        "batchnorm",
    ),
    (
        "void at::native::batch_norm_backward_kernel<float, float, float, int>(...)",
        "backward",
        "batchnorm",
    ),
    # elementwise, reductions, copies
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
        "launch_clamp_scalar(at::TensorIteratorBase &, c10::Scalar, c10::Scalar, at::native::detail::"
        "ClampLimits)::{lambda()#1}::operator ()() const::{lambda()#7}::operator ()() const::"
        "{lambda(float)#1}, at::detail::Array<char *, 2>>(int, T2, T3)",
        "forward",
        "elementwise",
    ),
    (
        "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<"
        "at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float>>>"
        "(at::TensorIteratorBase &, const T1 &)::{lambda(int)#1}>(int, T3)",
        "backward",
        "elementwise",
    ),
    (
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, "
        "float, float, float>, unsigned int, float, 4, 4>>(T3)",
        "forward",
        "reduction",
    ),
    (
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
        "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(T4 *, const T2 *, int)",
        "forward",
        "reduction",
    ),
    (
        "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, "
        "long>(T1 *, T1 *, const T1 *, const T3 *, const T1 *, bool, long, long, long, long)",
        "forward",
        "reduction",
    ),
    (
        "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>"
        "(cudnn::ops::nchw2nhwc_params_t<float>, const T1 *, T2 *)",
        "forward",
        "copy",
    ),
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::direct_copy_kernel_cuda("
        "at::TensorIteratorBase &)::{lambda()#3}::operator ()() const::{lambda()#7}::operator ()() "
        "const::{lambda(float)#1}, at::detail::Array<char *, 2>>(int, T2, T3)",
        "forward",
        "copy",
    ),
    (
        "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 4, 64, 64>"
        "(T1 *, at::native::(anonymous namespace)::CatArrInputTensorMetadata<T1, T2, 64, 64>, "
        "at::native::(anonymous namespace)::TensorSizeStride<T2, 4u>, int, T2)",
        "forward",
        "copy",
    ),
    ("[CUDA memcpy HtoD]", "forward", "copy"),
    ("Memcpy DtoD (Device -> Device)", "backward", "copy"),
    ("Memset (Device)", "forward", "copy"),
    # optimizers
    (
        "void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::TensorListMetadata"
        "<3>, at::native::<unnamed>::FusedSgdMathFunctor<float, 3>, double, double, double, bool, bool, "
        "bool, const float *, const float *>(T1, T2, T3...)",
        "optimizer",
        "optimizer",
    ),
    (
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
        "namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor"
        "<float, 2, 2, 0>, std::plus<float>, float>(T1, T2, T3...)",
        "optimizer",
        "optimizer",
    ),
    # for-loop optimizer: plain elementwise kernels in the optimizer phase
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
        "at::detail::Array<char *, 3>>(int, T2, T3)",
        "optimizer",
        "optimizer",
    ),
    (
        "void at::native::amp_update_scale_cuda_kernel(float *, int *, const float *, double, double, "
        "int)",
        "optimizer",
        "optimizer",
    ),
    # torch.compile (Inductor) Triton kernels name the ops they fused
    ("triton_poi_fused__native_batch_norm_legit_functional_relu_0", "forward", "elementwise"),
    ("triton_red_fused__native_batch_norm_legit_functional_1", "forward", "reduction"),
    ("triton_per_fused_convolution_backward_native_batch_norm_backward_3", "backward", "reduction"),
    ("triton_tem_fused_addmm_0", "forward", "gemm"),
    # other
    (
        "void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int, const T1 *, "
        "long, long, long, int, int, int, int, int, int, int, int, int, int, T1 *, long *)",
        "forward",
        "other",
    ),
]


@pytest.mark.parametrize("name, phase, kind", NAMES)
def test_classify_real_kernel_names(name, phase, kind):
    assert kernels.classify_kernel(name, phase) == kind


def test_kinds_have_labels_and_are_the_issue_list():
    assert set(kernels.KIND_LABELS) == set(kernels.KINDS)
    assert kernels.KIND_LABELS["conv_dgrad"] == "conv data-grad"
    assert kernels.classify_kernel("", None) == "other"


KEYS = {
    "device": "cuda",
    "model": "resnet18_cifar",
    "precision": "bf16",
    "batch_size": 256,
    "variant": "channels_last",
}


def _meta(path: Path, **fields) -> Path:
    write_json(path, {"kind": "ncu_profile", **KEYS, "arch": "hopper", **fields})
    return path


def test_profile_context_from_the_meta(tmp_path):
    meta = _meta(tmp_path / "anything.json", clock_control="none")
    assert kernels.profile_context(meta) == {**KEYS, "arch": "hopper", "clock_control": "none"}
    write_json(tmp_path / "old.json", {"arch": "hopper", "clock_control": "base"})
    with pytest.raises(NnperfError, match=r"old\.json: the meta names no 'device'; allowed: "):
        kernels.profile_context(tmp_path / "old.json")
    with pytest.raises(NnperfError, match=r"arch 'kepler' is unknown; allowed: volta, ampere"):
        kernels.profile_context(_meta(tmp_path / "kepler.json", arch="kepler"))


def test_profile_context_from_the_request(tmp_path):
    run = RunRequest(**KEYS)
    write_request(tmp_path / "r.json", ProfileStepRequest(run=run))
    assert kernels.profile_context(tmp_path / "r.json") == {
        **KEYS,
        "arch": None,
        "clock_control": "unknown",
    }


def test_keys_come_from_the_meta_not_the_path(tmp_path):
    """The CSV sits where no path pattern could read keys from it."""
    csv_path = tmp_path / "export.csv"
    csv_path.write_text(EXPORTS["bf16_bs256_tuned"].text())
    table = kernels.table_from_files(csv_path, _meta(tmp_path / "m.json", clock_control="base"))
    assert len(table) == 345
    for key, value in KEYS.items():
        assert set(table[key]) == {value}, key
    assert set(table["arch"]) == {"hopper"} and set(table["clock_control"]) == {"base"}
    write_request(tmp_path / "r.json", ProfileStepRequest(run=RunRequest(**KEYS)))
    from_request = kernels.table_from_files(csv_path, tmp_path / "r.json")
    assert set(from_request["arch"]) == {"hopper"}  # from the export's CC column
    assert set(from_request["clock_control"]) == {"unknown"}
    assert from_request.drop(columns="clock_control").equals(table.drop(columns="clock_control"))


def test_write_table_of_no_profiles_is_refused(tmp_path):
    out = tmp_path / "kernels.csv"
    with pytest.raises(NnperfError, match=r"^no profiles given; allowed: one or more"):
        kernels.write_table([], out)
    assert not out.exists()


def test_ncu_warnings_in_an_export_are_shown_verbatim(tmp_path, capsys):
    lines = EXPORTS["bf16_bs256_tuned"].text().splitlines()
    warning = "==WARNING== Backing up device memory in system memory. Kernel replay might be slow."
    csv_path = tmp_path / "export.csv"
    csv_path.write_text("\n".join([warning, *lines]) + "\n")
    kernels.table_from_files(csv_path, _meta(tmp_path / "m.json", clock_control="base"))
    assert f"{csv_path}: ncu said: {warning}" in capsys.readouterr().out


# ------------------------------------------------------------------ the real H100 exports
@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_real_exports_kernel_counts_per_phase(name):
    export = EXPORTS[name]
    table = export.kernels()
    assert table.groupby("phase").size().to_dict() == export.kernels_per_phase
    assert len(table[table["phase"] != "calibration"]) == export.step_kernels
    assert set(table["arch"]) == {"hopper"} and set(table["cc"]) == {"9.0"}
    assert (table["duration_s"] > 0).all() and table["flops_total"].notna().all()


def test_real_bf16_tensor_roof_is_the_dense_rate_per_sm_and_cycle():
    """The H100 exports say 8192 bf16 FLOP per SM per cycle (the 2:4-sparse rate); the roof
    must be the dense 4096 (H100 SXM: 989.4 TFLOP/s = 132 SMs x 1.83 GHz x 4096)."""
    table = EXPORTS["bf16_bs256_tuned"].kernels()
    per_sm_cycle = table["peak_flop_s_tensor"] / table["clock_hz"] / 132
    assert per_sm_cycle.round(6).unique().tolist() == [4096.0]


def test_real_fp32_roof_is_the_ffma_pipe():
    table = EXPORTS["fp32_bs256_baseline"].kernels()
    assert table["peak_flop_s_tensor"].isna().all()
    # 128 FFMA per SM per cycle x 2 FLOPs x 132 SMs at each kernel's clock
    per_sm_cycle = table["peak_flop_s_fp32"] / table["clock_hz"] / 132
    assert per_sm_cycle.round(6).unique().tolist() == [256.0]


def test_real_triton_fused_export_kinds():
    """torch.compile fuses batch-norm into Triton kernels: no batch-norm kernel is left; its
    pointwise kernels are elementwise, its reductions reductions, its bare casts copies, and
    the convolutions and GEMMs stay cuDNN's and cuBLAS's."""
    table = EXPORTS["bf16_bs256_cudagraphs"].kernels()
    step = table[table["phase"] != "calibration"]
    names = step["kernel_name"]
    kinds = step["kind"]
    assert "batchnorm" not in set(kinds)
    assert set(kinds[names.str.startswith("triton_poi_fused__to_copy_")]) == {"copy"}
    poi = names.str.startswith("triton_poi_") & ~names.str.startswith("triton_poi_fused__to_copy_")
    assert set(kinds[poi]) == {"elementwise"}
    assert set(kinds[names.str.match(r"triton_(red|per)_")]) == {"reduction"}
    assert {"conv_fwd", "conv_dgrad", "conv_wgrad", "gemm", "optimizer"} <= set(kinds)
    counts = kinds.value_counts().to_dict()
    # Pinned from the real export, so a classifier change shows up here.
    assert counts == {
        "reduction": 114,
        "elementwise": 60,
        "copy": 50,
        "conv_wgrad": 24,
        "conv_fwd": 20,
        "conv_dgrad": 19,
        "other": 6,  # cuDNN's init_device_workspace_kernel
        "gemm": 4,
        "optimizer": 2,
    }


def test_eager_export_kinds_cover_the_step():
    table = EXPORTS["bf16_bs256_tuned"].kernels()
    step = table[table["phase"] != "calibration"]
    shares = step.groupby("kind")["duration_s"].sum() / step["duration_s"].sum()
    assert shares["batchnorm"] == pytest.approx(0.325, abs=0.01)  # the largest kind in eager
    assert shares.get("other", 0) < 0.01  # only cuDNN's workspace initialisation is unnamed


def test_export_without_cc_column_says_what_it_is_and_how_to_read_it(tmp_path):
    """Raw pages of Nsight Compute before 2021 have no CC column (nor Block/Grid Size, Device)."""
    raw = raw_csv.read_raw_csv(DATA / "a100_fp32_resnet18.csv").drop(columns=["cc"])
    with pytest.raises(NnperfError) as info:
        kernels.arch_of_export(raw)
    message = str(info.value)
    assert message.startswith(
        f"{DATA / 'a100_fp32_resnet18.csv'}: the export has no CC (compute capability) column"
    )
    assert "nnperf ncu-kernels --arch volta|ampere|ada|hopper" in message
    assert "ncu --import " in message and "--page raw" in message
    # Given the architecture, the same export is read in full.
    rows = list(csv.reader(io.StringIO((DATA / "a100_fp32_resnet18.csv").read_text())))
    keep = [i for i, name in enumerate(rows[0]) if name not in ("CC", "Device")]
    old = tmp_path / "old.csv"
    with old.open("w", newline="") as handle:
        writer = csv.writer(handle, quoting=csv.QUOTE_ALL, lineterminator="\n")
        writer.writerows([[row[i] for i in keep] for row in rows])
    keyless = tmp_path / "keys.json"
    write_json(keyless, {**KEYS, "precision": "fp32"})
    with pytest.raises(NnperfError, match="no CC"):
        kernels.table_from_files(old, keyless)
    table = kernels.table_from_files(old, keyless, arch="ampere")
    assert len(table) == 7 and set(table["arch"]) == {"ampere"}


def _table(path: Path, precision: str):
    raw = raw_csv.read_raw_csv(path)
    config = {
        "device": "cuda",
        "model": "resnet18",
        "precision": precision,
        "batch_size": 256,
        "variant": "baseline",
    }
    return kernels.kernels_table(raw, config, clock_control="base")


def test_kernels_table_from_a_real_h100_export():
    table = EXPORTS["bf16_bs256_tuned"].kernels()
    assert list(table.columns) == list(kernels.KERNEL_COLUMNS)
    gemm = table.iloc[0]
    assert (gemm["phase"], gemm["kind"]) == ("calibration", "gemm")
    assert gemm["flops_tensor"] == gemm["flops_total"] == 2 * 4096**3
    assert gemm["duration_s"] == pytest.approx(210.688e-6)
    # 8192 x 132 per cycle exported (sparse), halved to the dense rate, at 1.337291 GHz
    assert gemm["peak_flop_s_tensor"] == pytest.approx(8192 * 132 / 2 * 1.337291e9)
    assert set(table["clock_control"]) == {"base"}
    forward = table[table["phase"] == "forward"]
    stem = forward[forward["kernel_name"].str.startswith("void convolve_common_engine")]
    assert set(stem["kind"]) == {"conv_fwd"}  # cuDNN's direct conv of the 3x3 stem
    assert forward.iloc[0]["kind"] == "copy"  # autocast's bf16 cast comes first


def test_kernels_table_from_the_a100_fixture():
    table = _table(DATA / "a100_fp32_resnet18.csv", "fp32")
    assert set(table["arch"]) == {"ampere"}
    assert list(table["kind"]) == [
        "gemm",
        "conv_fwd",
        "batchnorm",
        "conv_dgrad",
        "conv_wgrad",
        "elementwise",
        "optimizer",
    ]
    assert table["flops_tensor"].sum() == 0
    assert table["peak_flop_s_tensor"].isna().all()  # fp32: no tensor-core roof
    assert table.iloc[0]["peak_flop_s_fp32"] == pytest.approx(6912 * 2 * 1.41e9)


def test_empty_export_says_the_ranges_matched_nothing():
    text = (DATA / "a100_fp32_resnet18.csv").read_text().splitlines()[:2]
    raw = raw_csv.parse_raw_csv("\n".join(text), "empty.csv")
    with pytest.raises(NnperfError, match=r"empty\.csv: no kernels in the export.*nnperf_step"):
        kernels.kernels_table(
            raw,
            {
                "device": "cuda",
                "model": "m",
                "precision": "fp32",
                "batch_size": 1,
                "variant": "baseline",
            },
        )


def test_export_missing_a_metric_of_its_arch_is_refused():
    raw = raw_csv.read_raw_csv(DATA / "a100_fp32_resnet18.csv").drop(columns=["lts__t_bytes.sum"])
    with pytest.raises(
        NnperfError, match=r"metrics of the ampere set missing from the export: lts__t_bytes\.sum"
    ):
        kernels.kernels_table(
            raw,
            {
                "device": "cuda",
                "model": "m",
                "precision": "fp32",
                "batch_size": 1,
                "variant": "baseline",
            },
        )
