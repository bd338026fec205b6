"""Figures of the timed runs, inspected as matplotlib Figures and as the files `draw` writes.

The tables come from `nnperf.report.aggregate` applied to run documents in the runner's format
(`test_aggregate.study`: measured, single-process, over-budget and out-of-memory
configurations of one model), so the figures are tested on what the pipeline really writes.
"""

from __future__ import annotations

import itertools

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection, PathCollection
from matplotlib.container import ErrorbarContainer

from nnperf.core import layout
from nnperf.core.contract import FigureRequest
from nnperf.core.errors import NnperfError
from nnperf.core.files import write_csv
from nnperf.core.vocab import PHASES
from nnperf.report import aggregate
from nnperf.report.plots import runs as plots
from test_aggregate import run_document, study

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _tables(documents):
    pairs = [(f"doc{i}.json", d) for i, d in enumerate(documents)]
    runs = aggregate.runs_table(pairs)
    return runs, aggregate.summary_table(pairs, runs)


@pytest.fixture(scope="module")
def tables():
    return _tables(study())


def _rounded(values):
    return {round(float(v), 6) for v in values}


def test_throughput_figure_shows_estimates_intervals_and_processes(tables):
    runs, summary = tables
    fig = plots.throughput_figure(summary, "cpu", "tiny", runs)
    (ax,) = fig.axes
    assert ax.get_xlabel() == "batch size"
    assert ax.get_ylabel() == "throughput (images/s)"
    assert "tiny on cpu" in ax.get_title() and "95% CI" in ax.get_title()
    assert [int(t) for t in ax.get_xticks()] == [8, 16, 64]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {"fp32", "bf16", "baseline", "tuned", plots.PROCESS_LABEL} <= set(legend)
    assert "out of memory" in legend
    assert any(label.startswith("over budget") for label in legend)
    ok = summary[summary.status == "ok"]
    # The estimates are the lines' points: the mean of the processes, not the window median.
    drawn = {
        round(float(y), 6)
        for line in ax.lines
        for y in line.get_ydata()
        if len(line.get_xdata()) and line.get_marker() not in (None, "None", "")
    }
    assert _rounded(ok["throughput_img_s_mean"]) <= drawn
    assert not _rounded(ok["throughput_img_s_median"]) & drawn
    # Error bars span the recorded CI, one per measured configuration.
    bars = {
        (round(float(a[1]), 6), round(float(b[1]), 6))
        for collection in ax.collections
        if isinstance(collection, LineCollection)
        for a, b in collection.get_segments()
    }
    assert bars == set(
        zip(
            (round(v, 6) for v in ok["throughput_img_s_ci95_low"]),
            (round(v, 6) for v in ok["throughput_img_s_ci95_high"]),
        )
    )
    # Every measured process is a point.
    points = {
        round(float(y), 6)
        for collection in ax.collections
        if isinstance(collection, PathCollection)
        for _, y in collection.get_offsets()
    }
    assert _rounded(runs.loc[runs.status == "ok", "throughput_img_s"]) <= points
    # No number for the over-budget and oom configurations: labelled notes instead.
    notes = [t.get_text() for t in ax.texts]
    assert "OOM" in notes and "over budget (13.2 s/step)" in notes


def test_throughput_figure_without_runs_draws_the_estimates_only(tables):
    _, summary = tables
    (ax,) = plots.throughput_figure(summary, "cpu", "tiny").axes
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert plots.PROCESS_LABEL not in legend
    assert not any(
        isinstance(c, PathCollection) and len(c.get_offsets()) and c.get_alpha() == 0.35
        for c in ax.collections
    )


