"""Tests for nnperf.roofline.points: formulas, ceilings, calibration, ncu and analytic points, and
the rules' entry points (`write_points`, `nnperf.report.plots.roofline.write_figure`)."""

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

from nnperf.core.contract import FigureRequest
from nnperf.core.errors import NnperfError
from nnperf.core.files import write_csv, write_json
from nnperf.ncu import kernels
from nnperf.ncu import metrics as ncu
from nnperf.report.plots.roofline import write_figure
from nnperf.roofline import points as roofline
from nnperf.roofline import tables as roofline_tables

from h100_exports import EXPORTS, H100_RUN_CLOCK_HZ

DATA = Path(__file__).parents[1] / "data" / "ncu"
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
    expected = 2 * 4096**3
    assert roofline.calibration_ratio(1.01 * expected, expected) == pytest.approx(1.01)
    assert roofline.calibration_ok(1.019) and roofline.calibration_ok(0.981)
    assert not roofline.calibration_ok(1.021) and not roofline.calibration_ok(0.5)
    with pytest.raises(NnperfError, match="must be positive"):
        roofline.calibration_ratio(1.0, 0.0)


# ------------------------------------------------------------------ ncu points and ceilings


@pytest.fixture(scope="module")
def h100_kernels() -> pd.DataFrame:
    """The bf16 tuned step of the real H100 export (tests/data/ncu/h100)."""
    return EXPORTS["bf16_bs256_tuned"].kernels()


@pytest.fixture(scope="module")
def all_h100_kernels() -> pd.DataFrame:
    return pd.concat([e.kernels() for e in EXPORTS.values()], ignore_index=True)


def test_ncu_points_per_kernel_and_step_at_three_levels(h100_kernels):
    points = roofline.ncu_points(h100_kernels)
    assert list(points.columns) == list(roofline.POINT_COLUMNS)
    kernel_points = points[points["granularity"] == "kernel"]
    assert len(kernel_points) == 344 * 3  # 344 step kernels (calibration excluded) x 3 levels
    assert set(kernel_points["memory_level"]) == {"dram", "l2", "l1"}
    assert (kernel_points["kernel_name"] != "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT").all()
    step = points[(points["granularity"] == "step") & (points["memory_level"] == "dram")].iloc[0]
    step_kernels = h100_kernels[h100_kernels["phase"] != "calibration"]
    assert step["flops"] == pytest.approx(step_kernels["flops_total"].sum())
    assert step["bytes"] == pytest.approx(step_kernels["bytes_dram"].sum())
    assert step["time_s"] == pytest.approx(6.714e-3, rel=1e-3)  # the README's 6.7 ms
    assert step["arithmetic_intensity_flop_per_byte"] == pytest.approx(
        step["flops"] / step["bytes"]
    )
    assert step["performance_flop_s"] == pytest.approx(step["flops"] / step["time_s"])
    # 890 GFLOP in 6.7 ms of kernels: 132 TFLOP/s, nowhere near 4e14 (the NaN-time bug)
    assert step["performance_flop_s"] == pytest.approx(1.325e14, rel=0.01)
    assert set(points["source"]) == {"ncu"}


def test_ncu_ceilings_are_dense_peaks_at_the_profiled_clock(h100_kernels):
    ceilings = roofline.ncu_ceilings(h100_kernels)
    clock = ceilings["clock_hz"]
    assert clock == pytest.approx(1.5858e9, rel=1e-3)  # ncu's locked clock, not 1.98 GHz boost
    assert ceilings["peak_flop_s_tensor"] == pytest.approx(4096 * 132 * clock, rel=1e-3)
    assert ceilings["peak_flop_s_fp32"] == pytest.approx(128 * 2 * 132 * clock, rel=1e-3)
    # 1280 B per DRAM cycle x the median DRAM clock (2.61 GHz): 3.34 TB/s (datasheet 3.35)
    assert ceilings["peak_bytes_s_dram"] == pytest.approx(3.3427e12, rel=1e-3)


