"""Tests for nnperf.roofline: formulas, ceilings, calibration, ncu and analytic points, and
the rules' entry points (`write_points`, `nnperf.plots.roofline.write_figure`)."""

from __future__ import annotations

import math
import statistics
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from nnperf import kernels, ncu, roofline
from nnperf.contract import FigureRequest
from nnperf.errors import NnperfError
from nnperf.files import write_csv, write_json
from nnperf.plots.roofline import write_figure

from ncu_writer import H100_CONFIG

DATA = Path(__file__).parent / "data" / "ncu"
POSITIVE = st.floats(min_value=1e-6, max_value=1e18, allow_nan=False, allow_infinity=False)


# ------------------------------------------------------------------ formulas
def test_formulas_against_hand_computed_values():
    assert roofline.arithmetic_intensity(1000.0, 250.0) == 4.0
    assert roofline.performance(3e12, 1.5) == 2e12
    # 10 FLOP/byte x 2 TB/s = 20 TFLOP/s < 50 TFLOP/s peak: memory bound
    assert roofline.attainable(10.0, 50e12, 2e12) == 20e12
    assert roofline.attainable(100.0, 50e12, 2e12) == 50e12
    assert roofline.ridge_point(50e12, 2e12) == 25.0
    assert math.isnan(roofline.arithmetic_intensity(1.0, 0.0))
    assert math.isnan(roofline.performance(1.0, 0.0))


@settings(max_examples=200, deadline=None)
@given(ai=POSITIVE, peak=POSITIVE, bandwidth=POSITIVE)
def test_attainable_is_the_lower_roof_and_meets_at_the_ridge(ai, peak, bandwidth):
    value = roofline.attainable(ai, peak, bandwidth)
    assert value <= peak and value <= ai * bandwidth
    assert value in (peak, ai * bandwidth)
    ridge = roofline.ridge_point(peak, bandwidth)
    assert roofline.attainable(ridge, peak, bandwidth) == pytest.approx(peak, rel=1e-9)


def test_calibration_ratio_and_tolerance():
    expected = roofline.calibration_expected_flops(4096, 4096, 4096)
    assert expected == 2 * 4096**3
    assert roofline.calibration_expected_flops(2, 3, 4, launches=5) == 240
    assert roofline.calibration_ratio(1.01 * expected, expected) == pytest.approx(1.01)
    assert roofline.calibration_ok(1.019) and roofline.calibration_ok(0.981)
    assert not roofline.calibration_ok(1.021) and not roofline.calibration_ok(0.5)
    with pytest.raises(NnperfError, match="must be positive"):
        roofline.calibration_ratio(1.0, 0.0)


# ------------------------------------------------------------------ ncu points and ceilings


@pytest.fixture(scope="module")
def h100_kernels() -> pd.DataFrame:
    raw = ncu.read_raw_csv(DATA / "h100_bf16_resnet18.csv")
    return kernels.kernels_table(raw, H100_CONFIG, clock_control="base")


def test_ncu_points_per_kernel_and_step_at_three_levels(h100_kernels):
    points = roofline.ncu_points(h100_kernels)
    assert list(points.columns) == list(roofline.POINT_COLUMNS)
    kernel_points = points[points["granularity"] == "kernel"]
    assert len(kernel_points) == 8 * 3  # 8 step kernels (calibration excluded) x dram/l2/l1
    assert set(kernel_points["memory_level"]) == {"dram", "l2", "l1"}
    assert "gemm" not in set(kernel_points["kind"])  # the only GEMM is the calibration one
    step = points[(points["granularity"] == "step") & (points["memory_level"] == "dram")].iloc[0]
    step_kernels = h100_kernels[h100_kernels["phase"] != "calibration"]
    assert step["flops"] == pytest.approx(step_kernels["flops_total"].sum())
    assert step["bytes"] == pytest.approx(step_kernels["bytes_dram"].sum())
    assert step["time_s"] == pytest.approx(step_kernels["duration_s"].sum())
    assert step["arithmetic_intensity_flop_per_byte"] == pytest.approx(
        step["flops"] / step["bytes"]
    )
    assert step["performance_flop_s"] == pytest.approx(step["flops"] / step["time_s"])
    assert set(points["source"]) == {"ncu"}
    conv = kernel_points[
        (kernel_points["kind"] == "conv_fwd") & (kernel_points["memory_level"] == "l2")
    ].iloc[0]
    assert conv["arithmetic_intensity_flop_per_byte"] == pytest.approx(29.6e9 / 611.4e6)
    assert conv["performance_flop_s"] == pytest.approx(29.6e9 / 61.7e-6)


