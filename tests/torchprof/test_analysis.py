"""The trace analysis: interval unions, self times, operators and layers, busy time, verdicts.

Traces are hand-built (tests/op_traces.py), so every expected number is computed by hand.
"""

from __future__ import annotations

import gzip
import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nnperf.core.errors import NnperfError
from nnperf.torchprof import analysis as operators
from nnperf.torchprof import breakdown, events
from op_traces import cpu_trace, cuda_trace

US = 1e-6


# --- intervals ---------------------------------------------------------------------------


def test_merge_intervals_joins_overlapping_and_touching_and_drops_empty():
    merged = operators.merge_intervals([(5, 7), (0, 2), (1, 3), (3, 4), (9, 9), (8, 6)])
    assert merged == [(0, 4), (5, 7)]


@pytest.mark.parametrize(
    ("intervals", "low", "high", "length"),
    [
        ([(0, 10), (5, 15), (20, 30)], -math.inf, math.inf, 25),  # 15 + 10
        ([(0, 10), (5, 15), (20, 30)], 12, 25, 8),  # [12,15) + [20,25)
        ([(0, 1)], 1, 2, 0),
        ([], 0, 10, 0),
    ],
)
def test_union_length_hand_computed(intervals, low, high, length):
    assert operators.union_length(intervals, low, high) == pytest.approx(length)


def test_intersect_intervals_hand_computed():
    a = [(0, 10), (20, 30)]
    b = [(5, 25), (28, 40)]
    assert operators.intersect_intervals(a, b) == [(5, 10), (20, 25), (28, 30)]


interval = st.tuples(st.integers(0, 60), st.integers(0, 60))


@given(st.lists(interval, max_size=12), st.integers(0, 60), st.integers(0, 60))
def test_union_length_is_the_count_of_covered_points(intervals, low, high):
    """On an integer grid, the union's length is the number of unit cells any interval
    covers (brute force), clipped to [low, high)."""
    covered = {x for s, e in intervals for x in range(s, e) if low <= x < high}
    assert operators.union_length(intervals, low, high) == pytest.approx(len(covered))


@given(st.lists(interval, max_size=12))
def test_union_is_disjoint_sorted_and_order_free(intervals):
    merged = operators.merge_intervals(intervals)
    assert all(s < e for s, e in merged)
    assert all(a[1] < b[0] for a, b in zip(merged, merged[1:]))
    assert merged == operators.merge_intervals(reversed(intervals))
    assert operators.merge_intervals(merged) == merged
    lengths = [e - s for s, e in intervals if e > s]
    total = operators.union_length(intervals)
    assert total <= sum(lengths) + 1e-9
    assert total >= max(lengths, default=0) - 1e-9


# --- verdicts ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("share", "kind", "verdict"),
    [
        (0.95, operators.BUSY_DEVICE, "device-bound"),
        (0.9, operators.BUSY_DEVICE, "device-bound"),
        (0.8, operators.BUSY_DEVICE, "mixed"),
        (0.64, operators.BUSY_DEVICE, "host-bound"),  # eager bf16 ResNet-18 on the H100
        (0.97, operators.BUSY_HOST, "operator-bound"),
        (0.5, operators.BUSY_HOST, "overhead-bound"),
        (None, operators.BUSY_DEVICE, None),
    ],
)
def test_bound_thresholds(share, kind, verdict):
    assert operators.bound(share, kind) == verdict


def test_busy_share_needs_a_wall_time():
    assert operators.busy_share(6.7, 10.4) == pytest.approx(0.644, abs=1e-3)
    assert operators.busy_share(1.0, 0.0) is None


# --- a CPU trace -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cpu():
    return operators.analyse(cpu_trace(steps=2), "cpu")


