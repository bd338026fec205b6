"""pyperf-style statistics beside the mean, median and CI: min, max and Tukey outliers (1.5 IQR
beyond the quartiles, as pyperf's `stats` counts them) of the window throughputs, in
summary.csv and in the report's measurement table."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nnperf.core import stats
from nnperf.report import aggregate, noise
from nnperf.report.sections import measurement


def test_tukey_fences_by_hand():
    # Quartiles (type 7) of 1..8: 2.75 and 6.25, IQR 3.5; fences 2.75 - 5.25, 6.25 + 5.25.
    assert stats.tukey_fences(range(1, 9)) == pytest.approx((-2.5, 11.5))
    assert stats.tukey_outliers([1, 2, 3, 4, 5, 6, 7, 8]) == []
    assert stats.tukey_outliers([1, 2, 3, 4, 5, 6, 7, 30]) == [7]
    assert stats.tukey_outliers([-30, 2, 3, 4, 5, 6, 7, 8, math.nan]) == [0]


def test_too_few_values_have_no_outliers():
    assert stats.tukey_outliers([1.0, 2.0, 100.0]) == []
    assert stats.tukey_outliers([]) == []
    assert all(math.isnan(x) for x in stats.tukey_fences([]))


@given(st.lists(st.floats(-1e6, 1e6), min_size=4, max_size=40))
def test_outliers_are_exactly_the_values_outside_the_fences(values):
    low, high = stats.tukey_fences(values)
    found = stats.tukey_outliers(values)
    assert found == [i for i, x in enumerate(values) if x < low or x > high]
    assert len(found) <= len(values) // 2 + 1


def test_spread_columns_name_the_outlying_windows():
    windows = [
        {"process": p, "window": w, "throughput_img_s": rate}
        for p, rates in enumerate(([100, 101, 99, 100], [100, 60, 101, 99]))
        for w, rate in enumerate(rates)
    ]
    windows.append({"process": 2, "window": 0, "throughput_img_s": 150})
    assert noise.spread_columns(windows) == {
        "throughput_img_s_min": 60,
        "throughput_img_s_max": 150,
        "outliers": 2,
        "outlier_windows": "p1w1, p2w0",
    }
    assert noise.spread_columns([]) == {
        "throughput_img_s_min": None,
        "throughput_img_s_max": None,
        "outliers": None,
        "outlier_windows": "",
    }


def test_summary_row_and_measurement_table_show_min_max_outliers():
    from test_aggregate import run_document

    document = run_document(windows=((100.0, 101.0, 99.0, 100.0), (100.0, 60.0, 101.0, 99.0)))
    row = aggregate.summary_row(document)
    assert (row["throughput_img_s_min"], row["throughput_img_s_max"]) == (60.0, 101.0)
    assert (row["outliers"], row["outlier_windows"]) == (1, "p1w1")
    summary = pd.DataFrame([{**row, "machine": "vm"}])
    display = measurement.measurement_display(measurement.measurement_table(summary))
    assert display["Min–max (img/s)"].tolist() == ["60.0–101"]
    assert display["Outliers"].tolist() == ["1: p1w1"]
