"""Tests for nnperf.report.plots.roofline: the figures' axes, roofs, styles, legends and point
labels."""

from __future__ import annotations

import itertools
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import pandas as pd
import pytest
from matplotlib.text import Text

from nnperf.core import files
from nnperf.core.contract import FigureRequest
from nnperf.core.cpuinfo import parse_cpuinfo
from nnperf.ncu import kernels
from nnperf.ncu import raw_csv
from nnperf.report.plots import roofline as plots
from nnperf.roofline import peaks
from nnperf.roofline import points as roofline
from nnperf.roofline import tables as roofline_tables

from h100_exports import EXPORTS
from ncu_writer import H100_CONFIG
from report_tables import CPUINFO_NO_BF16

DATA = Path(__file__).parents[1] / "data" / "ncu"
RESNET18 = {
    "model": "resnet18",
    "train_step_flops_per_image": 3.6e8,
    "traffic": {"bf16": {"fixed_bytes": 4.5e7, "per_image_bytes": 3.0e7}},
}


@pytest.fixture(scope="module")
def h100():
    """The real bf16 H100 export, keyed as these figure tests' configuration (its name does
    not matter to a figure; the numbers and kernel kinds are real)."""
    raw = raw_csv.read_raw_csv(EXPORTS["bf16_bs256_tuned"].path)
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
# No configuration profiled: kernels.csv absent.
NO_KERNELS = roofline_tables.read_kernels(None)


def test_config_roofline_figure(h100):
    table, points = h100
    figure = plots.config_figure(points, table, JSON_DOC, FigureRequest("roofline", **H100_CONFIG))
    try:
        ax = figure.axes[0]
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
        assert ax.get_xlabel() == "Arithmetic intensity (FLOP/byte)"
        assert ax.get_ylabel() == "Performance (FLOP/s)"
        assert ax.get_title() == "cuda resnet18 bf16 bs256 baseline: hierarchical roofline (ncu)"
        lines = _lines(ax)
        # ncu ceilings dash-dot, labelled with value and clock; measured solid; datasheet dashed
        # the tensor roof is the dense rate: 4096 x 132 SMs x 1.59 GHz
        assert lines["ncu tensor bf16 dense @ 1.59 GHz: 857 TFLOP/s"] == "-."
        assert lines["ncu fp32 @ 1.59 GHz: 53.6 TFLOP/s"] == "-."
        assert lines["ncu DRAM: 3.34 TB/s"] == "-."
        assert lines["ncu L2: 13 TB/s"] == "-." and "ncu L1: 107 TB/s" in lines
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
        slowest = points[points["performance_flop_s"] > 0]["performance_flop_s"].min()
        assert high > 989e12 and low < slowest  # every roof and every kernel in view
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
    ceilings = {"measured": {"gemm_flop_s": {"fp32": 1e12}, "memory_bandwidth_bytes_s": 2e10}}
    keys = {"model": "m", "precision": "fp32", "batch_size": 32, "variant": "baseline"}
    request = FigureRequest("roofline", "cpu", **keys)
    figure = plots.config_figure(points, NO_KERNELS, ceilings, request)
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
        assert "ncu tensor bf16 dense @ 1.59 GHz: 857 TFLOP/s" in lines
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
        legend = _legend_texts(ax)
        assert "analytic (algorithmic bytes)" in legend and "ncu (DRAM bytes)" in legend
        assert "resnet18 / bf16" in legend
        # One ncu (DRAM) and one analytic step: the CPU one is left out.
        assert [t.get_text() for t in ax.texts] == ["bs256 baseline", "bs256 baseline"]
        lines = _lines(ax)
        assert "ncu tensor bf16 dense @ 1.59 GHz: 857 TFLOP/s" in lines
        assert "datasheet bf16: 989 TFLOP/s" in lines
    finally:
        plt.close(figure)


def test_a_roofline_figure_leaves_later_figures_styled_as_before(h100, tmp_path):
    """The figures' seaborn theme is theirs alone: a figure drawn after a roofline in the same
    process looks as it would have before it."""
    table, points = h100
    before = dict(matplotlib.rcParams)
    plt.close(
        plots.config_figure(points, table, JSON_DOC, FigureRequest("roofline", **H100_CONFIG))
    )
    plt.close(plots.device_figure(points, table, JSON_DOC, "cuda"))
    assert dict(matplotlib.rcParams) == before


