"""Stop reasons worded from their records (`nnperf.core.wording.stop_sentence`): one test per
reason, each that the sentence names the record's numbers (not the whole sentence)."""

from __future__ import annotations

import pandas as pd
import pytest

from nnperf.core import vocab
from nnperf.core.wording import ONE_TIME_WHAT, stop_numbers_of, stop_sentence
from nnperf.engine import stopping


def test_ci_target_names_the_half_width_and_the_target():
    text = stop_sentence("ci_target", {"ci_half_width_rel": 0.0084, "target_ci": 0.01})
    assert "0.8%" in text and "1%" in text


def test_budget_names_the_seconds_spent_of_the_budget():
    text = stop_sentence("budget", {"spent_s": 58.4, "budget_s": 60.0})
    assert "58 s of timing.max_seconds 60 s" in text


def test_max_processes_names_the_limit():
    assert "timing.max_processes = 6" in stop_sentence("max_processes", {"max_processes": 6})


@pytest.mark.parametrize(
    "fit, limit", [(9, "timing.max_processes is 6"), (4, "4 fit in timing.max_seconds")]
)
def test_target_unreachable_names_the_spread_the_processes_and_what_limits_them(fit, limit):
    numbers = {
        "process_spread_rel": 0.047,
        "spread_low_rel": 0.031,
        "processes_needed_low": 40,
        "processes_needed": 88,
        "target_ci": 0.01,
        "max_processes": 6,
        "processes_fit": fit,
    }
    text = stop_sentence("target_unreachable", numbers)
    for part in ("4.7%", "a 1% CI", "~40 processes", "(3.1%)", "88 at the measured", limit):
        assert part in text, part


def test_over_budget_in_a_steady_step_names_the_step_the_steps_and_the_seconds():
    numbers = {
        "step_s": 13.2,
        "step_lower_bound": True,
        "steps_left": 19,
        "min_windows": 2,
        "timed_steps": 8,
        "needed_s": 250.8,
        "left_s": 55.0,
        "budget_s": 60.0,
    }
    text = stop_sentence("over_budget", numbers, "steady")
    for part in ("at least 13.2 s", "19 steps", "2 windows of 8 steps", "251 s", "55 s", "60 s"):
        assert part in text, part
    assert "at least" not in stop_sentence("over_budget", {**numbers, "step_lower_bound": False})


@pytest.mark.parametrize("kind", stopping.ONE_TIME_KINDS)
def test_over_budget_in_a_one_time_step_names_its_kind_seconds_and_bound(kind):
    text = stop_sentence("over_budget", {"one_time_s": 50.2, "bound_s": 35.0}, kind)
    assert ONE_TIME_WHAT[kind] in text and "50 s" in text
    assert f"timing.max_{kind}_seconds = 35 s" in text


def test_every_stop_reason_is_worded_and_none_is_no_sentence():
    assert set(ONE_TIME_WHAT) == set(stopping.ONE_TIME_KINDS)
    for reason in vocab.STOP_REASONS:
        assert stop_sentence(reason, {}) and "None" not in stop_sentence(reason, {})
    assert stop_sentence(None, {}) is None


def test_stop_numbers_come_from_a_run_document_or_a_summary_row():
    document = {"stop_numbers": {"max_processes": 6, "spent_s": None}}
    assert stop_numbers_of(document) == {"max_processes": 6}
    row = pd.Series(
        {"stop_reason": "max_processes", "stop_max_processes": 6.0, "stop_step_s": None}
    )
    assert stop_numbers_of(row) == {"max_processes": 6.0}


def test_a_comparison_out_of_reach_says_so_with_the_rounds_it_had_needed_and_fit():
    from nnperf.core.wording import out_of_reach_sentence

    assert out_of_reach_sentence(20, 75, 32) == (
        "out of reach after 20 rounds: the rounds both budgets still fit could not resolve it "
        "(~75 needed, 32 fit), so the group stopped measuring for it"
    )
    # From comparisons.csv, which carries the rounds only.
    assert out_of_reach_sentence(1.0) == (
        "out of reach after 1 round: the rounds both budgets still fit could not resolve it, "
        "so the group stopped measuring for it"
    )
    assert "after" not in out_of_reach_sentence(None)
