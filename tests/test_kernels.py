"""Tests for nnperf.kernels: the kernel-name classifier and the kernels table."""

from __future__ import annotations

from pathlib import Path

import pytest

from nnperf import kernels, ncu
from nnperf.contract import ProfileStepRequest, RunRequest, write_request
from nnperf.errors import NnperfError
from nnperf.files import write_json

DATA = Path(__file__).parent / "data" / "ncu"

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
    csv_path.write_text((DATA / "h100_bf16_resnet18.csv").read_text())
    table = kernels.table_from_files(csv_path, _meta(tmp_path / "m.json", clock_control="base"))
    assert len(table) == 9
    for key, value in KEYS.items():
        assert set(table[key]) == {value}, key
    assert set(table["arch"]) == {"hopper"} and set(table["clock_control"]) == {"base"}
    write_request(tmp_path / "r.json", ProfileStepRequest(run=RunRequest(**KEYS)))
    from_request = kernels.table_from_files(csv_path, tmp_path / "r.json")
    assert set(from_request["arch"]) == {"hopper"}  # from the export's CC column
    assert set(from_request["clock_control"]) == {"unknown"}
    assert from_request.drop(columns="clock_control").equals(table.drop(columns="clock_control"))


def test_write_table_of_no_profiles_is_the_header(tmp_path):
    out = tmp_path / "kernels.csv"
    assert kernels.write_table([], out).empty
    assert out.read_text().strip() == ",".join(kernels.KERNEL_COLUMNS)


def _table(path: Path, precision: str):
    raw = ncu.read_raw_csv(path)
    config = {
        "device": "cuda",
        "model": "resnet18",
        "precision": precision,
        "batch_size": 256,
        "variant": "baseline",
    }
    return kernels.kernels_table(raw, config, clock_control="base")


def test_kernels_table_from_the_h100_fixture():
    table = _table(DATA / "h100_bf16_resnet18.csv", "bf16")
    assert list(table.columns) == list(kernels.KERNEL_COLUMNS)
    assert list(table["kind"]) == [
        "gemm",
        "conv_fwd",
        "batchnorm",
        "elementwise",
        "reduction",
        "conv_dgrad",
        "conv_wgrad",
        "batchnorm",
        "optimizer",
    ]
    assert list(table["phase"]) == [
        "calibration",
        "forward",
        "forward",
        "forward",
        "forward",
        "backward",
        "backward",
        "backward",
        "optimizer",
    ]
    assert set(table["arch"]) == {"hopper"} and set(table["clock_control"]) == {"base"}
    fwd = table.iloc[1]
    assert fwd["flops_tensor"] == pytest.approx(29.6e9)
    assert fwd["flops_total"] == pytest.approx(29.6e9)
    assert fwd["duration_s"] == pytest.approx(61.7e-6)
    assert fwd["peak_flop_s_tensor"] == pytest.approx(540672 * 1.59e9)
    bn = table.iloc[2]
    assert bn["flops_fp32"] == 25690112 + 25690112 + 2 * 51380224


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
    raw = ncu.parse_raw_csv("\n".join(text), "empty.csv")
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
    raw = ncu.read_raw_csv(DATA / "a100_fp32_resnet18.csv").drop(columns=["lts__t_bytes.sum"])
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
