"""Figures of an operator profile: top operators (host vs device time) and peak memory,
inspected as matplotlib Figures and as the files `draw` writes."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from nnperf.core.errors import NnperfError
from nnperf.core.files import write_csv
from nnperf.report.plots import operators as plots
from nnperf.torchprof import analysis as operators
from nnperf.torchprof import breakdown
from nnperf.torchprof import memory as step_memory
from op_traces import cpu_trace, cuda_trace

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
MIB = 2**20


def document(analysis, device, **fields) -> dict:
    return {
        "model": "resnet18_cifar",
        "precision": "bf16",
        "batch_size": 256,
        "variant": "baseline",
        "device": device,
        "status": "ok",
        "error": None,
        "settings": {"top_operators": 10},
        "summary": analysis.summary,
        **fields,
    }


def bar_widths(ax) -> list[float]:
    return [round(p.get_width(), 9) for p in ax.patches if p.get_width() > 0]


def test_top_operators_show_host_and_device_time_per_operator():
    analysis = operators.analyse(cuda_trace(), "cuda")
    fig = plots.top_operators_figure(document(analysis, "cuda"), analysis.operators, n=3)
    (ax,) = fig.axes
    assert ax.get_xlabel() == "time per step (ms)"
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["aten::addmm", "aten::mm", "aten::add_"]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == [plots.HOST_LABEL, plots.DEVICE_LABEL]
    # host self 12, 10, 2 µs and device self 20, 20, 2 µs, in ms.
    assert sorted(bar_widths(ax)) == sorted([0.012, 0.01, 0.002, 0.02, 0.02, 0.002])
    assert "ranked by device time" in ax.get_title()


def test_on_the_cpu_only_host_time_is_drawn_and_said_why():
    analysis = operators.analyse(cpu_trace(), "cpu")
    fig = plots.top_operators_figure(document(analysis, "cpu"), analysis.operators, n=4)
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [plots.HOST_LABEL]
    assert bar_widths(ax) == [0.016, 0.008, 0.007, 0.004]
    assert breakdown.OUTSIDE_OPERATORS_ROW not in [t.get_text() for t in ax.get_yticklabels()]
    assert "no device time" in ax.get_title()


def test_long_operator_names_are_shortened_and_labels_never_overlap():
    name = "autograd::engine::evaluate_function: ConvolutionBackward0"
    assert plots.short_label(name) == "autograd::engine::evalu…on: ConvolutionBackward0"
    assert len(plots.short_label(name)) == plots.MAX_LABEL_CHARACTERS
    assert plots.short_label("aten::mm") == "aten::mm"
    analysis = operators.analyse(cpu_trace(), "cpu")
    fig = plots.top_operators_figure(document(analysis, "cpu"), analysis.operators, n=12)
    FigureCanvasAgg(fig).draw()
    (ax,) = fig.axes
    boxes = [label.get_window_extent() for label in ax.get_yticklabels()]
    assert len(boxes) == 12
    assert not [(a, b) for a, b in itertools.combinations(boxes, 2) if a.overlaps(b)]
    page = fig.bbox
    assert all(page.x0 <= b.x0 and b.x1 <= page.x1 for b in boxes)


MEMORY = {
    "peak_allocated_bytes": 200 * MIB,
    "parameters_bytes": 40 * MIB,
    "gradients_bytes": 30 * MIB,
    "optimizer_state_bytes": 40 * MIB,
    "activations_bytes": 70 * MIB,
    "other_bytes": 20 * MIB,
    "batch_size": 16,
    "peak_phase": "backward",
    "device_total_bytes": 24 * 2**30,
    "max_batch_size": 4356,
}
COMPLEXITY = {
    "weight_bytes": 40 * MIB,
    "gradient_bytes": 40 * MIB,
    "optimizer_state_bytes": 40 * MIB,
    "saved_activation_bytes_per_image": 4 * MIB,
    "saved_activation_fixed_bytes": 0,
}


def test_memory_figure_stacks_the_peak_beside_the_complexity_estimate():
    analysis = operators.analyse(cpu_trace(), "cpu")
    table = step_memory.memory_table(MEMORY, COMPLEXITY)
    fig = plots.memory_figure(document(analysis, "cpu", memory=MEMORY), table)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "allocated memory (MiB)"
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        plots.MEASURED_LABEL,
        plots.ESTIMATE_LABEL,
    ]
    # Measured: 40 + 30 + 40 + 70 + 20; estimate: 40 + 40 + 40 + 16 x 4 (no "other").
    assert bar_widths(ax) == [40, 30, 40, 70, 20, 40, 40, 40, 64]
    segments = [p for p in ax.patches if p.get_width() > 0]
    measured, estimate = segments[:5], segments[5:]
    lefts = np.cumsum([0, 40, 30, 40, 70])
    assert [p.get_x() for p in measured] == pytest.approx(lefts)
    assert measured[3].get_facecolor() == estimate[3].get_facecolor()  # activations
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "parameters",
        "gradients",
        "optimizer state",
        "activations",
        "other",
    ]
    assert "peak 200.0 MiB (in backward)" in ax.get_title()
    assert "a batch of about 4,356 would fit" in ax.get_title()
    assert [t.get_text().strip() for t in ax.texts] == ["200.0 MiB", "184.0 MiB"]


def test_without_an_estimate_only_the_measured_bar():
    analysis = operators.analyse(cpu_trace(), "cpu")
    table = step_memory.memory_table(MEMORY)
    (ax,) = plots.memory_figure(document(analysis, "cpu", memory=MEMORY), table).axes
    assert [t.get_text() for t in ax.get_yticklabels()] == [plots.MEASURED_LABEL]


@pytest.mark.parametrize("kind", plots.FIGURES)
def test_a_profile_that_did_not_run_gets_a_figure_with_its_reason(kind):
    doc = {
        "model": "resnet18_cifar",
        "precision": "bf16",
        "batch_size": 32,
        "variant": "baseline",
        "device": "cpu",
        "status": "over_budget",
        "error": "one warm-up and one profiled step need about 65.0 s",
    }
    fig = plots.figure(kind, doc, step_memory.memory_table(None))
    (ax,) = fig.axes
    (text,) = [t.get_text() for t in ax.texts]
    assert text.startswith("not profiled (over_budget):") and "65.0 s" in text


def test_draw_writes_pngs_from_the_files(tmp_path):
    analysis = operators.analyse(cuda_trace(), "cuda")
    doc = document(analysis, "cuda", memory=MEMORY)
    (tmp_path / "profile.json").write_text(json.dumps(doc))
    write_csv(tmp_path / "operators.csv", analysis.operators)
    write_csv(tmp_path / "memory.csv", step_memory.memory_table(MEMORY, COMPLEXITY))
    for kind, table in (("operators", "operators.csv"), ("memory", "memory.csv")):
        out = tmp_path / "figures" / f"{kind}.png"
        plots.draw(kind, tmp_path / "profile.json", tmp_path / table, out)
        assert out.read_bytes()[:8] == PNG_MAGIC
    with pytest.raises(NnperfError, match="figure kind 'kernels' is unknown"):
        plots.draw("kernels", tmp_path / "profile.json", tmp_path / "memory.csv", out)
    with pytest.raises(NnperfError, match="file not found"):
        plots.draw("memory", tmp_path / "profile.json", tmp_path / "missing.csv", out)
