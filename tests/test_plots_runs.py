"""Figures of the timed runs, inspected as matplotlib Figures and as the files `draw` writes."""

from __future__ import annotations

import pytest

from nnperf import aggregate, layout
from nnperf.contract import FigureRequest
from nnperf.errors import NnperfError
from nnperf.files import write_csv
from nnperf.plots import runs as plots
from nnperf.vocab import PHASES
from tiny_training import STUDY_OOM_BATCH, study_documents

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def tables():
    runs = aggregate.runs_table([(str(i), d) for i, d in enumerate(study_documents())])
    return runs, aggregate.summary_table(runs)


def test_throughput_figure(tables):
    runs, _ = tables
    fig = plots.throughput_figure(runs, "cpu", "tiny")
    (ax,) = fig.axes
    assert ax.get_xlabel() == "batch size"
    assert ax.get_ylabel() == "throughput (images/s)"
    assert "tiny on cpu" in ax.get_title()
    assert [int(t) for t in ax.get_xticks()] == [4, 8, STUDY_OOM_BATCH]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {"fp32", "bf16", "baseline", "tuned"} <= set(legend)
    assert any(label.startswith("out of memory") for label in legend)
    assert any(t.get_text() == "OOM" for t in ax.texts)
    # One line per (precision, variant) with points: fp32/baseline, fp32/tuned, bf16/baseline;
    # their y data are the medians of the reps.
    medians = (
        runs[runs.status == "ok"]
        .groupby(["precision", "variant", "batch_size"])["throughput_img_s"]
        .median()
    )
    drawn = {
        round(float(y), 6)
        for line in ax.lines
        for y in line.get_ydata()
        if len(line.get_xdata()) and line.get_marker() not in (None, "None", "")
    }
    assert {round(float(v), 6) for v in medians} <= drawn


def test_breakdown_figure(tables):
    _, summary = tables
    fig = plots.breakdown_figure(summary, "cpu", "tiny")
    (ax,) = fig.axes
    assert ax.get_ylabel() == "median time per step (ms)"
    assert ax.get_xlabel().startswith("configuration")
    n_configs = int((summary.status == "ok").sum())
    assert len(ax.patches) == n_configs * len(PHASES)  # one stacked segment per phase per bar
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(PHASES)
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert "bs8\nfp32\ntuned" in labels and len(labels) == n_configs
    # Patches come phase by phase (one per bar each); their heights are the phase medians in ms.
    ok = summary[summary.status == "ok"]
    for k, phase in enumerate(PHASES):
        segment = ax.patches[k * n_configs : (k + 1) * n_configs]
        assert sum(p.get_height() for p in segment) == pytest.approx(
            ok[f"{phase}_s_median"].sum() * 1e3
        )


def test_speedup_figure(tables):
    _, summary = tables
    fig = plots.speedup_figure(summary, "cpu", "tiny")
    left, right = fig.axes[:2]
    assert left.get_ylabel() == "speedup vs fp32 (x)"
    assert right.get_ylabel() == "speedup vs baseline variant (x)"
    assert left.get_xlabel() == right.get_xlabel() == "batch size"
    bf16 = summary[(summary.precision == "bf16") & (summary.status == "ok")]
    heights = sorted(round(p.get_height(), 9) for p in left.patches if p.get_height() > 0)
    assert heights == sorted(round(v, 9) for v in bf16["speedup_vs_fp32"])
    tuned = summary[summary.variant == "tuned"]
    assert [round(p.get_height(), 9) for p in right.patches if p.get_height() > 0] == [
        round(float(tuned["speedup_vs_baseline"].iloc[0]), 9)
    ]


def test_unknown_device_or_model_is_a_clear_error(tables):
    runs, summary = tables
    with pytest.raises(
        NnperfError,
        match=r"^runs table has no rows for device/model " r"cuda/tiny; allowed: cpu/tiny",
    ):
        plots.throughput_figure(runs, "cuda", "tiny")
    with pytest.raises(
        NnperfError,
        match=r"^figure kind 'pie' is unknown; allowed: " r"throughput, breakdown, speedup",
    ):
        plots.figure(FigureRequest(kind="pie", device="cpu", model="tiny"), summary)
    with pytest.raises(NnperfError, match=r"^speedup figure: model is missing"):
        plots.figure(FigureRequest(kind="speedup", device="cpu"), summary)
    assert plots.FIGURE_KINDS == layout.RUN_FIGURE_KINDS


def test_draw_writes_one_png_per_figure(tables, tmp_path, capsys):
    runs, summary = tables
    write_csv(tmp_path / "runs.csv", runs)
    write_csv(tmp_path / "summary.csv", summary)
    table_of = {"throughput": "runs.csv", "breakdown": "summary.csv", "speedup": "summary.csv"}
    for kind in plots.FIGURE_KINDS:
        out = tmp_path / "figures" / kind / "cpu" / "tiny.png"
        plots.draw(
            FigureRequest(kind=kind, device="cpu", model="tiny"), tmp_path / table_of[kind], out
        )
        data = out.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000
        assert sorted(p.name for p in out.parent.iterdir()) == ["tiny.png"]  # no temp left
        assert f"{kind} figure of cpu/tiny -> {out}" in capsys.readouterr().out
    with pytest.raises(NnperfError, match=r"missing\.csv: file not found"):
        plots.draw(
            FigureRequest(kind="speedup", device="cpu", model="tiny"),
            tmp_path / "missing.csv",
            tmp_path / "x.png",
        )
    assert not (tmp_path / "x.png").exists()
