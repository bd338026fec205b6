"""Noise explained (`nnperf.report.noise`): synthetic window series, each built with one known
cause, read back as that cause; white noise read as no external cause, with what the target
would take."""

from __future__ import annotations

import numpy as np
import pytest

from nnperf.engine.stopping import processes_for_spread
from nnperf.report import aggregate, noise
from nnperf.report.wording import measurement as wording

T0 = 1_700_000_000.0
WINDOW_S = 5.0


def series(process_levels, windows_per_process=8, *, noise_rel=0.01, seed=0, **columns):
    """Window rows: process p's windows at `process_levels[p]` img/s with white noise of
    `noise_rel`, one after another every WINDOW_S seconds. `columns[name](p, w, t)` sets a
    window column (and may return a multiplier for the throughput under `rate`)."""
    rng = np.random.default_rng(seed)
    rows, t = [], T0
    for p, level in enumerate(process_levels):
        for w in range(windows_per_process):
            row = {
                "process": p,
                "window": w,
                "started_at_unix": t,
                "ended_at_unix": t + WINDOW_S,
                "other_cores": 0.0,
                "steal_share": 0.0,
                "sm_clock_mhz": None,
                "throttle_reasons": None,
                "load_1m": 0.5,
            }
            rate = level * (1 + noise_rel * rng.standard_normal())
            for name, make in columns.items():
                value, factor = make(p, w, t)
                row[name] = value
                rate *= factor
            row["throughput_img_s"] = rate
            rows.append(row)
            t += WINDOW_S
        t += 10.0  # the next process's start-up
    return rows


def processes_of(rows):
    """Per-process entries as a run document holds them."""
    result = []
    for p in sorted({r["process"] for r in rows}):
        mine = [r for r in rows if r["process"] == p]
        result.append(
            {
                "process": p,
                "throughput_img_s": float(np.mean([r["throughput_img_s"] for r in mine])),
                "started_at_unix": mine[0]["started_at_unix"] - 10.0,
                "ended_at_unix": mine[-1]["ended_at_unix"],
            }
        )
    return result


def codes(rows, target=0.03):
    return [cause.kind for cause in noise.causes(rows, target)]


def said(found):
    """The sentence a cause's record is worded as."""
    return wording.cause_sentence(
        found.kind, {**dict.fromkeys(noise.CAUSE_NUMBERS[found.kind]), **found.numbers}
    )


def test_a_drifting_series_is_drift():
    # Throughput falls 5% of its start per minute, over 4 minutes (5 processes of 8 windows
    # of 5 s, 10 s apart): 20%.
    rows = series([100.0] * 5, seed=1)
    for row in rows:
        row["throughput_img_s"] *= 1 - 0.05 * (row["started_at_unix"] - T0) / 60
    found = noise.causes(rows, 0.03)
    assert found[0].kind == "drift" and found[0].numbers["p"] < 0.001
    # The fall over the run as a share of the throughput: about 20%.
    assert found[0].numbers["change"] == pytest.approx(-0.2 * 235 / 240, abs=0.015)
    assert found[0].numbers["per_minute"] == pytest.approx(-0.05, abs=0.003)
    # The processes differ only by the trend: once it is taken out, nothing else is named.
    assert [c.kind for c in found] == ["drift"]


def test_a_small_drift_against_a_loose_target_is_not_named():
    rows = series([100.0] * 5, noise_rel=0.0005)
    for i, row in enumerate(rows):
        row["throughput_img_s"] *= 1 - 0.0002 * i  # 0.8% over the run, target 10%
    assert "drift" not in codes(rows, target=0.10)


def test_other_cores_high_in_the_slow_windows_is_host_load():
    # Every fourth window shares the machine with 1.2 cores of other work and runs 12% slower.
    def other(p, w, t):
        busy = w % 4 == 1
        return (1.2 if busy else 0.02), (0.88 if busy else 1.0)

    rows = series([100.0] * 4, other_cores=other)
    found = noise.causes(rows, 0.03)
    assert found[0].kind == "host_load"
    assert found[0].numbers["peak"] == pytest.approx(1.2)
    assert found[0].numbers["windows"] == 8
    assert found[0].numbers["slower"] == pytest.approx(0.12, abs=0.01)
    assert "drift" not in codes(rows)


