"""Statistics across reps, against hand-computed values, plus invariants (hypothesis)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nnperf import stats


def test_quartiles_and_iqr_hand_computed():
    # Linear interpolation (type 7): position p*(n-1) in the sorted data.
    assert stats.quartiles([4, 1, 3, 2]) == pytest.approx((1.75, 2.5, 3.25))
    assert stats.iqr([1, 2, 3, 4]) == pytest.approx(1.5)
    assert stats.quartiles([10, 20, 30, 40, 50]) == (20.0, 30.0, 40.0)
    assert stats.median([3.0, float("nan"), 1.0]) == 2.0  # failed reps (NaN) are left out


def test_coefficient_of_variation_hand_computed():
    # mean 100, deviations 0, 10, -10: sample variance 200/2 = 100, std 10.
    assert stats.coefficient_of_variation([100, 110, 90]) == pytest.approx(0.1)
    # mean 5, sum of squared deviations 32, sample variance 32/7.
    assert stats.coefficient_of_variation([2, 4, 4, 4, 5, 5, 7, 9]) == pytest.approx(
        math.sqrt(32 / 7) / 5
    )
    assert math.isnan(stats.coefficient_of_variation([5.0]))


def test_high_variance_flag():
    assert stats.is_high_variance(0.10, threshold=0.05)
    assert not stats.is_high_variance(0.05, threshold=0.05)  # strictly above
    assert not stats.is_high_variance(float("nan"))


def test_bootstrap_ci_small_samples_hand_computed():
    assert stats.ci95([7.0]) == (7.0, 7.0)
    assert stats.ci95([3.0, 3.0, 3.0]) == (3.0, 3.0)
    # Two reps a < b: resampled medians are a (1/4), (a+b)/2 (1/2), b (1/4), so the 2.5% and
    # 97.5% points are a and b.
    assert stats.ci95([10.0, 20.0]) == (10.0, 20.0)
    # Three reps: P(resampled median = min) = P(>= 2 of 3 draws are the min) = 7/27 > 2.5%.
    assert stats.ci95([5.0, 1.0, 9.0]) == (1.0, 9.0)


def _binomial_tail(n: int, p: float, at_least: int) -> float:
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(at_least, n + 1))


def test_bootstrap_ci_seven_reps_matches_the_exact_bootstrap_distribution():
    """For odd n, P(resampled median <= x_(j)) = P(Binomial(n, j/n) >= (n+1)/2)."""
    values = [13.0, 11.0, 17.0, 12.0, 15.0, 14.0, 16.0]  # sorted: 11..17
    ordered = sorted(values)
    cdf = [_binomial_tail(7, j / 7, 4) for j in range(1, 8)]
    # cdf[0] = 0.0102 < 0.025 <= cdf[1] = 0.1083 and cdf[4] = 0.8917 < 0.975 <= cdf[5] = 0.9898,
    # so the exact interval is [x_(2), x_(6)], far from the Monte-Carlo error of 10,000 draws.
    assert cdf[0] < 0.025 <= cdf[1] and cdf[4] < 0.975 <= cdf[5]
    assert stats.ci95(values) == (ordered[1], ordered[5])
    assert stats.ci95(values) == stats.ci95(list(reversed(values)))  # seeded, order-free


def test_describe_reps_columns():
    row = stats.describe_reps([100.0, 110.0, 90.0], cv_threshold=0.05)
    assert row["throughput_img_s_median"] == 100.0
    assert row["throughput_img_s_q1"] == 95.0 and row["throughput_img_s_q3"] == 105.0
    assert row["throughput_img_s_iqr"] == 10.0
    assert (row["throughput_img_s_ci95_low"], row["throughput_img_s_ci95_high"]) == (90.0, 110.0)
    assert row["throughput_img_s_cv"] == pytest.approx(0.1)
    assert row["high_variance"] is True
    empty = stats.describe_reps([], cv_threshold=0.05)
    assert math.isnan(empty["throughput_img_s_median"]) and empty["high_variance"] is False


positive = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None)
@given(st.lists(positive, min_size=1, max_size=12))
def test_interval_and_quartiles_stay_inside_the_data(values):
    q1, q2, q3 = stats.quartiles(values)
    low, high = stats.ci95(values)
    assert min(values) <= q1 <= q2 <= q3 <= max(values)
    assert min(values) <= low <= high <= max(values)


@settings(max_examples=60, deadline=None)
@given(st.lists(positive, min_size=2, max_size=12), st.floats(min_value=0.01, max_value=100))
def test_cv_is_scale_free(values, scale):
    cv = stats.coefficient_of_variation(values)
    scaled = stats.coefficient_of_variation([v * scale for v in values])
    assert scaled == pytest.approx(cv, rel=1e-9, abs=1e-12)
