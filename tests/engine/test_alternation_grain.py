"""benchmarks/alternation_grain.py: its pairing of hand-made windows, numbers by hand."""

from __future__ import annotations

import pytest

from benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def grain():
    return load_benchmark("alternation_grain")


def window(member, index, rate, start):
    """A window of 32 images at `rate` img/s."""
    return {"member": member, "round": index, "start": start, "seconds": 32 / rate, "images": 32}


def one_round(index, alone, shared, shared_slow_after_switch=1.0):
    """Round `index`: each member alone at `alone[m]` img/s (two windows, the second at twice
    the first's time, so a process's throughput is images over seconds: 4/3 of the first's
    rate); and the shared process, four window rounds in balanced order at `shared[m]`, a
    window that follows another member's at `shared_slow_after_switch` of it."""
    process = [
        {"members": [m], "windows": [window(m, 0, rate, 0), window(m, 1, 2 * rate, 1)]}
        for m, rate in enumerate(alone)
    ]
    rows, previous = [], None
    for w in range(4):
        for m in (0, 1, 2) if w % 2 == 0 else (2, 1, 0):
            factor = 1.0 if previous in (None, m) else shared_slow_after_switch
            rows.append(window(m, w, shared[m] * factor, len(rows)))
            previous = m
    return {"round": index, "process": process, "window": {"windows": rows}}


def test_pairs_by_grain(grain):
    rounds = [one_round(0, (30, 40, 60), (30, 45, 60)), one_round(1, (15, 20, 30), (30, 45, 60))]
    by_process = grain.pair_rates(rounds, "process", 1, 0, 0)
    assert by_process == [pytest.approx((40 * 4 / 3, 30 * 4 / 3)), pytest.approx((20 * 4 / 3, 20))]
    assert len(grain.pair_rates(rounds, "window", 1, 0, 1)) == 8
    assert len(grain.pair_rates(rounds, "window", 1, 0, 2)) == 4
    whole = grain.pair_rates(rounds, "window", 2, 0, 0)
    assert whole == [pytest.approx((60, 30))] * 2

    result = grain.analyse(rounds, windows=2)
    rows = {(r["comparison"], r["grain"]): r for r in result["comparisons"]}
    window_pairs = rows[("bf16 / fp32, baseline", "window, by window")]
    assert window_pairs["ratio"] == pytest.approx(2.0) and window_pairs["cv"] == pytest.approx(0)
    assert rows[("tuned / baseline, fp32", "process (today)")]["ratio"] == pytest.approx(4 / 3)
    # Shared over alone, round by round: fp32 baseline 30 / 40 then 30 / 20.
    interference = {r["configuration"]: r for r in result["interference"]}
    assert interference["fp32 baseline"]["ratio"] == pytest.approx((0.75 * 1.5) ** 0.5)


def test_switch_cost_pairs_a_repeated_window_with_the_one_before(grain):
    rounds = [one_round(0, (30, 40, 60), (30, 45, 60), shared_slow_after_switch=0.8)]
    switch = {r["configuration"]: r for r in grain.switch_cost(rounds)}
    # Only the end members repeat (A B C | C B A | A B C | C B A): C twice, A once.
    assert set(switch) == {"fp32 baseline", "bf16 baseline"}
    assert switch["bf16 baseline"]["ratio_n"] == 2
    assert switch["fp32 baseline"]["ratio_n"] == 1
    assert switch["bf16 baseline"]["ratio"] == pytest.approx(1 / 0.8)