def test_breakdown_figure(tables):
    _, summary = tables
    fig = plots.breakdown_figure(summary, "cpu", "tiny")
    (ax,) = fig.axes
    assert ax.get_ylabel() == "median time per step (ms)"
    assert ax.get_xlabel().startswith("configuration")
    ok = summary[summary.status == "ok"]
    n_ok = len(ok)
    assert len(ax.patches) == n_ok * len(PHASES)  # one stacked segment per phase per bar
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(PHASES)
    labels = [t.get_text() for t in ax.get_xticklabels()]
    # Every configuration has a tick, the ones without a number too, in the tables' order.
    assert labels == [
        "bs8 fp32 baseline",
        "bs8 fp32 tuned",
        "bs8 bf16 baseline",
        "bs16 fp32 baseline",
        "bs16 bf16 baseline",
        "bs64 fp32 baseline",
    ]
    notes = [t.get_text().strip() for t in ax.texts]
    assert notes == ["over budget (13.2 s/step)", "OOM"]
    # Patches come phase by phase (one per bar each); their heights are the phase medians in ms.
    for k, phase in enumerate(PHASES):
        segment = ax.patches[k * n_ok : (k + 1) * n_ok]
        assert sum(p.get_height() for p in segment) == pytest.approx(
            ok[f"{phase}_s_median"].sum() * 1e3
        )


def _tick_label_boxes(fig) -> list:
    """The rendered boxes of the x tick labels, from a real Agg draw."""
    FigureCanvasAgg(fig).draw()
    (ax,) = fig.axes
    return [label.get_window_extent() for label in ax.get_xticklabels()]


def _overlapping(boxes) -> list[tuple[int, int]]:
    return [
        (i, j) for (i, a), (j, b) in itertools.combinations(enumerate(boxes), 2) if a.overlaps(b)
    ]


def _breakdown_of(batch_sizes, precisions, variants):
    documents, start = [], 1e9
    for batch_size, precision, variant in itertools.product(batch_sizes, precisions, variants):
        document = run_document(precision, batch_size, variant, start=start)
        documents.append(document)
        start = document["ended_at_unix"] + 1.0
    _, summary = _tables(documents)
    return plots.breakdown_figure(summary, "cpu", "tiny")


@pytest.mark.parametrize(
    "batch_sizes,precisions,variants",
    [
        # The user's case: two variants side by side ran together ("baselinetuned").
        ((8, 64), ("fp32",), ("baseline", "tuned")),
        ((8, 64), ("fp32", "bf16"), ("baseline", "tuned")),
        ((8, 16, 32, 64), ("fp32", "bf16"), ("baseline", "tuned", "channels_last")),
    ],
)
def test_breakdown_tick_labels_never_touch(batch_sizes, precisions, variants):
    """No two tick labels' rendered boxes overlap (or touch), and all stay on the figure."""
    fig = _breakdown_of(batch_sizes, precisions, variants)
    boxes = _tick_label_boxes(fig)
    assert len(boxes) == len(batch_sizes) * len(precisions) * len(variants)
    assert _overlapping(boxes) == []
    page = fig.bbox
    assert all(page.x0 <= b.x0 and b.x1 <= page.x1 and page.y0 <= b.y0 for b in boxes)


def _comparisons(runs, summary):
    from nnperf.report.comparisons import comparisons_table

    return comparisons_table(summary, runs)


def test_speedup_figure(tables):
    runs, summary = tables
    table = _comparisons(runs, summary)
    fig = plots.speedup_figure(table, "cpu", "tiny")
    left, right = fig.axes[:2]
    assert left.get_ylabel() == "speedup vs fp32 (x)"
    assert right.get_ylabel() == "speedup vs baseline variant (x)"
    assert left.get_xlabel() == right.get_xlabel() == "batch size"
    assert "mean throughput" in fig.get_suptitle()
    bf16 = table[table.kind == "precision"]
    heights = sorted(round(p.get_height(), 9) for p in left.patches if p.get_height() > 0)
    assert heights == sorted(round(v, 9) for v in bf16["ratio"])
    tuned = table[table.kind == "variant"]
    assert [round(p.get_height(), 9) for p in right.patches if p.get_height() > 0] == [
        round(float(tuned["ratio"].iloc[0]), 9)
    ]
    assert not right.texts
    # Each drawn ratio has a whisker at its 95% CI (both are separated: no "n.s." mark).
    assert "whiskers: 95% CI of the ratio" in fig.get_suptitle()
    (whisker,) = [c for c in right.containers if isinstance(c, ErrorbarContainer)]
    (segment,) = whisker.lines[2][0].get_segments()
    assert [round(y, 6) for _, y in segment] == [
        round(float(tuned["ci95_low"].iloc[0]), 6),
        round(float(tuned["ci95_high"].iloc[0]), 6),
    ]


