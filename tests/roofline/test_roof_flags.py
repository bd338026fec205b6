"""No point above its roof unremarked, and a derived peak never called a datasheet figure: the
committed CPU example's fp32 bs32 tuned step (181 GFLOP/s) against its 2-core EPYC's derived
peak (166 GFLOP/s) and against a 165 GFLOP/s 1024³ GEMM roof."""

from __future__ import annotations

import pandas as pd
import pytest

from nnperf.report.wording.words import sentences
from nnperf.report.bounds import roofline_readings, roofline_verdicts
from nnperf.report.format import cells
from nnperf.report.plots import roofline as roofline_plots
from nnperf.report.sections import ceilings as ceilings_section
from nnperf.report.sections import notes
from nnperf.report.sections import roofline as roofline_section
from nnperf.report.wording import roofline as roofline_words
from nnperf.roofline import peaks
from nnperf.roofline import points as roofline
from nnperf.roofline import tables as roofline_tables

MACHINE = "AMD EPYC (vm)"
DERIVED = {
    "key": "cpu_derived",
    "name": "AMD EPYC (derived peak)",
    "device": "cpu",
    "flop_s": {"fp32": 166.15e9, "bf16": 332.3e9},
    "flop_s_null_reasons": {},
    "memory_bandwidth_bytes_s": None,
    "source": "derived, not a datasheet: 2 cores x 2.596 GHz x FLOP/cycle",
    "derived": True,
    "clock_hz": 2.596e9,
    "clock_source": "/proc/cpuinfo 'cpu MHz'",
}


def ceilings(gemm_fp32=198e9, size=512, datasheet=DERIVED) -> dict:
    return {
        "machine": MACHINE,
        "device": "cpu",
        "device_name": "AMD EPYC",
        "measured": {
            "gemm_flop_s": {"fp32": gemm_fp32, "bf16": 430e9},
            "memory_bandwidth_bytes_s": 33.6e9,
            "gemm": {"fp32": {"best_size": size, "best_flop_s": gemm_fp32}},
        },
        "datasheet": datasheet,
    }


def step_point(performance=181e9, intensity=70.0, variant="tuned") -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "machine": MACHINE,
                "device": "cpu",
                "model": "resnet18_cifar",
                "precision": "fp32",
                "batch_size": 32,
                "variant": variant,
                "source": "analytic",
                "granularity": "step",
                "kernel_name": "",
                "kind": "",
                "memory_level": "algorithmic",
                "flops": performance * 0.1,
                "bytes": performance * 0.1 / intensity,
                "time_s": 0.1,
                "arithmetic_intensity_flop_per_byte": intensity,
                "performance_flop_s": performance,
            }
        ]
    )


def flagged(point: pd.DataFrame, documents) -> pd.DataFrame:
    verdicts = roofline_verdicts(roofline_readings(point, documents))
    return roofline_section.above_roof(verdicts, documents)


def test_a_derived_peak_is_named_derived_never_datasheet():
    assert peaks.peak_origin(DERIVED) == "derived"
    assert peaks.peak_origin({"name": "H100", "derived": False}) == "datasheet"
    assert peaks.peak_origin(None) == "datasheet"
    roofs = roofline.json_ceilings(ceilings(), ["fp32"])
    assert [(r["label"], r["origin"]) for r in roofs] == [
        ("measured fp32", "measured"),
        ("measured memory", "measured"),
        ("derived fp32", "derived"),
    ]
    table = cells(ceilings_section.ceilings_table([ceilings()]), ceilings_section.CEILING_COLUMNS)
    assert "Datasheet" not in table.columns
    assert table["Peak is"].tolist()[:2] == ["derived", "derived"]
    assert pd.isna(table["Peak is"][2])  # no derived bandwidth: the page shows a dash
    assert "Derived" not in str(roofline_plots.null_roof_notes(ceilings(), ["fp32"]))


def test_a_measured_roof_above_its_derived_peak_is_remarked():
    table = ceilings_section.ceilings_table([ceilings()])
    records = ceilings_section.peak_records([], table)
    assert [r.about["roof"] for r in records] == ["fp32 GEMM", "bf16 GEMM"]
    assert records[0].numbers["ratio"] == pytest.approx(198 / 166.15, rel=1e-3)
    fp32, bf16 = (roofline_words.sentence(r) for r in records)
    assert fp32.startswith(
        f"{MACHINE}: the measured fp32 GEMM (198 GFLOP/s) is 119% of the derived peak "
        "(166 GFLOP/s): that peak is too low"
    )
    assert "boost" in fp32 and "bf16 GEMM" in bf16


