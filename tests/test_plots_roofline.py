"""Tests for nnperf.plots.roofline: the figures' axes, roofs, styles and legends."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from nnperf import kernels, ncu, roofline
from nnperf.contract import FigureRequest
from nnperf.plots import roofline as plots

from ncu_writer import H100_CONFIG

DATA = Path(__file__).parent / "data" / "ncu"
RESNET18 = {
    "model": "resnet18",
    "train_step_flops_per_image": 3.6e8,
    "traffic": {"bf16": {"fixed_bytes": 4.5e7, "per_image_bytes": 3.0e7}},
}


@pytest.fixture(scope="module")
def h100():
    raw = ncu.read_raw_csv(DATA / "h100_bf16_resnet18.csv")
    table = kernels.kernels_table(raw, H100_CONFIG, clock_control="base")
    return table, roofline.ncu_points(table)


def _legend_texts(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def _lines(ax) -> dict[str, str]:
    return {line.get_label(): line.get_linestyle() for line in ax.get_lines()}


JSON_DOC = {
    "measured": {"gemm_flop_s": {"bf16": 6.5e14}, "memory_bandwidth_bytes_s": 2.9e12},
    "datasheet": {"flop_s": {"bf16": 9.89e14}, "memory_bandwidth_bytes_s": 3.35e12},
}


def test_config_roofline_figure(h100):
    table, points = h100
    figure = plots.plot_config_roofline(
        points,
        title="cuda resnet18 bf16 bs256 baseline",
        precision="bf16",
        ncu_ceilings=roofline.ncu_ceilings(roofline.step_kernels(table)),
        json_roofs=roofline.json_ceilings(JSON_DOC, ["bf16"]),
    )
    try:
        ax = figure.axes[0]
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
        assert ax.get_xlabel() == "Arithmetic intensity (FLOP/byte)"
        assert ax.get_ylabel() == "Performance (FLOP/s)"
        assert ax.get_title() == "cuda resnet18 bf16 bs256 baseline"
        lines = _lines(ax)
        # ncu ceilings dash-dot, labelled with value and clock; measured solid; datasheet dashed
        assert lines["ncu tensor bf16 @ 1.59 GHz: 860 TFLOP/s"] == "-."
        assert lines["ncu fp32 @ 1.59 GHz: 53.7 TFLOP/s"] == "-."
        assert lines["ncu DRAM: 3.35 TB/s"] == "-."
        assert lines["ncu L2: 8.14 TB/s"] == "-." and "ncu L1: 26.9 TB/s" in lines
        assert lines["measured bf16: 650 TFLOP/s"] == "-"
        assert lines["measured memory: 2.9 TB/s"] == "-"
        assert lines["datasheet bf16: 989 TFLOP/s"] == "--"
        assert lines["datasheet memory: 3.35 TB/s"] == "--"
        legend = _legend_texts(ax)
        for text in (
            "conv forward",
            "conv data-grad",
            "conv weight-grad",
            "batch-norm",
            "optimizer",
            "DRAM",
            "L2",
            "L1",
            "time (µs)",
            "ncu step (DRAM)",
            "ncu step (L1)",
        ):
            assert text in legend
        low, high = ax.get_ylim()
        assert high > 989e12 and low < 6e10  # every roof and the reduction kernel in view
    finally:
        plt.close(figure)


def test_config_roofline_with_analytic_point_only():
    points = pd.DataFrame(
        [
            roofline.analytic_point(
                {
                    "model": "m",
                    "train_step_flops_per_image": 1e9,
                    "traffic": {"fp32": {"fixed_bytes": 1e7, "per_image_bytes": 1e6}},
                },
                {
                    "device": "cpu",
                    "model": "m",
                    "precision": "fp32",
                    "batch_size": 32,
                    "variant": "baseline",
                },
                0.8,
            )
        ]
    )
    figure = plots.plot_config_roofline(
        points,
        title="cpu m fp32 bs32 baseline (analytic)",
        precision="fp32",
        json_roofs=roofline.json_ceilings(
            {"measured": {"gemm_flop_s": {"fp32": 1e12}, "memory_bandwidth_bytes_s": 2e10}},
            ["fp32"],
        ),
    )
    try:
        ax = figure.axes[0]
        assert "analytic step (algorithmic bytes)" in _legend_texts(ax)
        assert _lines(ax) == {"measured fp32: 1 TFLOP/s": "-", "measured memory: 20 GB/s": "-"}
        (collection,) = ax.collections
        x, y = collection.get_offsets()[0]
        assert x == pytest.approx(32e9 / (1e7 + 32e6))
        assert y == pytest.approx(32e9 / 0.8)
    finally:
        plt.close(figure)


def test_device_step_figure_mixes_ncu_and_analytic(h100):
    table, points = h100
    analytic = roofline.analytic_points(
        {
            "resnet18": {
                "model": "resnet18",
                "train_step_flops_per_image": 3.6e8,
                "traffic": {"bf16": {"fixed_bytes": 4.5e7, "per_image_bytes": 3.0e7}},
            }
        },
        {("cuda", "resnet18", "bf16", 256, "baseline"): 0.12},
    )
    merged = pd.concat([points, analytic], ignore_index=True)
    figure = plots.plot_device_steps(
        merged,
        device="cuda",
        ncu_ceilings=roofline.ncu_ceilings(table),
        ncu_tensor_peaks={"bf16": roofline.ncu_ceilings(table)["peak_flop_s_tensor"]},
        json_roofs=roofline.json_ceilings(JSON_DOC, ["bf16"]),
    )
    try:
        ax = figure.axes[0]
        assert ax.get_title() == "cuda: training-step roofline (analytic, ncu)"
        legend = _legend_texts(ax)
        assert "analytic (algorithmic bytes)" in legend and "ncu (DRAM bytes)" in legend
        assert "resnet18 / bf16" in legend
        assert "ncu tensor bf16 @ 1.59 GHz: 860 TFLOP/s" in _lines(ax)
        annotations = [t.get_text() for t in ax.texts]
        assert annotations == ["bs256 baseline", "bs256 baseline"]  # one ncu, one analytic
    finally:
        plt.close(figure)


def test_value_labels():
    assert plots.format_flop_s(9.89e14) == "989 TFLOP/s"
    assert plots.format_bytes_s(3.35e12) == "3.35 TB/s"
    assert plots.format_bytes_s(512) == "512 B/s"


def test_a_configuration_figure_draws_only_the_configuration_it_names(h100):
    table, points = h100
    # Another batch size of the same model and a CPU run: neither belongs in this figure.
    others = roofline.analytic_points(
        {"resnet18": RESNET18},
        {
            ("cuda", "resnet18", "bf16", 128, "baseline"): 0.07,
            ("cpu", "resnet18", "bf16", 256, "baseline"): 3.0,
        },
    )
    merged = pd.concat([points, others], ignore_index=True)
    figure = plots.config_figure(merged, table, JSON_DOC, FigureRequest("roofline", **H100_CONFIG))
    try:
        ax = figure.axes[0]
        assert ax.get_title() == "cuda resnet18 bf16 bs256 baseline: hierarchical roofline (ncu)"
        legend = _legend_texts(ax)
        assert "ncu step (DRAM)" in legend
        assert "analytic step (algorithmic bytes)" not in legend
        lines = _lines(ax)
        assert "ncu tensor bf16 @ 1.59 GHz: 860 TFLOP/s" in lines
        assert lines["measured bf16: 650 TFLOP/s"] == "-"
    finally:
        plt.close(figure)


def test_a_device_figure_has_every_step_of_its_device_only(h100):
    table, points = h100
    analytic = roofline.analytic_points(
        {"resnet18": RESNET18},
        {
            ("cuda", "resnet18", "bf16", 256, "baseline"): 0.12,
            ("cpu", "resnet18", "bf16", 256, "baseline"): 3.0,
        },
    )
    merged = pd.concat([points, analytic], ignore_index=True)
    figure = plots.device_figure(merged, table, JSON_DOC, "cuda")
    try:
        ax = figure.axes[0]
        assert ax.get_title() == "cuda: training-step roofline (analytic, ncu)"
        # One ncu (DRAM) and one analytic step: the CPU one is left out.
        assert [t.get_text() for t in ax.texts] == ["bs256 baseline", "bs256 baseline"]
        lines = _lines(ax)
        assert "ncu tensor bf16 @ 1.59 GHz: 860 TFLOP/s" in lines
        assert "datasheet bf16: 989 TFLOP/s" in lines
    finally:
        plt.close(figure)