def test_steal_in_the_slow_windows_is_steal():
    def stolen(p, w, t):
        hit = w % 3 == 0
        return (0.15 if hit else 0.0), (0.85 if hit else 1.0)

    rows = series([100.0] * 4, steal_share=stolen)
    found = noise.causes(rows, 0.03)
    assert found[0].kind == "steal" and found[0].numbers["peak"] == pytest.approx(0.15)


def test_a_clock_that_moves_with_throughput_is_clock():
    def sm_clock(p, w, t):
        mhz = 1980 if w % 2 else 1500
        return mhz, mhz / 1980

    rows = series([100.0] * 3, sm_clock_mhz=sm_clock)
    found = noise.causes(rows, 0.01)
    assert found[0].kind == "clock"
    assert (found[0].numbers["low_mhz"], found[0].numbers["high_mhz"]) == (1500, 1980)


def test_two_clusters_of_process_means_are_bimodal():
    # Alternating fast and slow processes (no trend in time): 100 and 108 img/s.
    rows = series([100.0, 108.0, 100.0, 108.0, 100.0, 108.0], noise_rel=0.005)
    found = noise.causes(rows, 0.03)
    assert [c.kind for c in found] == ["bimodal"]
    n = found[0].numbers
    assert (n["low_n"], n["high_n"]) == (3, 3)
    assert n["low_img_s"] == pytest.approx(100, rel=0.01)
    assert n["high_img_s"] == pytest.approx(108, rel=0.01)
    assert n["share"] > 0.8


def test_one_slow_process_is_not_a_split_but_the_process_level():
    rows = series([100.0, 100.5, 99.5, 92.0], noise_rel=0.005)
    assert codes(rows) == ["process_level"]


def test_split_needs_a_gap_wider_than_both_groups():
    assert noise.split([100, 101, 108, 109], 0.03) == ([100.0, 101.0], [108.0, 109.0])
    assert noise.split([100, 104, 108, 112], 0.03) is None  # evenly spread: no split
    assert noise.split([100, 101, 102], 0.03) is None  # fewer than two on each side
    assert noise.split([100, 100.1, 100.3, 100.4], 0.03) is None  # a gap far below the target


def test_white_noise_is_window_noise_with_the_processes_it_needs():
    from test_aggregate import run_document

    rows = series([100.0] * 3, windows_per_process=6, noise_rel=0.08, seed=3)
    processes = processes_of(rows)
    document = run_document(ci_rel=0.05, target_ci=0.03)
    document.update(windows=rows, processes=processes)
    columns = noise.noise_columns(document)
    assert columns["noise_cause"] == "window_noise" and columns["window_noise_cv"] > 0.05
    rates = [p["throughput_img_s"] for p in processes]
    needed = processes_for_spread(np.std(rates, ddof=1), np.mean(rates), 0.03)
    assert needed > 3 and columns["processes_needed"] == needed
    # Each process took 10 s of start-up and 6 windows of 5 s: 40 s.
    assert columns["process_cost_s"] == pytest.approx(40.0)
    row = {**columns, "ci_target": 0.03, "n_processes": 3}
    sentence = wording.target_sentence(row)
    assert (
        f"the 3.0% target would take {needed} processes, {needed - 3} more than the 3" in sentence
    )
    assert "at 40.0 s per process" in sentence


def test_one_process_cannot_say_how_many_it_needs():
    assert noise.target_columns([100.0], 0.03) == {"process_rsd": None, "processes_needed": None}
    sentence = wording.target_sentence({"ci_target": 0.03, "n_processes": 1})
    assert "at least two processes" in sentence and "with 1 process" in sentence


def test_no_windows_is_none():
    assert codes([]) == ["none"]


# One record per cause, worded: the sentence quotes its numbers.
WORDED = {
    "shared_slowdown": (
        dict(r2=0.91, p=0.0004, configurations=2, rounds=8, dip=0.33),
        ("2 other configurations", "8 rounds", "r² 0.91", "p<0.001", "33% under"),
    ),
    "drift": (
        dict(change=-0.196, per_minute=-0.05, p=0.002),
        ("fell 20%", "\u22125.0%/min", "p<0.01"),
    ),
    "host_load": (
        dict(r2=0.5, p=0.001, peak=1.2, windows=8, slower=0.12),
        ("1.2 cores", "r² 0.50", "the 8 windows", "12% slower"),
    ),
    "steal": (
        dict(r2=0.4, p=0.003, peak=0.15, windows=5, slower=0.15),
        ("15% of the CPU", "5 windows"),
    ),
    "clock": (
        dict(r2=0.8, p=0.0001, low_mhz=1500, high_mhz=1980, throttled=2),
        ("1500–1980 MHz", "2 windows throttled"),
    ),
    "bimodal": (
        dict(low_n=3, low_img_s=100.2, high_n=3, high_img_s=108.1, gap=0.071),
        ("3 processes at about 100 img/s", "3 at about 108", "7.1% apart"),
    ),
    "process_level": (
        dict(n=4, p=0.02, low_img_s=92.1, high_img_s=100.4),
        ("4 processes", "92.1–100 img/s", "p=0.02"),
    ),
    "window_noise": (dict(cv=0.081), ("CV of 8.1%",)),
}


