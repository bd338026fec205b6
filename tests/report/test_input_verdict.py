"""The input pipeline's verdict: the rule on hand-made numbers, summary.csv's columns, the
report's section and key finding, and the settings table that shows what the variants vary."""

from __future__ import annotations

import pandas as pd
import pytest

from nnperf.core.vocab import INPUT_VERDICTS
from nnperf.engine import loader
from nnperf.report import aggregate, machines
from nnperf.report.input_verdict import (
    DATA_WAIT_LIMIT,
    INPUT_BOUND,
    LOADER_HEADROOM,
    NOT_INPUT_BOUND,
    UNDETERMINED,
    summary_columns,
    verdict,
)
from nnperf.report.wording import words as wording
from nnperf.report.findings import Finding
from nnperf.report.sections import environment, input_pipeline


def test_the_verdicts_are_codes_of_the_vocabulary():
    assert (INPUT_BOUND, NOT_INPUT_BOUND, UNDETERMINED) == INPUT_VERDICTS
    assert (DATA_WAIT_LIMIT, LOADER_HEADROOM) == (0.10, 1.10)


@pytest.mark.parametrize(
    "throughput, low, high, wait, expected",
    [
        # A step that waits 62% of its time for data: bound, whatever the loader's rate.
        (100.0, 150.0, 170.0, 0.62, INPUT_BOUND),
        # Just above the data-wait limit.
        (100.0, 500.0, 600.0, 0.101, INPUT_BOUND),
        # At the limit, and the loader far ahead: not bound.
        (100.0, 500.0, 600.0, 0.10, NOT_INPUT_BOUND),
        # The loader alone at most 1.09x the step: bound, though the step barely waits.
        (100.0, 95.0, 109.0, 0.02, INPUT_BOUND),
        # Its interval's low end just above 1.1x the step: not bound.
        (100.0, 110.5, 130.0, 0.02, NOT_INPUT_BOUND),
        # An interval across the 1.1x line: undetermined.
        (100.0, 105.0, 130.0, 0.02, UNDETERMINED),
        # No loader rate (a rehearsal, an old document): undetermined unless the wait says.
        (100.0, None, None, 0.02, UNDETERMINED),
        (100.0, None, None, 0.30, INPUT_BOUND),
        # No data-wait share: the loader alone cannot clear a configuration.
        (100.0, 500.0, 600.0, None, UNDETERMINED),
        (100.0, 50.0, 60.0, None, INPUT_BOUND),
        # Nothing measured.
        (None, 500.0, 600.0, 0.0, UNDETERMINED),
        (float("nan"), 500.0, 600.0, 0.0, UNDETERMINED),
    ],
)
def test_the_rule_on_hand_made_numbers(throughput, low, high, wait, expected):
    assert verdict(throughput, low, high, wait) == expected


@pytest.mark.parametrize(
    "low, high, slowest, fastest, expected",
    [
        # Two processes on a busy host: an interval from -1,272 to 4,320 img/s says nothing,
        # but the slowest of the loader's windows still ran 300 img/s against 100 training.
        (-1272.0, 4320.0, 300.0, 2900.0, NOT_INPUT_BOUND),
        # The slowest window below the line and the interval across it: undetermined.
        (-1272.0, 4320.0, 105.0, 2900.0, UNDETERMINED),
        # Even the fastest window below 1.1x the training rate: bound.
        (60.0, 400.0, 80.0, 105.0, INPUT_BOUND),
        # The interval is the tighter bound where it is: its upper end below the line.
        (90.0, 108.0, 95.0, 130.0, INPUT_BOUND),
    ],
)
def test_the_loaders_windows_bound_it_beside_its_interval(low, high, slowest, fastest, expected):
    assert verdict(100.0, low, high, 0.02, slowest, fastest) == expected


def run_document(**changes) -> dict:
    document = {
        "status": "ok",
        "throughput_img_s": 200.0,
        "loader_rate_img_s": 1000.0,
        "loader_rate_img_s_ci95_low": 900.0,
        "loader_rate_img_s_ci95_high": 1100.0,
        "loader_rate_img_s_min": 850.0,
        "loader_rate_img_s_max": 1150.0,
        "loader_ci_method": "processes",
        "loader_n_processes": 3,
        "loader_n_windows": 9,
        "loader_time_s": 0.4,
        "data_wait_share": 0.004,
    }
    document.update(changes)
    return document