def test_calibration_counts_and_roof_on_every_real_export(all_h100_kernels):
    table = roofline.calibration_table(all_h100_kernels).set_index("variant", append=False)
    assert (table["calibration_flops_expected"] == 2 * 4096**3).all()
    assert table["calibration_ok"].all()
    assert table["calibration_ratio"].between(0.9997, 1.0003).all()  # the README's 0.02%
    bf16 = table[(table["precision"] == "bf16")]
    # the done-when: 85-95% of the dense roof (it would read 45% of the exported sparse one)
    assert bf16["calibration_roof_fraction"].between(0.85, 0.95).all()
    assert bf16["roof_ok"].all()
    assert (bf16["roof_basis"].str.contains("2:4-sparse")).all()
    fp32 = table[table["precision"] == "fp32"]
    assert fp32["calibration_roof_fraction"].between(0.7, 0.85).all()  # FFMA pipe: 78%
    tuned = bf16.loc["tuned"]
    assert tuned["calibration_flop_s"] == pytest.approx(2 * 4096**3 / 210.688e-6)
    assert tuned["calibration_clock_hz"] == pytest.approx(1.337291e9)


def test_a_sparse_roof_taken_for_dense_is_flagged(h100_kernels):
    """Undo the halving: the calibration GEMM then reads 45% of its roof and the roof is
    flagged, as the H100 exports showed before it was fixed."""
    sparse = h100_kernels.assign(peak_flop_s_tensor=h100_kernels["peak_flop_s_tensor"] * 2)
    row = roofline.calibration_table(sparse).iloc[0]
    assert row["calibration_roof_fraction"] == pytest.approx(0.451, abs=0.005)
    assert not row["roof_ok"]
    assert roofline.roof_fraction_ok(0.5) and roofline.roof_fraction_ok(1.0)
    assert not roofline.roof_fraction_ok(1.01) and not roofline.roof_fraction_ok(math.nan)


def test_calibration_table_counts(h100_kernels):
    strict = roofline.calibration_table(h100_kernels, tolerance=1e-9).iloc[0]
    assert bool(strict["calibration_ok"]) is True  # bf16 counts 2*4096^3 exactly
    without = roofline.calibration_table(h100_kernels[h100_kernels["phase"] != "calibration"])
    row = without.iloc[0]
    assert math.isnan(row["calibration_ratio"]) and not row["calibration_ok"]
    assert not row["roof_ok"]


def _summary(rows):
    return pd.DataFrame(
        [
            {
                **EXPORTS[name].config,
                "step_time_s_median": step,
                "sm_clock_hz_median": clock,
            }
            for name, step, clock in rows
        ]
    )


def test_gpu_busy_share_of_the_h100_steps(all_h100_kernels):
    points = roofline.ncu_points(all_h100_kernels)
    summary = _summary(
        [
            ("bf16_bs256_tuned", EXPORTS["bf16_bs256_tuned"].timed_step_s, H100_RUN_CLOCK_HZ),
            (
                "bf16_bs256_cudagraphs",
                EXPORTS["bf16_bs256_cudagraphs"].timed_step_s,
                H100_RUN_CLOCK_HZ,
            ),
            ("fp32_bs256_tuned", 0.0306, None),  # timed without NVML: no run clock
        ]
    )
    table = roofline.profiles_table(all_h100_kernels, points, summary)
    assert list(table.columns) == list(roofline.PROFILE_COLUMNS)
    rows = {row["variant"] + "/" + row["precision"]: row for row in table.to_dict("records")}
    eager = rows["tuned/bf16"]
    # 6.7 ms of kernels at ncu's 1.59 GHz is 5.4 ms at the runs' 1.98 GHz, of a 10.4 ms step
    assert eager["kernel_time_s"] == pytest.approx(6.714e-3, rel=1e-3)
    assert eager["profiled_sm_clock_hz"] == pytest.approx(1.5858e9, rel=1e-3)
    assert eager["kernel_time_at_run_clock_s"] == pytest.approx(6.714e-3 * 1.5858 / 1.98, rel=2e-3)
    assert eager["busy_share"] == pytest.approx(0.518, abs=0.005)
    assert eager["busy_share_at_profiled_clock"] == pytest.approx(0.647, abs=0.005)
    assert eager["busy_verdict"] == "host-bound"
    graphs = rows["cudagraphs/bf16"]
    assert graphs["busy_share"] > 1.0 and graphs["busy_verdict"] == "device-bound"
    unclocked = rows["tuned/fp32"]
    assert math.isnan(unclocked["busy_share"]) and unclocked["busy_verdict"] == "unknown"
    assert unclocked["busy_share_at_profiled_clock"] > 1
    untimed = rows["baseline/fp32"]
    assert math.isnan(untimed["step_time_s"]) and untimed["busy_verdict"] == "unknown"
    assert table["kernels"].tolist() == [299, 344, 330, 389]  # sorted by the keys


