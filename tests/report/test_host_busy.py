"""A configuration left without enough clean windows (status `host_busy`, issue 31) keeps its
numbers in summary.csv but is never a point on a figure, a speedup or a roofline point; the
Notes name it with its discarded windows."""

from __future__ import annotations

from matplotlib.collections import LineCollection

from nnperf.report import aggregate
from nnperf.report.comparisons import comparisons_table
from nnperf.report.plots import runs as plots
from nnperf.report.sections.notes import status_notes
from nnperf.report.wording.words import sentences
from nnperf.roofline import points as roofline
from test_aggregate import run_document, study


def _busy_study():
    documents = study()
    # A measured configuration whose host was busy: its numbers stay, its status says no.
    busy = run_document("bf16", 64, windows=((50.0, 52.0), (51.0,)), start=10_000.0)
    busy.update(
        status="host_busy",
        discarded_windows=7,
        discarded_causes={"host_overloaded": 7, "cpu_steal": 0},
    )
    return documents + [busy], busy


def _tables(documents):
    pairs = [(f"doc{i}.json", d) for i, d in enumerate(documents)]
    runs = aggregate.runs_table(pairs)
    return runs, aggregate.summary_table(pairs, runs)


def test_host_busy_keeps_its_numbers_but_is_never_drawn_compared_or_a_roofline_point():
    documents, busy = _busy_study()
    runs, summary = _tables(documents)
    row = summary[summary["status"] == "host_busy"].iloc[0]
    assert row["throughput_img_s_mean"] == busy["throughput_img_s"]
    assert (row["discarded_windows"], row["discarded_host_overloaded"]) == (7, 7)
    # The figure: no point and no error bar at its numbers, a labelled mark instead.
    (ax,) = plots.throughput_figure(summary, "cpu", "tiny", runs).axes
    drawn = {
        round(float(y), 6)
        for line in ax.lines
        for y in line.get_ydata()
        if line.get_marker() not in (None, "None", "")
    }
    assert round(float(row["throughput_img_s_mean"]), 6) not in drawn
    bars = {
        round(float(a[1]), 6)
        for c in ax.collections
        if isinstance(c, LineCollection)
        for a, _ in c.get_segments()
    }
    assert round(float(row["throughput_img_s_ci95_low"]), 6) not in bars
    assert "host busy" in [line for t in ax.texts for line in t.get_text().split("\n")]
    assert any(t.get_text().startswith("host busy") for t in ax.get_legend().get_texts())
    # No speedup names it, and it gives no roofline point.
    speedups = comparisons_table(summary, runs)
    assert not speedups.empty
    for side in ("a", "b"):
        named = (speedups[f"{side}_precision"] == "bf16") & (
            speedups[f"{side}_batch_size"].astype(float) == 64
        )
        assert not named.any()
    assert ("cpu", "tiny", "bf16", 64, "baseline") not in roofline.step_times(summary)


def test_host_busy_is_noted_with_its_discarded_windows():
    documents, _ = _busy_study()
    _, summary = _tables(documents)
    summary["machine"] = "box"
    (note,) = sentences(status_notes(summary, None, "host_busy"))
    assert note.startswith("Host busy: tiny bf16 at batch 64 (baseline) on box was not measured")
    assert "7 windows ran beside other load and were left out, 3 clean windows remained" in note
    assert "no point on a figure, no roofline point and no speedup" in note
