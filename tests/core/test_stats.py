"""Descriptive statistics of timings, against hand-computed values, plus invariants (hypothesis)."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from nnperf.core import stats


def test_quartiles_and_iqr_hand_computed():
    # Linear interpolation (type 7): position p*(n-1) in the sorted data.
    assert stats.quartiles([4, 1, 3, 2]) == pytest.approx((1.75, 2.5, 3.25))
    assert stats.iqr([1, 2, 3, 4]) == pytest.approx(1.5)
    assert stats.quartiles([10, 20, 30, 40, 50]) == (20.0, 30.0, 40.0)
    assert stats.median([3.0, float("nan"), 1.0]) == 2.0  # failed measurements (NaN) are left out


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


positive = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None)
@given(st.lists(positive, min_size=1, max_size=12))
# Found by Hypothesis: np.percentile's 50th and np.median differed in the last bit.
@example([196609.0, 65535.29291835598])
@example([393217.0, 131071.13564516285])
def test_quartiles_stay_inside_the_data(values):
    q1, q2, q3 = stats.quartiles(values)
    assert min(values) <= q1 <= q2 <= q3 <= max(values)
    assert stats.median(values) == q2
    assert stats.iqr(values) == pytest.approx(q3 - q1)


@settings(max_examples=60, deadline=None)
@given(st.lists(positive, min_size=2, max_size=12), st.floats(min_value=0.01, max_value=100))
def test_cv_is_scale_free(values, scale):
    cv = stats.coefficient_of_variation(values)
    scaled = stats.coefficient_of_variation([v * scale for v in values])
    assert scaled == pytest.approx(cv, rel=1e-9, abs=1e-12)
