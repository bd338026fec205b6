"""Ratio confidence intervals (nnperf.core.ratios) against hand-computed cases, and the
reason interleaving exists: under drift, paired processes keep the ratio right where
configurations measured one after the other get it wrong."""

import math

import numpy as np
import pytest

from nnperf.core import ratios


def test_the_paired_interval_is_a_t_interval_on_the_log_ratios():
    a = [110.0, 104.0, 99.0]
    b = [100.0, 100.0, 90.0]
    # By hand: log ratios ln 1.1, ln 1.04, ln 1.1; mean 0.0822, sd 0.0330 (n=3),
    # t(2) = 4.3027, half width 4.3027 x sd / sqrt(3).
    logs = [math.log(1.1), math.log(1.04), math.log(1.1)]
    mean = sum(logs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2)
    half = 4.302653 * sd / math.sqrt(3)
    ci = ratios.paired_ratio(a, b)
    assert ci.method == ratios.PAIRED and ci.n == 3
    assert ci.ratio == pytest.approx(math.exp(mean), rel=1e-9)
    assert ci.low == pytest.approx(math.exp(mean - half), rel=1e-5)
    assert ci.high == pytest.approx(math.exp(mean + half), rel=1e-5)
    assert ci.low < 1 < ci.high and not ci.separated  # the interval just reaches 1


def test_swapping_the_pair_gives_the_reciprocal_interval():
    a, b = [110.0, 104.0, 99.0, 108.0], [100.0, 100.0, 90.0, 101.0]
    forward, backward = ratios.paired_ratio(a, b), ratios.paired_ratio(b, a)
    assert forward.ratio * backward.ratio == pytest.approx(1.0)
    assert forward.low * backward.high == pytest.approx(1.0)
    assert forward.separated and backward.separated


def test_fiellers_interval_by_hand():
    a = [100.0, 104.0, 96.0]  # mean 100, variance of the mean 16/3
    b = [50.0, 52.0, 48.0]  # mean 50, variance of the mean 4/3
    var_a, var_b = 16 / 3, 4 / 3
    df = (var_a + var_b) ** 2 / (var_a**2 / 2 + var_b**2 / 2)
    from scipy.stats import t as student

    t = student.ppf(0.975, df)
    g = t**2 * var_b / 50**2
    spread = (t / 50) * math.sqrt(var_a * (1 - g) + 4 * var_b)
    ci = ratios.unpaired_ratio(a, b)
    assert ci.method == ratios.FIELLER and ci.ratio == pytest.approx(2.0)
    assert ci.low == pytest.approx((2 - spread) / (1 - g))
    assert ci.high == pytest.approx((2 + spread) / (1 - g))
    assert ci.separated and ci.low < 2 < ci.high


def test_a_denominator_whose_interval_reaches_zero_has_no_bounded_ratio():
    ci = ratios.unpaired_ratio([10.0, 11.0], [0.5, 30.0])
    assert not ci.bounded and not ci.separated
    assert "not separated" in ratios.ratio_text(ci)


def test_one_process_or_pair_gives_a_ratio_without_an_interval():
    assert not ratios.paired_ratio([2.0], [1.0]).bounded
    assert not ratios.unpaired_ratio([2.0], [1.0, 1.1]).bounded


def test_the_t_critical_value_is_scipys():
    assert ratios.t_critical(1) == pytest.approx(12.7062, rel=1e-5)
    assert ratios.t_critical(30) == pytest.approx(2.0423, rel=1e-4)


@pytest.mark.parametrize(
    "ci, expected",
    [
        (ratios.RatioCI(1.06, 1.01, 1.11, "paired", 4), "1.06x faster (95% CI 1.01-1.11)"),
        (ratios.RatioCI(0.8, 0.75, 0.85, "paired", 4), "1.25x slower (0.80x, 95% CI 0.75-0.85)"),
        (
            ratios.RatioCI(1.01, 0.97, 1.04, "paired", 4),
            "not separated (1.01x, 95% CI 0.97-1.04)",
        ),
    ],
)
def test_how_a_ratio_is_written(ci, expected):
    assert ratios.ratio_text(ci) == expected


def test_resolved_means_separated_or_within_the_tolerance():
    assert ratios.RatioCI(1.06, 1.01, 1.11, "paired", 4).resolved(0.03)
    assert ratios.RatioCI(1.0, 0.98, 1.02, "paired", 4).resolved(0.03)
    assert not ratios.RatioCI(1.0, 0.9, 1.1, "paired", 4).resolved(0.03)
    assert not ratios.RatioCI(1.0, None, None, "paired", 1).resolved(0.03)


def _drifting(times, start=100.0, slope=-1.5, noise=0.3, seed=0):
    rng = np.random.default_rng(seed)
    return [start + slope * t + rng.normal(0, noise) for t in times]


def test_under_drift_paired_processes_keep_the_ratio_where_sequential_ones_lose_it():
    """A is truly 5% faster than B; the machine slows down 1.5% per process slot."""
    true = 1.05
    slots = 12
    # Sequential: A's six processes, then B's six.
    speed = _drifting(range(slots))
    sequential_a = [true * s for s in speed[:6]]
    sequential_b = speed[6:]
    # Interleaved A B B A A B ...: each pair's slots are neighbours.
    order = ["A", "B", "B", "A"] * 3
    a_rates, b_rates = [], []
    for slot, who in enumerate(order):
        (a_rates if who == "A" else b_rates).append((true if who == "A" else 1.0) * speed[slot])
    paired = ratios.paired_ratio(a_rates, b_rates)
    apart = ratios.unpaired_ratio(sequential_a, sequential_b)
    assert paired.low <= true <= paired.high
    assert not apart.low <= true <= apart.high  # the drift lands in the ratio
    assert abs(paired.ratio - true) < abs(apart.ratio - true) / 5


def test_a_bound_next_to_one_keeps_the_digit_that_tells_its_side():
    ci = ratios.RatioCI(1.06, 1.004, 1.12, "paired", 12)
    assert ratios.ratio_text(ci) == "1.06x faster (95% CI 1.004-1.12)"


@pytest.mark.parametrize(
    "ci, verdict",
    [
        (ratios.RatioCI(1.06, 1.01, 1.11, ratios.PAIRED, 4), "faster"),
        (ratios.RatioCI(0.91, 0.88, 0.94, ratios.PAIRED, 4), "slower"),
        (ratios.RatioCI(1.01, 0.98, 1.03, ratios.PAIRED, 4), "tie"),
        (ratios.RatioCI(1.01, 0.90, 1.12, ratios.PAIRED, 4), "unresolved"),
        (ratios.RatioCI(1.01, None, None, ratios.PAIRED, 1), "no_ci"),
        (ratios.RatioCI(math.nan, None, None, None, 0), "unmeasured"),
    ],
)
def test_a_ratio_has_a_verdict_code_and_comes_back_from_its_row(ci, verdict):
    assert ci.verdict(0.04) == verdict and verdict in ratios.VERDICTS
    if math.isfinite(ci.ratio):
        assert ratios.RatioCI.from_dict(ci.as_dict()) == ci