# --- labels that never overlap ----------------------------------------------------------


def _label_boxes(figure) -> list:
    """The rendered box of every text on the figure's roofline axes (text only, not the
    leader line), after a real draw."""
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    return [Text.get_window_extent(t, renderer) for t in figure.axes[0].texts]


def _overlapping(boxes) -> list[tuple[int, int]]:
    return [
        (i, j) for (i, a), (j, b) in itertools.combinations(enumerate(boxes), 2) if a.overlaps(b)
    ]


def _inside(box, frame) -> bool:
    return frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1


def _crowded_steps(variants, batch_sizes=(256, 257)) -> pd.DataFrame:
    """Analytic step points of one model at almost the same intensity and FLOP/s: batch
    sizes 256 and 257 (intensity within 0.1%), step times 0.2% apart."""
    times = {
        ("cuda", "resnet18", "bf16", batch_size, variant): 0.12 * (1 + 0.002 * i)
        for i, (batch_size, variant) in enumerate(itertools.product(batch_sizes, variants))
    }
    return roofline.analytic_points({"resnet18": RESNET18}, times)


def test_labels_of_close_step_points_never_overlap_and_stay_inside_the_axes():
    variants = ("baseline", "tuned", "compiled", "channels_last")
    points = _crowded_steps(variants)
    figure = plots.device_figure(points, NO_KERNELS, JSON_DOC, "cuda")
    try:
        ax = figure.axes[0]
        texts = sorted(t.get_text() for t in ax.texts)
        assert texts == sorted(f"bs{b} {v}" for b in (256, 257) for v in variants)
        boxes = _label_boxes(figure)
        assert _overlapping(boxes) == []
        frame, page = ax.get_window_extent(), figure.bbox
        assert all(_inside(box, frame) and _inside(box, page) for box in boxes)
        # No label hides a point: every marker's centre lies outside every label.
        (markers,) = [c for c in ax.collections if len(c.get_offsets()) == len(points)]
        centres = markers.get_offset_transform().transform(markers.get_offsets())
        assert not any(box.contains(x, y) for box in boxes for x, y in centres)
    finally:
        plt.close(figure)


def test_labels_without_room_are_numbered_and_named_in_a_key():
    # 60 configurations on one spot: not every name fits around it.
    variants = [f"variant{i:02d}" for i in range(30)]
    figure = plots.device_figure(_crowded_steps(variants), NO_KERNELS, JSON_DOC, "cuda")
    try:
        ax = figure.axes[0]
        *labels, key = ax.texts
        assert key.get_text().startswith("Points labelled by number:\n")
        lines = key.get_text().splitlines()[1:]
        named = {t.get_text() for t in labels if not t.get_text().startswith("[")}
        numbers = [t.get_text() for t in labels if t.get_text().startswith("[")]
        assert numbers and [line.split()[0] for line in lines[: len(numbers)]] == [
            f"[{i}]" for i in range(1, len(numbers) + 1)
        ]
        # Every configuration is named once: beside its point or in the key.
        in_key = {" ".join(line.split()[1:3]) for line in lines[: len(numbers)]}
        in_key |= {line.split(":")[0] for line in lines[len(numbers) :]}
        everyone = {f"bs{b} {v}" for b in (256, 257) for v in variants}
        assert named | in_key == everyone and not named & in_key
        boxes = _label_boxes(figure)[:-1]
        assert _overlapping(boxes) == []
        assert all(_inside(box, ax.get_window_extent()) for box in boxes)
    finally:
        plt.close(figure)


def test_step_points_of_the_hierarchical_roofline_are_labelled_apart(h100):
    table, points = h100
    figure = plots.config_figure(points, table, {}, FigureRequest("roofline", **H100_CONFIG))
    try:
        ax = figure.axes[0]
        assert sorted(t.get_text() for t in ax.texts) == ["step, DRAM", "step, L1", "step, L2"]
        boxes = _label_boxes(figure)
        assert _overlapping(boxes) == []
        assert all(_inside(box, ax.get_window_extent()) for box in boxes)
    finally:
        plt.close(figure)


# --- a CPU without bf16 arithmetic: no derived bf16 roof ---------------------------------