@pytest.mark.parametrize(
    "share, upper, verdict",
    [
        (0.5, 0.65, "host-bound"),
        (0.85, 0.95, "mixed"),
        (0.6, 0.8, "mixed"),
        (0.9, 1.2, "device-bound"),
        (math.nan, 0.5, "host-bound"),
        (math.nan, 0.95, "unknown"),
        (math.nan, math.nan, "unknown"),
    ],
)
def test_busy_verdict(share, upper, verdict):
    assert roofline.busy_verdict(share, upper) == verdict


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
            # Its clean windows' median is kept, but a host_busy configuration is no point.
            {**base, "batch_size": 8, "status": "host_busy", "step_time_s_median": 0.3},
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
    profiles_path = tmp_path / "results/tables/profiles.csv"
    roofline_tables.write_points(
        summary, [tmp_path / "results/complexity/tiny.json"], None, points_path, profiles_path
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
    profiles = pd.read_csv(profiles_path)
    assert profiles.empty and list(profiles.columns) == list(roofline.PROFILE_COLUMNS)

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


def test_profiles_compare_ncu_and_analytic_flops(h100_kernels):
    config = EXPORTS["bf16_bs256_tuned"].config
    # resnet18_cifar's training step by the complexity stage: 3.33 GFLOP per image
    complexity = {
        "model": "resnet18_cifar",
        "train_step_flops_per_image": 3.33e9,
        "traffic": {"bf16": {"fixed_bytes": 10, "per_image_bytes": 20}},
    }
    times = {tuple(config.values()): 0.0104}
    points = pd.concat(
        [
            roofline.ncu_points(h100_kernels),
            roofline.analytic_points({"resnet18_cifar": complexity}, times),
        ],
        ignore_index=True,
    )
    assert set(points["source"]) == {"ncu", "analytic"}
    row = roofline.profiles_table(h100_kernels, points).iloc[0]
    assert row["flops_analytic"] == pytest.approx(3.33e9 * 256)
    assert row["flops_ncu"] == pytest.approx(8.895e11, rel=1e-3)
    assert row["ratio_ncu_to_analytic"] == pytest.approx(1.04, abs=0.01)  # README: 1.044
    assert bool(row["calibration_ok"]) and bool(row["roof_ok"])
    assert row["busy_verdict"] == "unknown"  # no summary given


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
    write_csv(summary, pd.DataFrame(columns=[*roofline_tables.SUMMARY_COLUMNS, "status"]))
    points, profiles = tmp_path / "points.csv", tmp_path / "profiles.csv"
    written = roofline_tables.write_points(summary, [], table, points, profiles)
    frame = pd.read_csv(points)
    assert len(frame) == len(written) == 344 * 3 + 3  # 344 kernels and the step, at 3 levels
    checks = pd.read_csv(profiles).iloc[0]
    assert checks["calibration_ratio"] == 1.0
    assert bool(checks["calibration_ok"]) and bool(checks["roof_ok"])
    figure = tmp_path / "fig.png"
    config = EXPORTS["bf16_bs256_tuned"].config
    write_figure(FigureRequest(kind="roofline", **config), points, None, table, figure, profiles)
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
    roofline_tables.write_points(summary, [complexity], None, points, tmp_path / "flops.csv")
    row = pd.read_csv(points).iloc[0]
    assert (row["batch_size"], row["flops"], row["bytes"], row["time_s"]) == (4, 4e6, 140, 0.25)
    empty = tmp_path / "oom.png"
    write_figure(FigureRequest(kind="roofline", **keys, batch_size=512), points, None, None, empty)
    assert empty.read_bytes()[:4] == b"\x89PNG"


def test_bad_tables_and_requests_are_one_line_naming_them(tmp_path):
    points = tmp_path / "points.csv"
    points.write_text("device,model\ncpu,m\n")
    figure = tmp_path / "f.png"
    with pytest.raises(
        NnperfError,
        match=r"points.csv: lacks column\(s\) precision, .* \(needed by the roofline, reading the roofline points table\)",
    ):
        write_figure(FigureRequest(kind="roofline_steps", device="cpu"), points, None, None, figure)
    with pytest.raises(NnperfError, match="summary.csv: file not found"):
        roofline_tables.write_points(tmp_path / "summary.csv", [], None, points, tmp_path / "x.csv")
    good = tmp_path / "good.csv"
    write_csv(good, pd.DataFrame(columns=list(roofline.POINT_COLUMNS)))
    with pytest.raises(NnperfError, match="a roofline figure needs model, precision"):
        write_figure(FigureRequest(kind="roofline", device="cpu"), good, None, None, figure)
    assert not figure.exists()