@pytest.mark.parametrize("code", list(WORDED))
def test_each_cause_is_worded_with_its_numbers(code):
    numbers, quoted = WORDED[code]
    row = {f"{code}_{name}": value for name, value in numbers.items()}
    sentence = wording.cause_sentence(code, wording.numbers_of(row, code))
    for text in quoted:
        assert text in sentence, (text, sentence)


def test_a_throttled_clock_is_worded_by_its_slowdown():
    sentence = wording.cause_sentence(
        "clock", dict(r2=None, p=0.004, low_mhz=None, high_mhz=None, throttled=3, slower=0.09)
    )
    assert "3 windows were throttled" in sentence and "9.0% slower" in sentence


def test_summary_names_the_cause_only_where_the_target_was_missed():
    from test_aggregate import run_document

    drifting = ((110.0, 108.0, 106.0, 104.0), (102.0, 100.0, 98.0, 96.0))
    missed = run_document(windows=drifting, ci_rel=0.05, target_ci=0.03)
    met = run_document(windows=drifting, ci_rel=0.02, target_ci=0.03)
    row = aggregate.summary_row(missed)
    assert row["noise_cause"] == "drift" and row["drift_change"] < 0
    assert row["processes_needed"] is not None
    assert all(aggregate.summary_row(met)[name] is None for name in noise.NOISE_COLUMNS)


def test_processes_that_follow_the_group_round_by_round_are_a_shared_slowdown():
    capacity = [1.0, 1.0, 0.7, 0.65, 1.0, 0.98, 0.75, 1.0, 0.99, 0.72]
    own = {r: 80.0 * c * (1 + 0.01 * (-1) ** r) for r, c in enumerate(capacity)}
    others = [
        {r: 45.0 * c for r, c in enumerate(capacity)},
        {r: 50.0 * c * (1 + 0.02 * (-1) ** (r // 2)) for r, c in enumerate(capacity)},
    ]
    found = noise.shared_slowdown(own, others)
    assert found.kind == "shared_slowdown" and found.numbers["share"] > 0.9
    assert (found.numbers["configurations"], found.numbers["rounds"]) == (2, 10)
    # Processes that vary on their own, beside a group that does not move, are not.
    rng = np.random.default_rng(3)
    alone = {r: 80.0 * (1 + 0.1 * rng.standard_normal()) for r in range(10)}
    steady = [{r: 45.0 * (1 + 0.005 * rng.standard_normal()) for r in range(10)}]
    assert noise.shared_slowdown(alone, steady) is None
    # Fewer than MIN_WINDOWS shared rounds: nothing to read.
    assert noise.shared_slowdown({0: 1.0, 1: 2.0}, [{0: 1.0, 1: 2.0}]) is None


def test_a_shared_slowdown_leads_the_windows_causes():
    found = noise.cause(
        "shared_slowdown", 0.8, r2=0.8, p=0.001, configurations=1, rounds=8, dip=0.3
    )
    columns = {"noise_cause": "process_level", "noise_causes": "process_level"}
    led = noise.with_shared_slowdown(columns, found)
    assert led["noise_cause"] == "shared_slowdown"
    assert led["noise_causes"] == "shared_slowdown;process_level"
    assert led["shared_slowdown_r2"] == 0.8 and led["shared_slowdown_rounds"] == 8
    # A configuration that met its target has nothing to explain.
    met = dict.fromkeys(noise.NOISE_COLUMNS)
    assert noise.with_shared_slowdown(met, found) == met


def test_a_summary_written_before_the_causes_had_numbers_names_the_cause():
    from nnperf.report.wording.measurement import noise_text

    row = {"noise_cause": "process_level", "ci_target": 0.05, "n_processes": 2}
    assert noise_text(row).startswith("The process level.")