def test_summary_columns_put_both_rates_and_the_verdict_in_a_row():
    columns = summary_columns(run_document())
    assert columns["loader_rate_img_s"] == 1000.0
    assert (columns["loader_rate_img_s_ci95_low"], columns["loader_rate_img_s_ci95_high"]) == (
        900.0,
        1100.0,
    )
    assert columns["loader_headroom"] == pytest.approx(5.0)
    assert (columns["data_wait_share"], columns["input_bound"]) == (0.004, NOT_INPUT_BOUND)
    bound = summary_columns(run_document(data_wait_share=0.4, loader_rate_img_s=210.0))
    assert bound["input_bound"] == INPUT_BOUND and bound["loader_headroom"] == pytest.approx(1.05)
    # A configuration that was not measured has no verdict, whatever its numbers.
    over = summary_columns(run_document(status="over_budget", throughput_img_s=None))
    assert (over["input_bound"], over["loader_headroom"]) == (UNDETERMINED, None)
    # A document from before the loader windows.
    old = {"status": "ok", "throughput_img_s": 200.0}
    assert summary_columns(old)["input_bound"] == UNDETERMINED


def test_the_data_wait_share_is_summed_not_a_median():
    # One step in four waits 90 ms of its 100 ms: a median step would show none of it.
    steps = [{"data_wait_s": 0.0, "step_time_s": 0.01}] * 3 + [
        {"data_wait_s": 0.09, "step_time_s": 0.1}
    ]
    assert loader.data_wait_share(steps) == pytest.approx(0.09 / 0.13)
    assert loader.data_wait_share([]) is None


def test_loader_fields_estimate_the_rate_like_throughput():
    # Process 0: 64 images in 0.01 s and 0.02 s; process 1: in 0.016 s twice.
    windows = [
        {"process": 0, "images": 64, "window_s": 0.01},
        {"process": 0, "images": 64, "window_s": 0.02},
        {"process": 1, "images": 64, "window_s": 0.016},
        {"process": 1, "images": 64, "window_s": 0.016},
    ]
    fields = loader.loader_fields(windows, loader_s=0.1)
    # Each process its images over its seconds (128 / 0.03 and 128 / 0.032), then the mean.
    assert fields["loader_rate_img_s"] == pytest.approx((128 / 0.03 + 128 / 0.032) / 2)
    assert fields["loader_ci_method"] == "processes"
    assert (fields["loader_n_processes"], fields["loader_n_windows"]) == (2, 4)
    low, high = fields["loader_rate_img_s_ci95_low"], fields["loader_rate_img_s_ci95_high"]
    assert low < fields["loader_rate_img_s"] < high
    assert fields["loader_time_s"] == 0.1
    assert (fields["loader_rate_img_s_min"], fields["loader_rate_img_s_max"]) == (
        pytest.approx(64 / 0.02),
        pytest.approx(64 / 0.01),
    )
    assert loader.loader_fields([], 0.0)["loader_rate_img_s"] is None


def test_loader_windows_stay_within_their_share_of_the_budget():
    from nnperf.core.contract import TimingSettings

    timing = TimingSettings(max_seconds=60.0)
    assert loader.allowance_s(timing) == pytest.approx(6.0)
    assert loader.next_window_fits(0.0, [], timing)  # the first always runs
    seen = [{"window_s": 2.0, "drain_s": 1.0}]
    assert loader.next_window_fits(3.0, seen, timing)  # 3 spent + 3 for the next = 6
    assert not loader.next_window_fits(3.01, seen, timing)


def test_in_flight_batches_are_workers_times_prefetch():
    from nnperf.core.variant import parse_variant_settings

    assert loader.in_flight_batches(parse_variant_settings({})) == 0
    assert loader.in_flight_batches(parse_variant_settings({"num_workers": 4})) == 8
    settings = parse_variant_settings({"num_workers": 2, "prefetch_factor": 3})
    assert loader.in_flight_batches(settings) == 6
    resident = parse_variant_settings({"num_workers": 4, "data_path": "device_resident"})
    assert loader.in_flight_batches(resident) == 0


# --- summary.csv ---------------------------------------------------------------------------