def test_ncu_ceilings_are_peaks_at_the_profiled_clock(h100_kernels):
    ceilings = roofline.ncu_ceilings(h100_kernels)
    assert ceilings["clock_hz"] == pytest.approx(1.59e9)
    assert ceilings["peak_flop_s_tensor"] == pytest.approx(540672 * 1.59e9)
    assert ceilings["peak_flop_s_fp32"] == pytest.approx(16896 * 2 * 1.59e9)
    assert ceilings["peak_bytes_s_dram"] == pytest.approx(1280 * 2.619e9)


def test_calibration_table(h100_kernels):
    table = roofline.calibration_table(h100_kernels)
    row = table.iloc[0]
    assert row["calibration_flops_expected"] == 2 * 4096**3
    # fixture: bf16 tensor ops 1.0006 x 2MNK plus 2^24 FP32 multiplies of the epilogue
    assert row["calibration_ratio"] == pytest.approx(1.0006 + 2**24 / (2 * 4096**3), rel=1e-6)
    assert bool(row["calibration_ok"]) is True
    strict = roofline.calibration_table(h100_kernels, tolerance=1e-4).iloc[0]
    assert bool(strict["calibration_ok"]) is False
    without = roofline.calibration_table(h100_kernels[h100_kernels["phase"] != "calibration"])
    assert (
        math.isnan(without.iloc[0]["calibration_ratio"]) and not without.iloc[0]["calibration_ok"]
    )


# ------------------------------------------------------------------ analytic points
COMPLEXITY = {
    "model": "tiny",
    "train_step_flops_per_image": 3.0e6,
    "traffic": {
        "fp32": {"fixed_bytes": 1000, "per_image_bytes": 250},
        "bf16": {"fixed_bytes": 600, "per_image_bytes": 125},
    },
}


def test_analytic_point_against_hand_computed_values():
    config = {
        "device": "cpu",
        "model": "tiny",
        "precision": "fp32",
        "batch_size": 8,
        "variant": "baseline",
    }
    point = roofline.analytic_point(COMPLEXITY, config, step_time_s=0.5)
    assert point["flops"] == 24e6
    assert point["bytes"] == 1000 + 8 * 250
    assert point["arithmetic_intensity_flop_per_byte"] == 24e6 / 3000
    assert point["performance_flop_s"] == 48e6
    assert (point["source"], point["granularity"], point["memory_level"]) == (
        "analytic",
        "step",
        "algorithmic",
    )


def test_analytic_errors_name_the_problem():
    config = {
        "device": "cpu",
        "model": "tiny",
        "precision": "fp16",
        "batch_size": 8,
        "variant": "b",
    }
    with pytest.raises(NnperfError, match=r"traffic has no precision 'fp16'; present: bf16, fp32"):
        roofline.analytic_point(COMPLEXITY, config, 1.0)
    broken = {**COMPLEXITY, "train_step_flops_per_image": None}
    with pytest.raises(NnperfError, match="train_step_flops_per_image None is not a number"):
        roofline.analytic_point(broken, {**config, "precision": "fp32"}, 1.0)
    times = {("cpu", "other", "fp32", 2, "b"): 1.0}
    with pytest.raises(NnperfError, match=r"no complexity for model 'other'; have: tiny"):
        roofline.analytic_points({"tiny": COMPLEXITY}, times)


def test_step_times_come_from_the_summary_and_skip_configurations_without_one():
    base = {"device": "cpu", "model": "tiny", "precision": "fp32", "variant": "b"}
    summary = pd.DataFrame(
        [
            {**base, "batch_size": 4, "status": "ok", "step_time_s_median": 0.2},
            {**base, "batch_size": 4096, "status": "oom", "step_time_s_median": math.nan},
        ]
    )
    assert roofline.step_times(summary) == {("cpu", "tiny", "fp32", 4, "b"): 0.2}


# ------------------------------------------------------------------ analytic end to end on CPU
class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1),
            torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
            torch.nn.Linear(8, 10),
        )

    def forward(self, x):
        return self.body(x)


def _complexity(model: torch.nn.Module) -> dict:
    """A complexity document in the contract's shape, measured on the model (batch 1)."""
    x = torch.randn(1, 3, 8, 8)
    y = torch.tensor([3])
    with FlopCounterMode(display=False) as forward_counter:
        out = model(x)
    with FlopCounterMode(display=False) as backward_counter:
        torch.nn.functional.cross_entropy(out, y).backward()
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(
        lambda t: saved.append(t.nbytes) or t, lambda t: t
    ):
        torch.nn.functional.cross_entropy(model(x), y).backward()
    params = sum(p.numel() for p in model.parameters())
    forward_flops = forward_counter.get_total_flops()
    backward_flops = backward_counter.get_total_flops()
    # no-reuse traffic: weights read twice and written once, gradients written and read,
    # momentum read and written; activations written in forward and read in backward
    fixed = params * 4 * 7
    traffic = {
        "fp32": {"fixed_bytes": fixed, "per_image_bytes": 2 * sum(saved)},
        "bf16": {"fixed_bytes": fixed, "per_image_bytes": sum(saved)},
    }
    return {
        "model": "tiny",
        "dataset": "synthetic",
        "num_classes": 10,
        "input_shape": [3, 8, 8],
        "params": params,
        "trainable_params": params,
        "forward_flops_per_image": forward_flops,
        "backward_flops_per_image": backward_flops,
        "train_step_flops_per_image": forward_flops + backward_flops,
        "saved_activation_bytes_per_image": sum(saved),
        "weight_bytes": params * 4,
        "gradient_bytes": params * 4,
        "optimizer_state_bytes": params * 4,
        "traffic": traffic,
    }