def test_a_speedup_whose_ci_includes_one_is_marked_not_separated():
    documents = [
        run_document("fp32", 8, windows=((100.0, 104.0), (96.0, 100.0))),
        run_document("bf16", 8, windows=((103.0, 99.0), (95.0, 101.0)), start=2e9),
    ]
    runs, summary = _tables(documents)
    table = _comparisons(runs, summary)
    assert table["verdict"].tolist() != ["faster"] and table["verdict"].tolist() != ["slower"]
    left, _ = plots.speedup_figure(table, "cpu", "tiny").axes[:2]
    assert [t.get_text() for t in left.texts] == [plots.NOT_SEPARATED]


def test_a_model_without_any_number_still_gets_its_figures(tmp_path):
    documents = [
        run_document("fp32", 8, status="over_budget", model="big"),
        run_document("fp32", 16, status="oom", model="big", start=2e9),
    ]
    runs, summary = _tables(documents)
    (ax,) = plots.throughput_figure(summary, "cpu", "big", runs).axes
    assert sorted(t.get_text() for t in ax.texts) == ["OOM", "over budget (13.2 s/step)"]
    (ax,) = plots.breakdown_figure(summary, "cpu", "big").axes
    assert not ax.patches and len(ax.texts) == 2
    left, right = plots.speedup_figure(_comparisons(runs, summary), "cpu", "big").axes[:2]
    assert [t.get_text() for t in right.texts] == ["no comparable configuration in this study"]


def test_unknown_device_or_model_is_a_clear_error(tables):
    runs, summary = tables
    with pytest.raises(
        NnperfError,
        match=r"^summary table has no rows for device/model cuda/tiny; allowed: cpu/tiny",
    ):
        plots.throughput_figure(summary, "cuda", "tiny", runs)
    with pytest.raises(
        NnperfError,
        match=r"^figure kind 'pie' is unknown; allowed: throughput, breakdown, speedup",
    ):
        plots.figure(FigureRequest(kind="pie", device="cpu", model="tiny"), summary)
    with pytest.raises(NnperfError, match=r"^speedup figure: model is missing"):
        plots.figure(FigureRequest(kind="speedup", device="cpu"), summary)
    assert plots.FIGURE_KINDS == layout.RUN_FIGURE_KINDS


def test_draw_writes_one_png_per_figure(tables, tmp_path, capsys):
    runs, summary = tables
    write_csv(tmp_path / "runs.csv", runs)
    write_csv(tmp_path / "summary.csv", summary)
    write_csv(tmp_path / "comparisons.csv", _comparisons(runs, summary))
    for kind in plots.FIGURE_KINDS:
        out = tmp_path / "figures" / kind / "cpu" / "tiny.png"
        runs_path = tmp_path / "runs.csv" if kind == "throughput" else None
        plots.draw(
            FigureRequest(kind=kind, device="cpu", model="tiny"),
            tmp_path / ("comparisons.csv" if kind == "speedup" else "summary.csv"),
            out,
            runs_path,
        )
        data = out.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000
        assert sorted(p.name for p in out.parent.iterdir()) == ["tiny.png"]  # no temp left
        assert f"{kind} figure of cpu/tiny -> {out}" in capsys.readouterr().out
    with pytest.raises(NnperfError, match=r"missing\.csv: file not found"):
        plots.draw(
            FigureRequest(kind="throughput", device="cpu", model="tiny"),
            tmp_path / "summary.csv",
            tmp_path / "x.png",
            tmp_path / "missing.csv",
        )
    assert not (tmp_path / "x.png").exists()
