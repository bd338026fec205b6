"""Unstable reasons worded from their records (`nnperf.core.wording.unstable_sentence`): one
test per reason code, each that the sentence names the record's numbers."""

from __future__ import annotations

from nnperf.core import vocab
from nnperf.core.wording import unstable_numbers_of, unstable_sentence, unstable_sentences


def test_host_overloaded_names_the_windows_and_the_cores():
    numbers = {"windows": 3, "host_overloaded_windows": 2, "other_cores": 1.5, "cores": 2}
    text = unstable_sentence("host_overloaded", {**numbers, "own_threads": 2})
    assert text.startswith("2 of 3 windows") and "1.5 of 2 cores" in text and "2 threads" in text


def test_cpu_steal_names_the_worst_share():
    text = unstable_sentence(
        "cpu_steal", {"windows": 4, "cpu_steal_windows": 1, "steal_share": 0.2}
    )
    assert text == "1 of 4 windows: CPU steal 20%"


def test_gpu_throttled_names_the_nvml_reasons():
    text = unstable_sentence("gpu_throttled", {"throttle_reasons": "hw_slowdown|sw_thermal"})
    assert "hw_slowdown, sw_thermal" in text


def test_sm_clock_drop_names_the_lowest_clock_and_the_drop():
    text = unstable_sentence(
        "sm_clock_drop", {"sm_clock_min_mhz": 1500, "sm_clock_median_mhz": 1980}
    )
    assert "1500 MHz" in text and "24%" in text and "1980 MHz" in text


def test_process_stopped_at_budget_counts_the_processes():
    text = unstable_sentence(
        "process_stopped_at_budget", {"stopped_processes": 2, "stopped_after_s": 12.34}
    )
    assert "2 processes" in text and "12.3 s" in text


def test_host_loaded_while_timed_names_the_load():
    text = unstable_sentence("host_loaded_while_timed", {"host_load_other_cores": 1.2, "cores": 2})
    assert "1.2 of 2 cores" in text


def test_process_oom_counts_the_processes():
    assert unstable_sentence("process_oom", {"oom_processes": 1}).startswith("1 further process")


def test_every_code_is_worded_without_numbers_and_an_old_sentence_passes_through():
    for code in vocab.UNSTABLE_REASONS:
        assert unstable_sentence(code, {}) and unstable_sentence(code, {}) != code
    old = "2 of 2 windows: host overloaded: other processes used 1.5 of 2 cores"
    assert unstable_sentences([old], {}) == [old]


def test_codes_and_numbers_come_from_a_run_document_or_a_summary_row():
    row = {"unstable_reasons": "host_overloaded|process_oom", "unstable_oom_processes": 1.0}
    assert unstable_numbers_of(row) == {"oom_processes": 1.0}
    assert len(unstable_sentences(row["unstable_reasons"], unstable_numbers_of(row))) == 2
    document = {"unstable_reasons": ["cpu_steal"], "unstable_numbers": {"steal_share": 0.1}}
    assert unstable_sentences(document["unstable_reasons"], unstable_numbers_of(document)) == [
        "CPU steal 10%"
    ]
