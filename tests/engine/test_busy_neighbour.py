"""benchmarks/busy_neighbour.py's judgement of one study against another, on made-up rows."""

from __future__ import annotations

import pandas as pd

from benchmark_scripts import load_benchmark

busy_neighbour = load_benchmark("busy_neighbour")


def row(mean: float, low: float, high: float) -> pd.Series:
    return pd.Series({"throughput_img_s_mean": mean, "ci_low": low, "ci_high": high})


def test_a_study_is_judged_both_ways_against_the_quiet_one():
    quiet = row(45.6, 41.9, 49.5)
    narrow_and_low = busy_neighbour.judged(row(41.0, 39.7, 42.3), quiet)
    assert "it in its CI False" in narrow_and_low and "it in ours False" in narrow_and_low
    assert narrow_and_low.endswith(f"width x{2.6 / 7.6:.2f}")
    wide = busy_neighbour.judged(row(44.1, 30.4, 59.6), quiet)
    assert "it in its CI True " in wide and "it in ours True " in wide


def test_the_paired_ratio_is_tuned_over_baseline(tmp_path):
    tables = tmp_path / busy_neighbour.TABLES
    tables.mkdir(parents=True)
    pd.DataFrame(
        [
            {"a_variant": "baseline", "b_variant": "tuned", "ratio": 0.9},
            {"a_variant": "tuned", "b_variant": "baseline", "ratio": 1.08},
        ]
    ).to_csv(tables / "comparisons.csv", index=False)
    assert busy_neighbour.tuned_over_baseline(tmp_path).ratio == 1.08