def test_a_null_derived_bf16_roof_is_left_out_and_explained():
    sheet = peaks.derived_cpu_peak(parse_cpuinfo(CPUINFO_NO_BF16), 2, 2.45e9, "test")
    assert sheet["flop_s"]["bf16"] is None
    ceilings = {
        "measured": {
            "gemm_flop_s": {"fp32": 69e9, "bf16": 0.84e9},
            "memory_bandwidth_bytes_s": 1e10,
        },
        "datasheet": sheet,
    }
    model = {
        "model": "m",
        "train_step_flops_per_image": 1e9,
        "traffic": {p: {"fixed_bytes": 1e7, "per_image_bytes": 1e6} for p in ("fp32", "bf16")},
    }
    points = roofline.analytic_points(
        {"m": model},
        {("cpu", "m", "fp32", 32, "baseline"): 0.8, ("cpu", "m", "bf16", 32, "baseline"): 40.0},
    )
    request = FigureRequest(
        kind="roofline",
        device="cpu",
        model="m",
        precision="bf16",
        batch_size=32,
        variant="baseline",
    )
    for figure in (
        plots.device_figure(points, NO_KERNELS, ceilings, "cpu"),
        plots.config_figure(points, NO_KERNELS, ceilings, request),
    ):
        try:
            ax = figure.axes[0]
            lines = _lines(ax)
            assert "measured bf16: 840 MFLOP/s" in lines
            assert not any(label.startswith(("datasheet bf16", "derived bf16")) for label in lines)
            legend = [" ".join(text.split()) for text in _legend_texts(ax)]
            assert (
                "no derived bf16 peak: no native bf16 arithmetic (flags lack amx_bf16, "
                "avx512_bf16, avx_ne_convert): bf16 runs emulated, no derived peak"
            ) in legend
        finally:
            plt.close(figure)
    # The fp32 roof is still drawn, from the same derived entry, labelled derived (dotted),
    # never datasheet.
    figure = plots.device_figure(points, NO_KERNELS, ceilings, "cpu")
    try:
        lines = _lines(figure.axes[0])
        assert lines["derived fp32: 157 GFLOP/s"] == ":"
        assert not any(label.startswith("datasheet") for label in lines)
    finally:
        plt.close(figure)


def test_a_device_whose_every_configuration_ended_over_budget_still_gets_its_figure(tmp_path):
    """No step was timed, so roofline_points.csv has a header only (text columns when read
    back): the step figure shows the roofs and no point instead of failing the job."""
    points = tmp_path / "roofline_points.csv"
    points.write_text(",".join(roofline.POINT_COLUMNS) + "\n")
    ceilings = tmp_path / "cpu.json"
    files.write_json(
        ceilings,
        {
            "device": "cpu",
            "measured": {"gemm_flop_s": {"fp32": 6.9e10}, "memory_bandwidth_bytes_s": 1e10},
        },
    )
    out = tmp_path / "cpu.png"
    plots.write_figure(
        FigureRequest(kind="roofline_steps", device="cpu"), points, ceilings, None, out
    )
    assert out.read_bytes().startswith(b"\x89PNG")


def test_a_profiled_configuration_names_its_clocks_under_the_title(h100):
    """The profile's clocks (and a flagged roof) sit under the title; another configuration's
    profile adds nothing."""
    table, points = h100
    request = FigureRequest("roofline", **H100_CONFIG)
    profile = {"profiled_sm_clock_hz": 1.59e9, "clock_control": "base", "run_sm_clock_hz": 1.98e9}
    profile |= {"busy_share": 0.93, "step_time_s": 0.12, "busy_verdict": "device-bound"}
    profiles = pd.DataFrame([{**H100_CONFIG, **profile, "roof_ok": False}])
    titles = {}
    for name, frame in (("other", profiles.assign(batch_size=128)), ("own", profiles)):
        figure = plots.config_figure(points, table, JSON_DOC, request, frame)
        titles[name] = figure.axes[0].get_title()
        plt.close(figure)
    assert titles["other"] == "cuda resnet18 bf16 bs256 baseline: hierarchical roofline (ncu)"
    assert titles["own"] == titles["other"] + "\n" + (
        "profiled at 1.59 GHz SM clock (ncu clock control base); timed runs at 1.98 GHz; "
        "GPU busy 93% of the 120 ms timed step (device-bound); "
        "profile roof FLAGGED by its calibration GEMM"
    )