def test_steps_tile_the_window_and_phases_are_the_ranges(cpu):
    steps = cpu.steps
    assert list(steps["step"]) == [0, 1]
    assert steps["step_time_s"].to_list() == pytest.approx([100 * US, 100 * US])
    row = steps.iloc[0]
    assert (row["data_wait_s"], row["h2d_s"], row["forward_s"]) == pytest.approx(
        (10 * US, 5 * US, 35 * US)
    )
    assert (row["backward_s"], row["optimizer_s"], row["input_time_s"]) == pytest.approx(
        (40 * US, 8 * US, 15 * US)
    )


def test_cpu_busy_is_the_union_of_top_level_operators(cpu):
    row = cpu.steps.iloc[1]
    # conv2d 11, cross_entropy 8, the two autograd nodes 6 + 20, AccumulateGrad 4, stack 4,
    # to 3, add_ 3: nested operators are inside these.
    assert row["host_operator_time_s"] == pytest.approx(59 * US)
    assert row["busy_kind"] == operators.BUSY_HOST
    assert row["busy_share"] == pytest.approx(0.59)
    assert math.isnan(row["device_busy_time_s"]) and math.isnan(row["host_dispatch_time_s"])
    assert cpu.summary["bound"] == operators.OVERHEAD_BOUND
    assert cpu.summary["busy_share"] == pytest.approx(0.59)
    assert cpu.summary["input_share"] == pytest.approx(0.15)


def test_operator_self_times_hand_computed(cpu):
    table = cpu.operators.set_index("operator")
    expected_us = {
        "aten::convolution_backward": 16,
        "aten::cross_entropy_loss": 8,
        "aten::mkldnn_convolution": 7,
        "aten::conv2d": 2,  # 11 minus aten::convolution's 9
        "aten::convolution": 2,
        "autograd::engine::evaluate_function: ConvolutionBackward0": 4,
        "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad": 4,
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__": 4,
        "Optimizer.step#SGD.step": 3,
        breakdown.OUTSIDE_OPERATORS_ROW: 34,
    }
    for name, micros in expected_us.items():
        assert table.at[name, "host_self_time_s"] == pytest.approx(micros * US), name
    assert table.at["aten::conv2d", "host_total_time_s"] == pytest.approx(11 * US)
    assert table.at["aten::add_", "calls_per_step"] == 1
    assert table.at["Optimizer.step#SGD.step", "kind"] == "range"
    assert table.at["aten::mkldnn_convolution", "input_shapes"] == "2x3x32x32, 8x3x3x3"
    assert table.at["aten::convolution_backward", "host_self_share"] == pytest.approx(0.16)
    assert table["device_self_time_s"].isna().all()
    # Every microsecond of a single-threaded step is in exactly one row.
    assert table["host_self_time_s"].sum() == pytest.approx(100 * US)
    # Sorted by host self time, most first.
    assert list(cpu.operators["host_self_time_s"]) == sorted(
        cpu.operators["host_self_time_s"], reverse=True
    )


def test_layers_group_forward_and_backward_by_module_path(cpu):
    table = cpu.layers.set_index("layer")
    conv = table.loc["features.conv"]
    # forward: its range's own 2 + conv2d 2 + convolution 2 + mkldnn 7; backward: the
    # ConvolutionBackward0 node (same sequence number as conv2d) 4 + convolution_backward 16.
    assert conv["forward_host_time_s"] == pytest.approx(13 * US)
    assert conv["backward_host_time_s"] == pytest.approx(20 * US)
    assert conv["host_time_s"] == pytest.approx(33 * US)
    assert conv["forward_calls_per_step"] == 1
    loss = table.loc[events.LOSS_MODULE]
    assert (loss["forward_host_time_s"], loss["backward_host_time_s"]) == pytest.approx(
        (10 * US, 6 * US)
    )
    for name, micros in {
        events.ROOT_MODULE: 5,
        events.INPUT_ROW: 15,
        events.OPTIMIZER_ROW: 8,
        events.GRADIENT_ACCUMULATION_ROW: 4,
        events.FORWARD_OTHER_ROW: 7,
        events.BACKWARD_OTHER_ROW: 10,
        events.OUTSIDE_PHASES_ROW: 2,
    }.items():
        assert table.at[name, "host_time_s"] == pytest.approx(micros * US), name
    assert table["host_time_s"].sum() == pytest.approx(100 * US)
    assert cpu.layers.iloc[0]["layer"] == "features.conv"


