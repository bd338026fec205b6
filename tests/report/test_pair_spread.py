"""benchmarks/pair_spread.py's arithmetic on a made-up runs.csv: the comparisons a group
states, their pairing grain, and the round-to-round spread of their log ratios."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from benchmark_scripts import load_benchmark


def _runs(shared: bool) -> pd.DataFrame:
    rows = []
    rates = {
        ("fp32", "baseline"): [100.0, 90.0, 110.0, 95.0],
        ("fp32", "tuned"): [110.0, 99.0, 121.0, 104.5],  # 1.10 in every round
        ("bf16", "baseline"): [150.0, 144.0, 143.0, 152.0],
    }
    names = {key: f"{key[0]}_{key[1]}" for key in rates}
    for key, values in rates.items():
        for round_index, rate in enumerate(values):
            partners = [n for k, n in names.items() if k != key]
            rows.append(
                {
                    "device": "cpu",
                    "model": "m",
                    "batch_size": 16,
                    "precision": key[0],
                    "variant": key[1],
                    "status": "ok",
                    "group": "synthetic/cpu/m/bs16",
                    "round": round_index,
                    "shared_with": "|".join(partners) if shared and round_index else "",
                    "throughput_img_s": rate,
                }
            )
    return pd.DataFrame(rows)


def test_each_stated_comparison_with_its_grain_pairs_and_spread():
    spread = load_benchmark("pair_spread")
    rows = {(r["a"], r["b"]): r for r in spread.spread_rows(_runs(shared=True))}
    tuned_key = ("m fp32 bs16 tuned", "fp32 bs16 baseline")
    bf16_key = ("m bf16 bs16 baseline", "fp32 bs16 baseline")
    assert set(rows) == {tuned_key, bf16_key}
    assert (rows[tuned_key]["kind"], rows[bf16_key]["kind"]) == ("variant", "precision")
    tuned = rows[tuned_key]
    assert (tuned["grain"], tuned["pairs"]) == ("window", 3)
    assert tuned["ratio"] == pytest.approx(1.1) and tuned["log_ratio_sd"] == pytest.approx(0)
    bf16 = rows[bf16_key]
    logs = np.log(np.array([144.0, 143.0, 152.0]) / np.array([90.0, 110.0, 95.0]))
    assert bf16["log_ratio_sd"] == pytest.approx(float(np.std(logs, ddof=1)))
    assert not math.isnan(bf16["ci_half_width"])
    alone = {(r["a"], r["b"]): r for r in spread.spread_rows(_runs(shared=False))}
    assert alone[bf16_key]["grain"] == "process"
    assert alone[bf16_key]["pairs"] == 4


def test_batch_sizes_of_one_group_are_a_comparison_and_of_two_groups_none():
    spread = load_benchmark("pair_spread")
    rows = []
    for batch, values in ((16, [100.0, 90.0, 110.0]), (32, [110.0, 99.0, 121.0])):
        for round_index, rate in enumerate(values):
            other = f"fp32_bs{48 - batch}_baseline"
            rows.append(
                {"device": "cpu", "model": "m", "batch_size": batch, "precision": "fp32"}
                | {"variant": "baseline", "status": "ok", "group": "synthetic/cpu/m/bs16-32"}
                | {"round": round_index, "shared_with": other if round_index else ""}
                | {"throughput_img_s": rate}
            )
    (row,) = spread.spread_rows(pd.DataFrame(rows))
    assert (row["kind"], row["a"], row["b"]) == (
        "batch",
        "m fp32 bs32 baseline",
        "fp32 bs16 baseline",
    )
    assert (row["grain"], row["pairs"], row["ratio"]) == ("window", 2, pytest.approx(1.1))
    apart = pd.DataFrame(rows).assign(
        group=lambda f: "synthetic/cpu/m/bs" + f["batch_size"].astype(str)
    )
    assert spread.spread_rows(apart) == []
