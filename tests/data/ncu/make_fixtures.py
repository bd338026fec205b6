"""Writes the hand-made raw-page fixtures in this folder (see README.md).

Run from the repository root: `PYTHONPATH=src python tests/data/ncu/make_fixtures.py`.
The numbers are invented but consistent: counters follow from chosen FLOPs, bytes and times,
and the peaks from the chips' published SM counts and base clocks.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # tests/ for ncu_writer

from ncu_writer import START_END, export_text, start_end_cell  # noqa: E402

from nnperf import ncu  # noqa: E402

CALIB_FLOPS = (
    ncu.CALIBRATION_GEMM_MNK[0] * ncu.CALIBRATION_GEMM_MNK[1] * ncu.CALIBRATION_GEMM_MNK[2] * 2
)


def _kernel(kid, name, ranges, metrics, cc, grid="(132, 1, 1)", block="(256, 1, 1)"):
    meta = {
        "ID": str(kid),
        "Process ID": "48213",
        "Process Name": "python3.11",
        "Host Name": "127.0.0.1",
        START_END: start_end_cell(ranges),
        "Kernel Name": name,
        "Context": "1",
        "Stream": "7",
        "Block Size": block,
        "Grid Size": grid,
        "Device": "0",
        "CC": cc,
    }
    return {"meta": meta, "metrics": metrics}


def _counters(
    mset,
    units,
    *,
    time_s,
    fp32=(0, 0, 0),
    fp16=(0, 0, 0),
    fp64=(0, 0, 0),
    tensor=None,
    bytes_=(0, 0, 0),
    clocks,
    peaks,
    na=(),
):
    """Raw counter values (in each column's unit) for one kernel."""
    si = {ncu.TIME_METRIC: time_s}
    for dtype, triple in (("fp32", fp32), ("fp16", fp16), ("fp64", fp64)):
        for name, count in zip(mset.cuda_core[dtype], triple):
            si[name] = count
    for counters in mset.tensor.values():
        for name in counters:
            si[name] = 0
    for name, value in (tensor or {}).items():
        si[name] = value
    for level, value in zip(("dram", "l2", "l1"), bytes_):
        si[mset.bytes[level]] = value
    for unit, value in clocks.items():
        si[mset.clocks[unit]] = value
    si.update(peaks)
    raw = {}
    for name, value in si.items():
        factor, _ = ncu.parse_unit(units[name])
        raw[name] = None if name in na else value / factor
    return raw


def hopper_fixture() -> str:
    mset = ncu.metric_set("hopper")
    # Newer-style abbreviations and auto-scaled prefixes: time in us/ms, clocks in Ghz, bytes in
    # Mbyte/Gbyte/Kbyte, per-cycle peaks in byte/cycle and inst/cycle.
    units = {name: "" for name in mset.metrics()}
    units.update(
        {
            ncu.TIME_METRIC: "us",
            "dram__bytes.sum": "Mbyte",
            "lts__t_bytes.sum": "Mbyte",
            "l1tex__t_bytes.sum": "Gbyte",
            "dram__bytes.sum.peak_sustained": "byte/cycle",
            "lts__t_bytes.sum.peak_sustained": "byte/cycle",
            "l1tex__t_bytes.sum.peak_sustained": "Kbyte/cycle",
            "sm__cycles_elapsed.avg.per_second": "Ghz",
            "dram__cycles_elapsed.avg.per_second": "Mhz",
            "lts__cycles_elapsed.avg.per_second": "Ghz",
            "l1tex__cycles_elapsed.avg.per_second": "Mhz",
        }
    )
    for triple in mset.cuda_core.values():
        for name in triple:
            units[name] = "inst"
    for name in mset.cuda_core_peaks.values():
        units[name] = "inst/cycle"
    clocks = {"sm": 1.59e9, "dram": 2.619e9, "l2": 1.59e9, "l1": 1.59e9}
    peaks = {
        "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained": 16896,
        "sm__sass_thread_inst_executed_op_dfma_pred_on.sum.peak_sustained": 8448,
        "sm__sass_thread_inst_executed_op_hfma_pred_on.sum.peak_sustained": 16896,
        "sm__ops_path_tensor_src_fp16.sum.peak_sustained": 540672,
        "sm__ops_path_tensor_src_bf16_dst_fp32.sum.peak_sustained": 540672,
        "sm__ops_path_tensor_src_tf32_dst_fp32.sum.peak_sustained": 270336,
        "sm__ops_path_tensor_src_fp64.sum.peak_sustained": 33792,
        "dram__bytes.sum.peak_sustained": 1280,
        "lts__t_bytes.sum.peak_sustained": 5120,
        "l1tex__t_bytes.sum.peak_sustained": 16896,
    }
    bf16 = "sm__ops_path_tensor_src_bf16_dst_fp32.sum"
    step, fwd, bwd, opt = (1, ncu.STEP_RANGE), (2, "forward"), (3, "backward"), (4, "optimizer")
    cal = (0, ncu.CALIBRATION_RANGE)
    c = dict(clocks=clocks, peaks=peaks)
    kernels = [
        _kernel(
            0,
            "nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NNT",
            [cal],
            _counters(
                mset,
                units,
                time_s=172.4e-6,
                tensor={bf16: CALIB_FLOPS * 1.0006},
                fp32=(0, 16777216, 0),
                bytes_=(104.9e6, 1.95e9, 8.6e9),
                **c,
            ),
            "9.0",
        ),
        _kernel(
            1,
            "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_"
            "warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn",
            [step, fwd],
            _counters(
                mset,
                units,
                time_s=61.7e-6,
                tensor={bf16: 29.6e9},
                bytes_=(92.1e6, 611.4e6, 2.3e9),
                **c,
            ),
            "9.0",
        ),
        _kernel(
            2,
            "void cudnn::bn_fw_tr_1C11_kernel_NHWC<__nv_bfloat16, float, int, 512, true, 1>"
            "(cudnnTensorStruct, const __nv_bfloat16 *, cudnnTensorStruct, __nv_bfloat16 *, "
            "const float *, const float *, float, float, float *, float *, float *, float *, "
            "float, float)",
            [step, fwd],
            _counters(
                mset,
                units,
                time_s=38.2e-6,
                fp32=(25690112, 25690112, 51380224),
                bytes_=(102.8e6, 104.1e6, 105.3e6),
                **c,
            ),
            "9.0",
        ),
        _kernel(
            3,
            "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
            "launch_clamp_scalar(at::TensorIteratorBase &, c10::Scalar, c10::Scalar, "
            "at::native::detail::ClampLimits)::{lambda()#1}::operator ()() const::{lambda()#14}::"
            "operator ()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char *, 2>>"
            "(int, T2, T3)",
            [step, fwd],
            _counters(
                mset,
                units,
                time_s=21.3e-6,
                fp32=(0, 0, 0),
                bytes_=(51.4e6, 51.4e6, 51.6e6),
                na=("sm__ops_path_tensor_src_fp64.sum",),
                **c,
            ),
            "9.0",
        ),
        _kernel(
            4,
            "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
            "at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::"
            "operator ()(at::TensorIterator &)::{lambda(float, float)#1}>, unsigned int, float, 4, 4>>(T3)",
            [step, fwd],
            _counters(
                mset, units, time_s=4.1e-6, fp32=(256000, 0, 0), bytes_=(1.1e6, 1.2e6, 1.3e6), **c
            ),
            "9.0",
            grid="(1, 1, 1)",
            block="(32, 16, 1)",
        ),
        _kernel(
            5,
            "sm90_xmma_dgrad_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_"
            "warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn",
            [step, bwd],
            _counters(
                mset,
                units,
                time_s=66.0e-6,
                tensor={bf16: 29.6e9},
                bytes_=(95.7e6, 640.2e6, 2.4e9),
                **c,
            ),
            "9.0",
        ),
        _kernel(
            6,
            "sm90_xmma_wgrad_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_"
            "warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn",
            [step, bwd],
            _counters(
                mset,
                units,
                time_s=70.9e-6,
                tensor={bf16: 29.6e9},
                bytes_=(110.3e6, 702.5e6, 2.6e9),
                **c,
            ),
            "9.0",
        ),
        _kernel(
            7,
            "void cudnn::bn_bw_1C11_kernel_new<__nv_bfloat16, float, float2, 512, true, 1, true>"
            "(__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, cudnnTensorStruct, "
            "const __nv_bfloat16 *, cudnnTensorStruct, const __nv_bfloat16 *, cudnnTensorStruct, "
            "__nv_bfloat16 *, const float *, float *, float *, const float *, const float *, float)",
            [step, bwd],
            _counters(
                mset,
                units,
                time_s=55.8e-6,
                fp32=(51380224, 25690112, 77070336),
                bytes_=(154.2e6, 156.0e6, 158.4e6),
                **c,
            ),
            "9.0",
        ),
        _kernel(
            8,
            "void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::"
            "TensorListMetadata<3>, at::native::<unnamed>::FusedSgdMathFunctor<float, 3>, double, "
            "double, double, bool, bool, bool, const float *, const float *>(T1, T2, T3...)",
            [step, opt],
            _counters(
                mset,
                units,
                time_s=48.6e-6,
                fp32=(23379040, 11689520, 23379040),
                bytes_=(187.0e6, 187.2e6, 187.5e6),
                **c,
            ),
            "9.0",
        ),
    ]
    preamble = []  # `ncu --import` prints no banner; the parser tests add ==PROF== lines
    return export_text(kernels, units, preamble=preamble)


def ampere_fixture() -> str:
    mset = ncu.metric_set("ampere")
    # Older-style spellings: nsecond/usecond, cycle/nsecond, Kbyte/Mbyte.
    units = {name: "" for name in mset.metrics()}
    units.update(
        {
            ncu.TIME_METRIC: "usecond",
            "dram__bytes.sum": "Mbyte",
            "lts__t_bytes.sum": "Mbyte",
            "l1tex__t_bytes.sum": "Mbyte",
            "dram__bytes.sum.peak_sustained": "byte/cycle",
            "lts__t_bytes.sum.peak_sustained": "byte/cycle",
            "l1tex__t_bytes.sum.peak_sustained": "Kbyte/cycle",
            "sm__cycles_elapsed.avg.per_second": "cycle/nsecond",
            "dram__cycles_elapsed.avg.per_second": "cycle/usecond",
            "lts__cycles_elapsed.avg.per_second": "cycle/nsecond",
            "l1tex__cycles_elapsed.avg.per_second": "cycle/nsecond",
        }
    )
    for triple in mset.cuda_core.values():
        for name in triple:
            units[name] = "inst"
    for name in mset.cuda_core_peaks.values():
        units[name] = "inst/cycle"
    clocks = {"sm": 1.41e9, "dram": 1.215e9, "l2": 1.41e9, "l1": 1.41e9}
    peaks = {
        "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained": 6912,
        "sm__sass_thread_inst_executed_op_dfma_pred_on.sum.peak_sustained": 3456,
        "sm__sass_thread_inst_executed_op_hfma_pred_on.sum.peak_sustained": 13824,
        "sm__ops_path_tensor_src_fp16_dst_fp32_sparsity_off.sum.peak_sustained": 221184,
        "sm__ops_path_tensor_src_bf16_dst_fp32_sparsity_off.sum.peak_sustained": 221184,
        "sm__ops_path_tensor_src_tf32_dst_fp32_sparsity_off.sum.peak_sustained": 110592,
        "sm__ops_path_tensor_src_fp64.sum.peak_sustained": 13824,
        "dram__bytes.sum.peak_sustained": 1280,
        "lts__t_bytes.sum.peak_sustained": 5120,
        "l1tex__t_bytes.sum.peak_sustained": 13824,
    }
    step, fwd, bwd, opt = (1, ncu.STEP_RANGE), (2, "forward"), (3, "backward"), (4, "optimizer")
    cal = (0, ncu.CALIBRATION_RANGE)
    c = dict(clocks=clocks, peaks=peaks)
    half = CALIB_FLOPS // 2  # FFMA instructions of the fp32 calibration GEMM
    kernels = [
        _kernel(
            0,
            "ampere_sgemm_128x64_nn",
            [cal],
            _counters(
                mset,
                units,
                time_s=9.61e-3,
                fp32=(0, 0, half * 1.0004),
                bytes_=(201.3e6, 4.3e9, 36.2e9),
                **c,
            ),
            "8.0",
            grid="(32, 64, 1)",
        ),
        _kernel(
            1,
            "ampere_scudnn_128x64_relu_interior_nn_v1",
            [step, fwd],
            _counters(
                mset, units, time_s=2.21e-3, fp32=(0, 0, 14.8e9), bytes_=(88.1e6, 1.2e9, 9.7e9), **c
            ),
            "8.0",
        ),
        _kernel(
            2,
            "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>"
            "(cudnnTensorStruct, const float *, cudnnTensorStruct, float *, const float *, "
            "const float *, float, float, float *, float *, float *, float *, float, float)",
            [step, fwd],
            _counters(
                mset,
                units,
                time_s=171.0e-6,
                fp32=(25690112, 25690112, 51380224),
                bytes_=(205.6e6, 207.1e6, 208.3e6),
                **c,
            ),
            "8.0",
        ),
        _kernel(
            3,
            "void cudnn::detail::dgrad_engine<float, 128, 6, 7, 3, 3, 5, false>(int, int, int, "
            "const float *, int, const float *, int, float *, kernel_grad_params, unsigned long long, "
            "int, unsigned long long, int, float, int, int, int)",
            [step, bwd],
            _counters(
                mset,
                units,
                time_s=2.52e-3,
                fp32=(0, 0, 14.8e9),
                bytes_=(97.4e6, 1.4e9, 10.9e9),
                **c,
            ),
            "8.0",
        ),
        _kernel(
            4,
            "ampere_scudnn_128x64_stridedB_splitK_small_nn_v1",
            [step, bwd],
            _counters(
                mset,
                units,
                time_s=2.88e-3,
                fp32=(0, 0, 14.8e9),
                bytes_=(131.0e6, 1.6e9, 11.8e9),
                **c,
            ),
            "8.0",
        ),
        _kernel(
            5,
            "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
            "at::detail::Array<char *, 3>>(int, T2, T3)",
            [step, bwd],
            _counters(
                mset,
                units,
                time_s=112.0e-6,
                fp32=(25690112, 0, 0),
                bytes_=(308.3e6, 308.5e6, 308.9e6),
                na=("sm__ops_path_tensor_src_fp64.sum",),
                **c,
            ),
            "8.0",
        ),
        _kernel(
            6,
            "void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::"
            "TensorListMetadata<3>, at::native::<unnamed>::FusedSgdMathFunctor<float, 3>, double, "
            "double, double, bool, bool, bool, const float *, const float *>(T1, T2, T3...)",
            [step, opt],
            _counters(
                mset,
                units,
                time_s=131.5e-6,
                fp32=(23379040, 11689520, 23379040),
                bytes_=(187.0e6, 187.2e6, 187.5e6),
                **c,
            ),
            "8.0",
        ),
    ]
    return export_text(kernels, units)


if __name__ == "__main__":
    (HERE / "h100_bf16_resnet18.csv").write_text(hopper_fixture(), encoding="utf-8")
    (HERE / "a100_fp32_resnet18.csv").write_text(ampere_fixture(), encoding="utf-8")
    print("wrote", HERE / "h100_bf16_resnet18.csv", HERE / "a100_fp32_resnet18.csv")