def test_layer_depth_cuts_module_paths():
    shallow = operators.analyse(cpu_trace(steps=1), "cpu", depth=1).layers.set_index("layer")
    assert "features" in shallow.index and "features.conv" not in shallow.index
    assert shallow.at["features", "host_time_s"] == pytest.approx(33 * US)
    assert breakdown.layer_name("layer1.0.conv1", 2) == "layer1.0"
    assert breakdown.layer_name(events.OPTIMIZER_ROW, 1) == events.OPTIMIZER_ROW


def test_module_types_label_the_layers():
    layers = operators.analyse(
        cpu_trace(steps=1), "cpu", module_types={"features.conv": "Conv2d"}
    ).layers.set_index("layer")
    assert layers.at["features.conv", "module_type"] == "Conv2d"


# --- a CUDA-like trace -------------------------------------------------------------------


@pytest.fixture(scope="module")
def cuda():
    return operators.analyse(cuda_trace(), "cuda")


def test_device_busy_is_the_union_of_kernels_in_the_step(cuda):
    row = cuda.steps.iloc[0]
    assert row["device_busy_time_s"] == pytest.approx(42 * US)
    assert row["device_busy_share"] == pytest.approx(0.42)
    assert row["device_events"] == 3
    assert row["busy_kind"] == operators.BUSY_DEVICE
    assert cuda.summary["bound"] == operators.HOST_BOUND


def test_host_dispatch_is_operator_time_less_synchronising_calls(cuda):
    row = cuda.steps.iloc[0]
    assert row["host_operator_time_s"] == pytest.approx(44 * US)
    assert row["sync_wait_time_s"] == pytest.approx(6 * US)
    assert row["host_dispatch_time_s"] == pytest.approx(38 * US)
    assert row["launch_time_s"] == pytest.approx(8 * US)


def test_kernels_belong_to_the_operator_that_launched_them(cuda):
    table = cuda.operators.set_index("operator")
    assert table.at["aten::addmm", "device_self_time_s"] == pytest.approx(20 * US)
    assert table.at["aten::mm", "device_self_time_s"] == pytest.approx(20 * US)
    assert table.at["aten::add_", "device_self_time_s"] == pytest.approx(2 * US)
    assert table.at["aten::linear", "device_self_time_s"] == 0
    assert table.at["aten::linear", "device_total_time_s"] == pytest.approx(20 * US)
    assert table.at["aten::addmm", "host_self_time_s"] == pytest.approx(12 * US)
    assert table.at["cudaLaunchKernel", "kind"] == "runtime"
    assert table.at["cudaLaunchKernel", "calls_per_step"] == 3
    assert list(cuda.operators["operator"][:2]) == ["aten::addmm", "aten::mm"]


def test_backward_on_autograd_thread_follows_its_forward_layer(cuda):
    fc = cuda.layers.set_index("layer").loc["fc"]
    assert (fc["forward_device_time_s"], fc["backward_device_time_s"]) == pytest.approx(
        (20 * US, 20 * US)
    )
    assert fc["device_time_s"] == pytest.approx(40 * US)
    # forward: range 2 + linear 2 + addmm 12 + launch 3; backward: node 4 + mm 10 + launch 4.
    assert (fc["forward_host_time_s"], fc["backward_host_time_s"]) == pytest.approx(
        (19 * US, 18 * US)
    )
    # The main thread only waits in its backward range: that is not host work.
    layers = cuda.layers.set_index("layer")
    assert events.BACKWARD_OTHER_ROW not in layers.index
    assert layers.at[events.OPTIMIZER_ROW, "device_time_s"] == pytest.approx(2 * US)