def aggregated_document(variant: str, rate: float, loader_rates, wait: float) -> dict:
    """A run document of two processes with one window each at `rate`, and a loader window
    per process at `loader_rates`."""
    windows = [
        {"process": p, "window": 0, "images": 64, "window_s": 64 / rate, "throughput_img_s": rate}
        for p in (0, 1)
    ]
    loader_windows = [
        {"process": p, "window": 0, "images": 64, "window_s": 64 / r}
        for p, r in enumerate(loader_rates)
    ]
    return {
        "kind": "timed_run",
        "status": "ok",
        "device": "cpu",
        "model": "tiny",
        "precision": "fp32",
        "batch_size": 8,
        "variant": variant,
        "dataset": "pets",
        "throughput_img_s": rate,
        "throughput_img_s_ci95_low": rate * 0.98,
        "throughput_img_s_ci95_high": rate * 1.02,
        "n_processes": 2,
        "n_windows": 2,
        "windows": windows,
        "processes": [
            {
                "process": p,
                "throughput_img_s": rate,
                "loader_rate_img_s": loader_rates[p],
                "n_loader_windows": 1,
                "started_at_unix": 10.0 * p,
                "ended_at_unix": 10.0 * p + 5,
            }
            for p in (0, 1)
        ],
        "variant_settings": {"num_workers": 0 if variant == "baseline" else 4},
        "environment": {"hostname": "node1", "device_name": "cpu"},
        **loader.loader_fields(loader_windows, 0.2),
        "data_wait_share": wait,
    }


def test_summary_csv_has_the_loader_rate_beside_the_throughput_and_the_verdict():
    documents = [
        ("a.json", aggregated_document("baseline", 100.0, (104.0, 106.0), 0.55)),
        ("b.json", aggregated_document("workers_4", 300.0, (2900.0, 3100.0), 0.01)),
    ]
    runs = aggregate.runs_table(documents)
    summary = aggregate.summary_table(documents, runs).set_index("variant")
    assert summary.loc["baseline", "input_bound"] == INPUT_BOUND
    assert summary.loc["workers_4", "input_bound"] == NOT_INPUT_BOUND
    assert summary.loc["workers_4", "loader_rate_img_s"] == pytest.approx(3000.0)
    assert summary.loc["workers_4", "loader_headroom"] == pytest.approx(10.0)
    assert summary.loc["baseline", "data_wait_share"] == 0.55
    # Codes and numbers only: no cell of the input columns holds a sentence.
    assert set(summary["input_bound"]) <= set(INPUT_VERDICTS)
    assert runs.set_index("variant").loc["workers_4", "loader_rate_img_s"].tolist() == [
        2900.0,
        3100.0,
    ]


# --- the report ----------------------------------------------------------------------------


def summary_frame(rows) -> pd.DataFrame:
    base = {
        "machine": "cpu (node1)",
        "device": "cpu",
        "model": "resnet18",
        "precision": "fp32",
        "batch_size": 64,
        "status": "ok",
        "n_windows": 6,
        "n_processes": 3,
        "ci_method": "processes",
        "unstable": False,
        "loader_ci_method": "processes",
        "loader_n_windows": 9,
        "loader_n_processes": 3,
    }
    return pd.DataFrame([{**base, **row} for row in rows])


def row(variant, rate, loader_rate, wait, verdict_code):
    return {
        "variant": variant,
        "throughput_img_s_mean": rate,
        "throughput_img_s_ci95_low": rate * 0.99,
        "throughput_img_s_ci95_high": rate * 1.01,
        "loader_rate_img_s": loader_rate,
        "loader_rate_img_s_ci95_low": None if loader_rate is None else loader_rate * 0.95,
        "loader_rate_img_s_ci95_high": None if loader_rate is None else loader_rate * 1.05,
        "loader_headroom": None if loader_rate is None else loader_rate / rate,
        "data_wait_share": wait,
        "input_bound": verdict_code,
    }


def input_finding(summary) -> list[str]:
    record = input_pipeline.input_record(summary)
    return [] if record is None else [wording.sentence(record)]


def test_the_key_finding_names_each_input_bound_configuration_once_with_its_numbers():
    summary = summary_frame(
        [
            row("baseline", 40.0, 46.0, 0.62, INPUT_BOUND),
            row("workers_4", 150.0, 900.0, 0.02, NOT_INPUT_BOUND),
            row("decoded_once", 160.0, 16000.0, 0.001, NOT_INPUT_BOUND),
        ]
    )
    record = input_pipeline.input_record(summary)
    assert [r["variant"] for r in record.about["named"]] == ["baseline"]
    assert (record.numbers["bound"], record.numbers["free"], record.numbers["headroom"]) == (
        1,
        2,
        6.0,
    )
    (finding,) = input_finding(summary)
    assert finding == (
        "Data loading limits 1 of 3 measured configurations: resnet18 fp32 at batch 64 "
        "(baseline) (loader alone 46.0 img/s (95% CI 43.7–48.3) against 40.0 img/s (95% CI "
        "39.6–40.4) training; data wait 62% of the step); it does not limit the other 2 (the "
        "loader alone delivers at least 6.00x the training rate and the step waits for data "
        "at most 2.0% of its time)."
    )
    assert finding.count("(baseline)") == 1