def _median_step_time(model: torch.nn.Module, batch_size: int, rep: int) -> float:
    """The median of three real CPU training steps after one warm-up step."""
    torch.manual_seed(rep)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch_size, 3, 8, 8)
    y = torch.randint(0, 10, (batch_size,))
    times = []
    for _ in range(4):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def test_analytic_roofline_end_to_end_on_cpu(tmp_path):
    torch.set_num_threads(1)
    model = Tiny()
    complexity = _complexity(model)
    assert complexity["train_step_flops_per_image"] > complexity["forward_flops_per_image"] > 0
    write_json(tmp_path / "results/complexity/tiny.json", complexity)
    keys = {"device": "cpu", "model": "tiny", "precision": "fp32", "variant": "baseline"}
    # summary.csv as aggregate_runs writes it: the median over reps of each rep's median step.
    medians = {
        bs: statistics.median(_median_step_time(model, bs, rep) for rep in (0, 1)) for bs in (2, 4)
    }
    rows = [
        {**keys, "batch_size": bs, "status": "ok", "step_time_s_median": median}
        for bs, median in medians.items()
    ]
    rows.append({**keys, "batch_size": 9999, "status": "oom", "step_time_s_median": math.nan})
    summary = tmp_path / "results/tables/summary.csv"
    write_csv(summary, pd.DataFrame(rows))
    points_path = tmp_path / "results/tables/roofline_points.csv"
    flops_path = tmp_path / "results/tables/flops_comparison.csv"
    roofline.write_points(
        summary, [tmp_path / "results/complexity/tiny.json"], None, points_path, flops_path
    )
    points = pd.read_csv(points_path)
    assert list(points.columns) == list(roofline.POINT_COLUMNS)
    assert len(points) == 2  # bs2 and bs4; the OOM config has no time
    for row in points.itertuples(index=False):
        traffic = complexity["traffic"]["fp32"]
        assert (row.source, row.granularity, row.memory_level, row.kind) == (
            "analytic",
            "step",
            "algorithmic",
            "step",
        )
        assert row.flops == pytest.approx(complexity["train_step_flops_per_image"] * row.batch_size)
        assert row.bytes == traffic["fixed_bytes"] + row.batch_size * traffic["per_image_bytes"]
        assert row.time_s == pytest.approx(medians[row.batch_size])
        assert row.arithmetic_intensity_flop_per_byte == pytest.approx(row.flops / row.bytes)
        assert row.performance_flop_s == pytest.approx(row.flops / medians[row.batch_size])
    flops = pd.read_csv(flops_path)
    assert list(flops["batch_size"]) == [2, 4]
    assert flops["flops_ncu"].isna().all()
    assert list(flops["flops_analytic"]) == pytest.approx(list(points["flops"]))

    ceilings = tmp_path / "results/ceilings/cpu.json"
    write_json(
        ceilings,
        {
            "device": "cpu",
            "device_name": "test cpu",
            "threads": 1,
            "measured": {
                "gemm_flop_s": {"fp32": 5.0e10, "bf16": 2.0e10},
                "memory_bandwidth_bytes_s": 1.0e10,
                "sweep": [],
            },
            "datasheet": None,
            "ratio_measured_to_datasheet": {},
            "note": "",
        },
    )
    figure = tmp_path / "results/figures/roofline_steps/cpu.png"
    steps = FigureRequest(kind="roofline_steps", device="cpu")
    write_figure(steps, points_path, ceilings, None, figure)
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    single = tmp_path / "results/figures/roofline/cpu/tiny/fp32/bs4/baseline.png"
    one = FigureRequest(kind="roofline", **keys, batch_size=4)
    write_figure(one, points_path, ceilings, None, single)
    assert single.stat().st_size > 10_000


