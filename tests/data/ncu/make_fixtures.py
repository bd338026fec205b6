"""Writes the hand-made A100 raw-page fixture in this folder (see README.md).

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

from nnperf.ncu import metrics as ncu  # noqa: E402
from nnperf.ncu import ranges, raw_csv  # noqa: E402

CALIB_FLOPS = (
    ranges.CALIBRATION_GEMM_MNK[0]
    * ranges.CALIBRATION_GEMM_MNK[1]
    * ranges.CALIBRATION_GEMM_MNK[2]
    * 2
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
        factor, _ = raw_csv.parse_unit(units[name])
        raw[name] = None if name in na else value / factor
    return raw


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
    step, fwd, bwd, opt = (1, ranges.STEP_RANGE), (2, "forward"), (3, "backward"), (4, "optimizer")
    cal = (0, ranges.CALIBRATION_RANGE)
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
    (HERE / "a100_fp32_resnet18.csv").write_text(ampere_fixture(), encoding="utf-8")
    print("wrote", HERE / "a100_fp32_resnet18.csv")