def test_a_point_above_the_derived_peak_is_flagged_with_a_sentence():
    rows = flagged(step_point(), [ceilings()])
    derived = rows[rows["roof_name"] == "derived"].iloc[0]
    assert derived["roof"] == "datasheet"  # bounds' origin key, relabelled for the reader
    assert bool(derived["above_roof"]) and derived["above_fraction"] == pytest.approx(181 / 166.15)
    measured = rows[rows["roof_name"] == "measured"].iloc[0]
    assert not measured["above_roof"]  # 181 of 198 GFLOP/s: 91%
    (record,) = roofline_section.above_roof_records(rows, [ceilings()])
    assert (record.about["roof"], record.about["against"]) == ("derived", "compute")
    assert record.numbers["clock_hz"] == DERIVED["clock_hz"]
    sentence = roofline_words.sentence(record)
    assert sentence.startswith(
        f"resnet18_cifar fp32 at batch 32 (tuned) on {MACHINE} reached 181 GFLOP/s, 109% of "
        "the 166 GFLOP/s derived fp32 peak: the roof is under-measured (a derived peak is cores "
        "x clock x FLOP/cycle, and the clock it used (2.60 GHz"
    )
    findings = roofline_section.roofline_findings(rows, None, None, [ceilings()])
    assert findings == [record]
    display = cells(rows, roofline_section.READING_COLUMNS)
    assert display["Roofs"].tolist() == ["derived", "measured"]
    assert display["Above roof"].tolist() == ["yes, 109% of peak: roof under-measured", ""]


def test_a_point_above_a_1024_gemm_roof_calls_the_roof_under_measured():
    documents = [ceilings(gemm_fp32=165e9, size=1024, datasheet=None)]
    rows = flagged(step_point(), documents)
    (record,) = roofline_section.above_roof_records(rows, documents)
    assert record.numbers["gemm_size"] == 1024
    assert roofline_words.sentence(record) == (
        f"resnet18_cifar fp32 at batch 32 (tuned) on {MACHINE} reached 181 GFLOP/s, 110% of the "
        "165 GFLOP/s measured fp32 GEMM roof: the roof is under-measured (a 1024³ GEMM does not "
        "reach this CPU's peak)."
    )
    # A point within its roof is not flagged.
    assert not flagged(step_point(performance=150e9), documents)["above_roof"].any()


def test_a_point_above_its_memory_roof_blames_the_bytes_or_the_bandwidth():
    # Intensity 2 FLOP/B x 33.6 GB/s = 67 GFLOP/s attainable, below the point's 100 GFLOP/s.
    documents = [ceilings(datasheet=None)]
    rows = flagged(step_point(performance=100e9, intensity=2.0), documents)
    (record,) = roofline_section.above_roof_records(rows, documents)
    assert record.about["against"] == "bandwidth"
    sentence = roofline_words.sentence(record)
    assert "of the 67.2 GFLOP/s measured main memory bandwidth roof at its intensity" in sentence
    assert "caches serve part of the traffic" in sentence


def test_notes_name_the_derived_roof():
    rows = roofline_verdicts(roofline_readings(step_point(performance=250e9), [ceilings()]))
    text = " ".join(sentences(notes.roof_violation_notes(rows, [ceilings()])))
    assert "above the measured roofs" in text and "datasheet" not in text


def test_roofs_exceeded_by_precision_and_level():
    roofs = roofline.json_ceilings(ceilings(), ["fp32", "bf16"])
    point = step_point().iloc[0].to_dict()
    exceeded = roofline.roofs_exceeded(point, roofs)
    assert [(r["label"], round(r["fraction"], 2)) for r in exceeded] == [("derived fp32", 1.09)]
    # The bf16 roofs bound bf16 points only; a dram point is bounded by the memory roof too.
    slow = {**point, "arithmetic_intensity_flop_per_byte": 2.0, "memory_level": "dram"}
    assert [r["label"] for r in roofline.roofs_exceeded(slow, roofs)] == [
        "measured memory",
        "derived fp32",
    ]
    assert (
        roofline.roofs_exceeded({**point, "memory_level": "l1", "precision": "bf16"}, roofs) == []
    )


def test_the_step_figure_rings_a_point_above_its_roof():
    points = pd.concat([step_point(), step_point(performance=120e9, variant="baseline")])
    no_kernels = roofline_tables.read_kernels(None)
    figure = roofline_plots.device_figure(points, no_kernels, ceilings(), "cpu")
    ax = figure.axes[0]
    _, labels = ax.get_legend_handles_labels()
    assert labels.count(roofline_plots.ABOVE_ROOF_LABEL) == 1
    assert any("derived fp32" in label for label in labels)
    texts = [t.get_text() for t in ax.texts]
    assert "bs32 tuned, above roof" in texts and "bs32 baseline" in texts
