"""The two-level estimate and the stopping rule, driven by synthetic noisy timers.

A simulated configuration has a true throughput, a process-level spread (each process draws
its own speed) and a window-level spread (each window draws around its process's speed);
windows and processes cost simulated seconds. The rule must stop at the CI target when it can,
spend its repetitions where the variance is, and never run past the budget.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats as scipy_stats

from nnperf.core.contract import TimingSettings
from nnperf.core.errors import NnperfError
from nnperf.engine import stopping
from nnperf.engine.stopping import WindowSample

IMAGES = 1000


@pytest.mark.parametrize(
    "df, table",
    [
        (1, 12.706),
        (2, 4.303),
        (3, 3.182),
        (4, 2.776),
        (5, 2.571),
        (10, 2.228),
        (30, 2.042),
        (100, 1.984),
    ],
)
def test_t_quantile_matches_the_table(df, table):
    assert stopping.t_quantile(df) == pytest.approx(table, rel=2e-3)


def _windows(rates_by_process):
    return [
        WindowSample(process, IMAGES, IMAGES / rate)
        for process, rates in enumerate(rates_by_process)
        for rate in rates
    ]


def test_estimate_two_processes_by_hand():
    current = stopping.estimate(_windows([[100.0, 100.0], [120.0, 120.0]]))
    assert current.throughput == pytest.approx(110.0)
    # On the log scale: mean log m, half h = t(0.975, 1) x sqrt(var(logs) / 2), exponentiated.
    logs = [math.log(100.0), math.log(120.0)]
    m = sum(logs) / 2
    h = stopping.t_quantile(1) * abs(logs[1] - logs[0]) / 2
    assert (current.ci_low, current.ci_high) == pytest.approx((math.exp(m - h), math.exp(m + h)))
    assert 0 < current.ci_low < math.sqrt(100 * 120) < current.ci_high
    assert current.method == "processes"
    assert current.within_process == pytest.approx(0.0)
    assert current.between_processes == pytest.approx(200.0)
    assert current.dominant_level == "process"
    # The wider side (the upper one) relative to the estimate.
    assert current.half_width_rel == pytest.approx((math.exp(m + h) - 110) / 110)
    assert (current.n_processes, current.n_windows) == (2, 4)
    assert current.timed_s == pytest.approx(2 * IMAGES / 100 + 2 * IMAGES / 120)


def test_estimate_window_noise_dominates_by_hand():
    current = stopping.estimate(_windows([[90.0, 110.0], [90.0, 110.0]]))
    # Both processes sustain the same rate: no process-level variation at all.
    assert current.between_processes == pytest.approx(0.0)
    assert current.within_process == pytest.approx(200.0)
    assert current.dominant_level == "window"


def test_one_process_gives_a_window_level_interval_and_one_window_none():
    current = stopping.estimate(_windows([[90.0, 110.0]]))
    process_rate = 2 * IMAGES / (IMAGES / 90 + IMAGES / 110)
    assert current.throughput == pytest.approx(process_rate)
    h = stopping.t_quantile(1) * (math.log(110.0) - math.log(90.0)) / 2
    assert current.ci_high / current.ci_low == pytest.approx(math.exp(2 * h))
    assert current.method == "windows" and current.between_processes is None
    single = stopping.estimate(_windows([[100.0]]))
    assert single.throughput == pytest.approx(100.0)
    assert single.ci_low is None and single.half_width_rel is None and single.method is None
    empty = stopping.estimate([])
    assert empty.throughput is None and empty.n_windows == 0


_RATE = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False)


@given(st.lists(st.lists(_RATE, min_size=1, max_size=4), min_size=1, max_size=6))
def test_the_interval_is_positive_and_holds_the_geometric_mean(rates_by_process):
    """Whatever the spread (two processes at 5,497 img/s +/- 108% gave -476 to 11,471 img/s
    on a symmetric interval), the bounds lie in (0, inf) around the geometric mean of the
    rates the interval is built on, and the reported half-width is its wider side."""
    current = stopping.estimate(_windows(rates_by_process))
    if current.method is None:
        assert current.ci_low is None and current.ci_high is None
        return
    if current.method == "processes":
        rates = list(stopping.process_throughputs(_windows(rates_by_process)).values())
    else:
        rates = [rate for rates in rates_by_process for rate in rates]
    geometric = math.exp(sum(math.log(r) for r in rates) / len(rates))
    assert 0 < current.ci_low <= current.ci_high < math.inf
    assert current.ci_low <= geometric * (1 + 1e-9) and geometric <= current.ci_high * (1 + 1e-9)
    wider = max(current.ci_high - current.throughput, current.throughput - current.ci_low)
    assert current.half_width_rel == pytest.approx(wider / current.throughput)


def test_optimal_windows_follows_kalibera_jones():
    timing = TimingSettings(min_windows=2, max_windows=50)
    current = stopping.estimate(
        _windows([[90.0, 110.0] * 2, [100.0, 120.0] * 2, [110.0, 130.0] * 2])
    )
    expected = math.ceil(math.sqrt(4.0 * current.within_process / current.between_processes))
    wanted = stopping.optimal_windows(current, process_cost_s=4.0, window_cost_s=1.0, timing=timing)
    assert wanted == max(2, min(50, expected)) and wanted > 2
    assert (
        stopping.optimal_windows(stopping.estimate(_windows([[100.0, 101.0]])), 4, 1, timing) == 2
    )
    flat = stopping.estimate(_windows([[90.0, 110.0], [90.0, 110.0], [90.0, 110.0]]))
    assert stopping.optimal_windows(flat, 4, 1, timing) == 50
    # Two processes: a third one first, whatever the variances say (t = 12.7 at df 1).
    two = stopping.estimate(_windows([[90.0, 110.0], [90.0, 110.0]]))
    assert stopping.optimal_windows(two, 4, 1, timing) == 2


class Simulated:
    """A configuration on a fake clock: process p runs at `true x (1 + process noise)`, each
    window at that x (1 + window noise); a process costs `process_s` before its first window."""

    def __init__(self, process_sd, window_sd, seed=0, window_s=1.0, process_s=3.0, true=1000.0):
        self.rng = np.random.default_rng(seed)
        self.process_sd, self.window_sd = process_sd, window_sd
        self.window_s, self.process_s, self.true = window_s, process_s, true

    def run(self, timing: TimingSettings, target: float):
        windows, clock, process = [], 0.0, 0
        while True:
            clock += self.process_s
            speed = self.true * (1 + self.rng.normal(0, self.process_sd))
            action = stopping.Action("window")
            while action.kind == "window":
                rate = speed * (1 + self.rng.normal(0, self.window_sd))
                seconds = self.window_s * self.true / rate
                clock += seconds
                windows.append(WindowSample(process, IMAGES, seconds))
                action = stopping.next_action(
                    windows,
                    current_process=process,
                    elapsed_s=clock,
                    process_cost_s=self.process_s,
                    timing=timing,
                    target_ci=target,
                )
            if action.kind == "stop":
                return windows, clock, action.reason
            process += 1


def _per_process(windows):
    counts = {}
    for window in windows:
        counts[window.process] = counts.get(window.process, 0) + 1
    return counts


def test_quiet_configuration_stops_at_the_target_after_the_minimums():
    timing = TimingSettings(min_seconds=5, max_seconds=600, min_processes=2, min_windows=2)
    windows, clock, reason = Simulated(0.002, 0.002).run(timing, target=0.01)
    assert reason == "ci_target"
    current = stopping.estimate(windows)
    assert current.half_width_rel <= 0.01
    assert current.n_processes >= 2 and min(_per_process(windows).values()) >= 2
    assert current.timed_s >= 5
    assert clock < 60  # far under the budget: stopped as soon as it could


def test_min_seconds_holds_back_an_early_stop():
    timing = TimingSettings(min_seconds=30, max_seconds=600)
    windows, _, reason = Simulated(0.001, 0.001).run(timing, target=0.05)
    assert reason == "ci_target" and stopping.estimate(windows).timed_s >= 30


def test_process_level_noise_buys_processes_not_windows():
    timing = TimingSettings(min_seconds=0, max_seconds=10_000, max_processes=40, max_windows=40)
    windows, _, reason = Simulated(0.05, 0.001, seed=1).run(timing, target=0.02)
    counts = _per_process(windows)
    assert reason == "ci_target"
    assert len(counts) > 4  # it took many processes ...
    assert max(counts.values()) <= 3  # ... and few windows in each
    assert stopping.estimate(windows).dominant_level == "process"


def test_window_level_noise_buys_windows_per_process():
    timing = TimingSettings(min_seconds=0, max_seconds=10_000, max_processes=40, max_windows=40)
    windows, _, reason = Simulated(0.0, 0.05, seed=2).run(timing, target=0.01)
    counts = _per_process(windows)
    assert reason == "ci_target"
    assert max(counts.values()) > timing.min_windows  # windows are the cheap cure here


@pytest.mark.parametrize("seed", range(5))
def test_budget_is_never_overrun_by_more_than_one_window(seed):
    timing = TimingSettings(min_seconds=0, max_seconds=40, max_processes=100, max_windows=100)
    simulated = Simulated(0.05, 0.05, seed=seed, window_s=2.0, process_s=5.0)
    windows, clock, reason = simulated.run(timing, target=0.001)
    # A 0.1% target at a 5% process spread is out of reach: it may also stop early, saying so.
    assert reason in ("budget", "target_unreachable")
    assert clock <= timing.max_seconds + 2.0 * 1.5  # one window, at its noisiest
    assert stopping.estimate(windows).n_processes >= 2


def test_caps_end_the_measurement_with_max_processes():
    timing = TimingSettings(min_seconds=0, max_seconds=10_000, max_processes=3, max_windows=4)
    windows, _, reason = Simulated(0.05, 0.05, seed=3).run(timing, target=0.0001)
    counts = _per_process(windows)
    assert reason == "max_processes"
    # Every process it may start, and the last one runs to the window cap.
    assert len(counts) == 3 and counts[2] == timing.max_windows


def test_timing_settings_refuse_inverted_ranges():
    with pytest.raises(NnperfError, match="timing.min_processes = 5 is larger than"):
        TimingSettings(min_processes=5, max_processes=2)
    with pytest.raises(NnperfError, match="timing.target_ci = 1.5 is not allowed"):
        TimingSettings(target_ci=1.5)
    assert TimingSettings().target_for("cuda") == 0.01
    assert TimingSettings().target_for("cpu") == 0.03
    assert TimingSettings(target_ci=0.02).target_for("cuda") == 0.02


def test_processes_needed_against_a_hand_computed_case():
    # A 4% process spread and a 1% target: t(63) x 0.04 / sqrt(64) = 1.998 x 0.005 = 0.00999
    # reaches it, t(62) x 0.04 / sqrt(63) = 0.01007 does not.
    assert stopping.processes_for_spread(0.04, 1.0, 0.01) == 64
    # On the interval's log scale: the logs of these rates have sd 0.0400, and the upper side
    # within 1% needs t(n - 1) x 0.0400 / sqrt(n) <= log(1.01) = 0.00995, which 64 processes
    # miss (0.00999) and 65 reach (0.00992).
    rates = [96.0, 100.0, 104.0]
    assert stopping.processes_needed(rates, 0.01) == 65
    assert stopping.processes_needed([100.0], 0.01) is None


@pytest.mark.parametrize(
    "df, expected", [(1, 2.7055), (2, 4.6052), (3, 6.2514), (5, 9.2364), (10, 15.9872)]
)
def test_chi2_quantile_matches_the_tables(df, expected):
    assert stopping.chi2_quantile(df, 0.9) == pytest.approx(expected, rel=0.01)


def _three_processes(spread: float, window_sd: float = 0.0):
    means = [1000 * (1 - spread), 1000.0, 1000 * (1 + spread)]
    return [[m * (1 - window_sd), m * (1 + window_sd)] for m in means]


def test_a_process_spread_out_of_reach_stops_early_and_says_why():
    timing = TimingSettings(min_seconds=0, max_seconds=600, max_processes=6, max_windows=10)
    windows = _windows(_three_processes(0.05))
    action = stopping.next_action(
        windows,
        current_process=2,
        elapsed_s=10.0,
        process_cost_s=3.0,
        timing=timing,
        target_ci=0.01,
    )
    assert (action.kind, action.reason) == ("stop", "target_unreachable")
    numbers = action.numbers
    assert numbers["process_spread_rel"] == pytest.approx(0.05)
    assert numbers["target_ci"] == 0.01 and numbers["max_processes"] == 6
    assert numbers["processes_needed_low"] > 6 and numbers["processes_fit"] > 6
    assert numbers["processes_needed"] >= numbers["processes_needed_low"]


def test_a_reachable_or_window_dominated_target_does_not_stop_early():
    timing = TimingSettings(min_seconds=0, max_seconds=600, max_processes=100, max_windows=10)
    kwargs = dict(current_process=2, elapsed_s=10.0, process_cost_s=3.0, timing=timing)
    # 0.5% spread, 1% target: a handful of processes more.
    assert (
        stopping.next_action(_windows(_three_processes(0.005)), target_ci=0.01, **kwargs).kind
        != "stop"
    )
    # Windows noisier than processes: more windows still narrow it.
    noisy = _windows(_three_processes(0.01, window_sd=0.2))
    assert stopping.next_action(noisy, target_ci=0.01, **kwargs).reason != "target_unreachable"
    # Two processes only: the spread of two is not judged.
    two = _windows(_three_processes(0.05)[:2])
    assert (
        stopping.next_action(two, target_ci=0.01, **{**kwargs, "current_process": 1}).kind != "stop"
    )


def test_rounds_to_resolve_a_centred_ratio_is_the_tie_band_at_the_spreads_lower_bound():
    logs = [0.1, -0.1, 0.0]  # centre 0, standard deviation 0.1
    low = 0.1 * math.sqrt(2 / scipy_stats.chi2.ppf(0.9, 2))
    band = math.log1p(0.03)
    expected = next(
        n for n in range(2, 1000) if scipy_stats.t.ppf(0.975, n - 1) * low / math.sqrt(n) <= band
    )
    assert stopping.rounds_to_resolve(logs, 0.03) == expected
    # Off-centre by more than half the band, excluding 1 asks fewer rounds than a tie.
    shifted = [x + 0.05 for x in logs]
    assert stopping.rounds_to_resolve(shifted, 0.03) < expected
    assert stopping.rounds_to_resolve(logs[:2], 0.03) is None


def test_a_wide_centred_comparison_is_out_of_reach_in_few_rounds_but_not_in_many():
    rng = np.random.default_rng(0)
    logs = list(rng.normal(0.0, 0.15, 12))
    why = stopping.comparison_out_of_reach(logs, 0.03, rounds_left=5)
    assert why == {"rounds_needed": stopping.rounds_to_resolve(logs, 0.03), "rounds_fit": 17}
    assert why["rounds_needed"] > 17
    assert stopping.comparison_out_of_reach(logs, 0.03, rounds_left=500) is None
    assert stopping.comparison_out_of_reach(logs, 0.03, rounds_left=0) is None


def test_a_comparison_three_rounds_put_near_the_bands_edge_is_not_given_up():
    # Three rounds centred at 1.5%, half the band: taken as exact, that centre asks 22 rounds
    # and 3 + 10 fit; but a centre from three rounds is uncertain by more than the band, and
    # wherever it truly lies beyond +/-3% ten more rounds separate it.
    logs = [0.06, -0.04, 0.025]
    assert stopping.rounds_to_resolve(logs, 0.03) == 22
    assert stopping.chance_to_resolve(logs, 0.03, 10) > 0.5
    assert stopping.comparison_out_of_reach(logs, 0.03, 10) is None
    # With two rounds left, it is given up.
    assert stopping.comparison_out_of_reach(logs, 0.03, 2) == {
        "rounds_needed": 22,
        "rounds_fit": 5,
    }