def test_missing_device_activity_leaves_device_columns_null():
    trace = cuda_trace()
    trace["traceEvents"] = [e for e in trace["traceEvents"] if e.get("cat") != "kernel"]
    analysis = operators.analyse(trace, "cuda")
    assert math.isnan(analysis.steps.iloc[0]["device_busy_time_s"])
    assert analysis.summary["device_busy_time_s"] is None
    assert analysis.summary["busy_kind"] == operators.BUSY_HOST


def test_timed_step_time_decides_the_verdict(cuda):
    steps = cuda.steps
    # 42 µs of kernels in a 50 µs timed step: the profiler's host slowdown is taken out.
    summary = operators.steps_summary(steps, timed_step_time_s=50 * US)
    assert summary["busy_share_of_timed_step"] == pytest.approx(0.84)
    assert summary["bound"] == operators.MIXED
    assert summary["profiled_over_timed"] == pytest.approx(2.0)
    assert operators.steps_summary(steps, 44 * US)["bound"] == operators.DEVICE_BOUND


def test_a_cpu_verdict_reads_the_profiled_share_even_with_a_timed_step():
    """On a CPU the profiler slows the operators themselves: their share of the profiled
    step is the one to read, not their profiled time over the (faster) timed step."""
    steps = operators.analyse(cpu_trace(), "cpu").steps
    summary = operators.steps_summary(steps, timed_step_time_s=0.02 * US)
    assert summary["bound_share"] == summary["busy_share"]
    assert summary["bound"] == operators.steps_summary(steps)["bound"]


# --- reading files -----------------------------------------------------------------------


def test_load_trace_reads_gzip_and_plain_json(tmp_path):
    document = cpu_trace(steps=1)
    gz, plain = tmp_path / "t.json.gz", tmp_path / "t.json"
    gz.write_bytes(gzip.compress(json.dumps(document).encode()))
    plain.write_text(json.dumps(document))
    assert events.load_trace(gz) == events.load_trace(plain) == document


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"not json", "not a Chrome trace"), (b'{"events": []}', "no traceEvents list")],
)
def test_load_trace_refuses_what_is_not_a_trace(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(NnperfError, match=message):
        events.load_trace(path)
    with pytest.raises(NnperfError, match="trace not found"):
        events.load_trace(tmp_path / "missing.json.gz")


def test_a_trace_without_step_ranges_is_refused():
    with pytest.raises(ValueError, match="nnperf_step"):
        operators.analyse({"traceEvents": []}, "cpu")


def test_top_leaves_out_the_outside_row(cpu):
    chosen = operators.top(cpu.operators, 2, operators.time_column(cpu.operators))
    assert list(chosen["operator"]) == ["aten::convolution_backward", "aten::cross_entropy_loss"]
    assert operators.time_column(cpu.operators) == "host_self_time_s"


def test_a_driver_launch_inside_a_torch_range_belongs_to_the_range():
    """Triton kernels of a compiled graph are launched through the driver API, inside the
    graph's range and sometimes inside a runtime call: the range is charged."""
    from op_traces import annotation, kernel, launch, op

    trace = {
        "traceEvents": [
            annotation("nnperf_step#0", 0, 50),
            annotation("nnperf_phase:forward", 0, 40),
            annotation("## Call CompiledFxGraph abc ##", 1, 30),
            launch(2, 4, 7, name="cuLaunchKernel"),
            op("cudaLaunchKernelExC", 5, 9, cat="cuda_runtime"),
            op("cuLaunchKernelEx", 6, 8, cat="cuda_driver", correlation=8),
            kernel("triton_poi_fused_relu_0", 10, 20, 7),
            kernel("triton_red_fused_sum_1", 20, 25, 8),
        ]
    }
    table = operators.analyse(trace, "cuda").operators.set_index("operator")
    assert table.at["## Call CompiledFxGraph abc ##", "device_self_time_s"] == pytest.approx(
        15 * US
    )
    assert table.at["cuLaunchKernelEx", "device_self_time_s"] == 0