def test_the_key_finding_says_plainly_when_data_loading_limits_nothing():
    summary = summary_frame(
        [
            row("baseline", 40.0, 4000.0, 0.004, NOT_INPUT_BOUND),
            row("tuned", 50.0, 40000.0, 0.001, NOT_INPUT_BOUND),
            row("replayed", 50.0, None, 0.001, UNDETERMINED),
        ]
    )
    (finding,) = input_finding(summary)
    assert finding == (
        "Data loading does not limit 2 of 3 measured configurations (the loader alone "
        "delivers at least 100x the training rate and the step waits for data at most "
        "0.4% of its time); for 1 it is undetermined (no loader rate was measured)."
    )
    assert input_finding(summary.iloc[:2])[0].startswith(
        "Data loading limits none of the 2 measured configurations: "
    )
    # A summary from before the loader windows: nothing is said.
    assert input_finding(summary.drop(columns=["input_bound"])) == []


def test_the_input_table_puts_the_loader_beside_training_for_every_configuration():
    summary = summary_frame(
        [
            row("baseline", 40.0, 46.0, 0.62, INPUT_BOUND),
            row("replayed", 50.0, None, 0.001, UNDETERMINED),
        ]
    )
    table = input_pipeline.input_table(summary)
    assert table["Variant"].tolist() == ["baseline", "replayed"]
    assert table["Training (img/s)"].tolist() == ["40.0", "50.0"]
    assert table["Loader alone"].tolist() == [
        "46.0 img/s (95% CI 43.7–48.3)",
        "not measured",
    ]
    assert table["Data wait (share of step)"].tolist() == ["62%", "0.1%"]
    assert table["Input-bound"].tolist() == ["yes", "undetermined"]


def environment_frame() -> pd.DataFrame:
    """Two variants of one precision that differ in their DataLoader only, and a bf16 run."""
    documents = []
    for variant, precision, toggles, amp in (
        ("baseline", "fp32", {"num_workers": 0, "pin_memory": False}, None),
        ("workers_4", "fp32", {"num_workers": 4, "pin_memory": True}, None),
        ("baseline", "bf16", {"num_workers": 0, "pin_memory": False}, "bfloat16"),
    ):
        documents.append(
            {
                "device": "cuda",
                "model": "resnet18",
                "precision": precision,
                "batch_size": 64,
                "variant": variant,
                "status": "ok",
                "variant_settings": {
                    "channels_last": False,
                    "data_path": "dataloader",
                    "prefetch_factor": None,
                    **toggles,
                },
                "environment": {
                    "hostname": "node1",
                    "device_name": "H100",
                    "tf32": False,
                    "memory_format": "contiguous",
                    "amp_dtype": amp,
                    "data_path": "dataloader",
                },
            }
        )
    return machines.environment_frame(documents)


def test_the_settings_table_shows_the_toggles_that_differ():
    frame = environment_frame()
    table = machines.settings_table(frame)
    assert list(table.columns) == [
        "machine",
        "variant",
        "precision",
        "amp_dtype",
        "num_workers",
        "pin_memory",
    ]
    by_variant = table.set_index(["variant", "precision"])
    assert by_variant.loc[("workers_4", "fp32"), "num_workers"] == "4"
    assert by_variant.loc[("workers_4", "fp32"), "pin_memory"] == "True"
    assert by_variant.loc[("baseline", "bf16"), "amp_dtype"] == "bfloat16"
    shared = machines.shared_settings(frame)
    assert shared == {"tf32": "False", "memory_format": "contiguous", "data_path": "dataloader"}
    # channels_last is the record's memory_format, not a second column.
    assert "channels_last" not in table.columns and "channels_last" not in shared
    sentence = wording.sentence(Finding("shared_settings", shared))
    assert sentence == (
        "Every variant and precision ran with tf32 False, memory format contiguous, data path "
        "dataloader; the table shows what differs."
    )
    display = environment.settings_display(table)
    assert "Num workers" in display.columns and "Pin memory" in display.columns


def test_one_configuration_shows_every_setting():
    frame = environment_frame()
    one = frame[(frame["variant"] == "baseline") & (frame["precision"] == "fp32")]
    table = machines.settings_table(one)
    assert {"tf32", "memory_format", "data_path", "num_workers", "pin_memory"} <= set(table.columns)
    assert machines.shared_settings(one) == {}