def test_merged_points_and_flops_comparison(h100_kernels):
    config = H100_CONFIG
    complexity = {
        "model": "resnet18",
        "train_step_flops_per_image": 3.6e8,
        "traffic": {"bf16": {"fixed_bytes": 10, "per_image_bytes": 20}},
    }
    times = {tuple(config.values()): 0.1}
    points = pd.concat(
        [
            roofline.ncu_points(h100_kernels),
            roofline.analytic_points({"resnet18": complexity}, times),
        ],
        ignore_index=True,
    )
    assert set(points["source"]) == {"ncu", "analytic"}
    table = roofline.flops_comparison(points, roofline.calibration_table(h100_kernels))
    row = table.iloc[0]
    assert row["flops_analytic"] == pytest.approx(3.6e8 * 256)
    assert row["ratio_ncu_to_analytic"] == pytest.approx(row["flops_ncu"] / row["flops_analytic"])
    assert bool(row["calibration_ok"])


def test_json_ceilings_measured_and_datasheet():
    document = {
        "measured": {
            "gemm_flop_s": {"bf16": 7.0e14, "fp32": 5.0e13},
            "memory_bandwidth_bytes_s": 3.0e12,
        },
        "datasheet": {"flop_s": {"bf16": 9.89e14}, "memory_bandwidth_bytes_s": 3.35e12},
    }
    roofs = roofline.json_ceilings(document, ["bf16"])
    assert [(r["label"], r["origin"], r["value"]) for r in roofs] == [
        ("measured bf16", "measured", 7.0e14),
        ("measured memory", "measured", 3.0e12),
        ("datasheet bf16", "datasheet", 9.89e14),
        ("datasheet memory", "datasheet", 3.35e12),
    ]
    assert roofline.json_ceilings({"measured": None, "datasheet": None}, ["fp32"]) == []


# ------------------------------------------------------------------ the rules' entry points
def test_points_and_figure_from_a_kernels_table(h100_kernels, tmp_path):
    table = tmp_path / "kernels.csv"
    write_csv(table, h100_kernels)
    summary = tmp_path / "summary.csv"
    write_csv(summary, pd.DataFrame(columns=[*roofline.SUMMARY_COLUMNS, "status"]))
    points, flops = tmp_path / "points.csv", tmp_path / "flops.csv"
    written = roofline.write_points(summary, [], table, points, flops)
    frame = pd.read_csv(points)
    assert len(frame) == len(written) == 8 * 3 + 3  # 8 kernels and the step, at 3 levels
    comparison = pd.read_csv(flops).iloc[0]
    assert comparison["calibration_ratio"] == pytest.approx(1.000722, rel=1e-5)
    assert bool(comparison["calibration_ok"])
    figure = tmp_path / "fig.png"
    write_figure(FigureRequest(kind="roofline", **H100_CONFIG), points, None, table, figure)
    assert figure.read_bytes()[:4] == b"\x89PNG"


def test_an_out_of_memory_configuration_is_an_empty_roofline(tmp_path):
    keys = {"device": "cpu", "model": "tiny", "precision": "fp32", "variant": "baseline"}
    summary = tmp_path / "summary.csv"
    write_csv(
        summary,
        pd.DataFrame(
            [
                {**keys, "batch_size": 4, "status": "ok", "step_time_s_median": 0.25},
                {**keys, "batch_size": 512, "status": "oom", "step_time_s_median": math.nan},
            ]
        ),
    )
    complexity = tmp_path / "tiny.json"
    write_json(
        complexity,
        {
            "model": "tiny",
            "train_step_flops_per_image": 1e6,
            "traffic": {"fp32": {"fixed_bytes": 100, "per_image_bytes": 10}},
        },
    )
    points = tmp_path / "points.csv"
    roofline.write_points(summary, [complexity], None, points, tmp_path / "flops.csv")
    row = pd.read_csv(points).iloc[0]
    assert (row["batch_size"], row["flops"], row["bytes"], row["time_s"]) == (4, 4e6, 140, 0.25)
    empty = tmp_path / "oom.png"
    write_figure(FigureRequest(kind="roofline", **keys, batch_size=512), points, None, None, empty)
    assert empty.read_bytes()[:4] == b"\x89PNG"


def test_bad_tables_and_requests_are_one_line_naming_them(tmp_path):
    points = tmp_path / "points.csv"
    points.write_text("device,model\ncpu,m\n")
    figure = tmp_path / "f.png"
    with pytest.raises(NnperfError, match="points.csv: roofline points table lacks columns"):
        write_figure(FigureRequest(kind="roofline_steps", device="cpu"), points, None, None, figure)
    with pytest.raises(NnperfError, match="summary.csv: file not found"):
        roofline.write_points(tmp_path / "summary.csv", [], None, points, tmp_path / "x.csv")
    good = tmp_path / "good.csv"
    write_csv(good, pd.DataFrame(columns=list(roofline.POINT_COLUMNS)))
    with pytest.raises(NnperfError, match="a roofline figure needs model, precision"):
        write_figure(FigureRequest(kind="roofline", device="cpu"), good, None, None, figure)
    assert not figure.exists()
