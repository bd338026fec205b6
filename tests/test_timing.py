"""Phase timers and the timed window: formulas against hand-computed values, real CPU loop."""

from __future__ import annotations

import math

import pytest

from nnperf.errors import NnperfError
from nnperf.timing import (
    PHASES,
    HostClock,
    TimingResult,
    describe,
    marks_per_window,
    step_rows,
    summarize,
    time_training,
)
from nnperf.contract import TrainingSettings
from nnperf.train import build_training
from nnperf.variant import parse_variant_settings
from tiny_training import tiny_data, tiny_model


def test_step_rows_from_shared_marks():
    """Marks are shared between steps: each step's phases add up to its step time."""
    marks = [
        0.0,
        0.1,
        0.15,
        0.45,
        1.05,
        1.25,  # step 0
        1.3,
        1.32,
        1.52,
        1.92,
        2.02,
    ]  # step 1 (starts at step 0's last mark)
    rows = step_rows(marks, HostClock(), [2.5, 2.25])
    assert [row["step"] for row in rows] == [0, 1]
    assert rows[0]["data_wait_s"] == pytest.approx(0.1)
    assert rows[0]["h2d_s"] == pytest.approx(0.05)
    assert rows[0]["forward_s"] == pytest.approx(0.3)
    assert rows[0]["backward_s"] == pytest.approx(0.6)
    assert rows[0]["optimizer_s"] == pytest.approx(0.2)
    assert rows[0]["step_time_s"] == pytest.approx(1.25)
    assert rows[1]["data_wait_s"] == pytest.approx(0.05)
    assert rows[1]["step_time_s"] == pytest.approx(0.77)
    assert rows[1]["loss"] == 2.25
    assert marks_per_window(2) == len(marks)


def test_describe_hand_computed():
    stats = describe([0.1, 0.2, 0.3, 0.4])
    assert stats["median"] == pytest.approx(0.25)
    assert stats["mean"] == pytest.approx(0.25)
    assert stats["std"] == pytest.approx(math.sqrt(0.05 / 3))  # sample std: sum sq dev / (n-1)
    assert stats["min"] == 0.1 and stats["max"] == 0.4
    assert stats["p10"] == pytest.approx(0.13)  # linear: 0.1 + 0.3*(0.2-0.1)
    assert stats["p90"] == pytest.approx(0.37)
    assert describe([0.5])["std"] is None


def _result(step_times, warmup):
    steps = [
        {"step": i, **{f"{p}_s": t / len(PHASES) for p in PHASES}, "step_time_s": t, "loss": 1.0}
        for i, t in enumerate(step_times)
    ]
    return TimingResult(
        warmup_step_time_s=warmup,
        window_s=sum(step_times),
        window_started_at_unix=10.0,
        window_ended_at_unix=10.0 + sum(step_times),
        steps=steps,
        loss_start=2.3,
        loss_end=1.0,
        peak_memory_device_bytes=None,
    )


def test_summary_throughput_and_compile_time_hand_computed():
    fields = summarize(_result([0.1, 0.2, 0.3], warmup=[1.0, 0.3]), batch_size=8, compiled=True)
    assert fields["throughput_img_s"] == pytest.approx(24 / 0.6)  # 3 steps x 8 images / 0.6 s
    assert fields["images_timed"] == 24
    # warm-up above steady state: (1.0 + 0.3) - 2 x median(0.1, 0.2, 0.3)
    assert fields["compile_time_s"] == pytest.approx(0.9)
    assert fields["first_step_time_s"] == 1.0
    assert fields["warmup_time_s"] == pytest.approx(1.3)
    assert fields["phase_time_s"]["forward"] == pytest.approx(0.2 / 5)
    eager = summarize(_result([0.1, 0.2, 0.3], warmup=[1.0, 0.3]), batch_size=8, compiled=False)
    assert eager["compile_time_s"] is None


def _training(batch_size=4):
    data = tiny_data()
    return build_training(
        tiny_model(),
        device="cpu",
        precision="fp32",
        batch_size=batch_size,
        settings=parse_variant_settings({}),
        hyper=TrainingSettings(),
        seed=0,
        images=data.images,
        labels=data.labels,
        mean=data.mean,
        std=data.std,
        input_size=32,
    )


def test_timed_window_on_cpu_is_consistent():
    result = time_training(_training(), warmup_steps=2, timed_steps=4)
    assert len(result.warmup_step_time_s) == 2 and len(result.steps) == 4
    total = sum(row["step_time_s"] for row in result.steps)
    # Marks are shared, so the steps tile the window; only the loop's own bookkeeping between
    # the first mark and the window's wall clock is outside them.
    assert 0 < total <= result.window_s
    assert total > 0.9 * result.window_s
    for row in result.steps:
        assert sum(row[f"{p}_s"] for p in PHASES) == pytest.approx(row["step_time_s"])
        assert all(row[f"{p}_s"] >= 0 for p in PHASES)
    assert result.window_started_at_unix < result.window_ended_at_unix
    assert result.loss_end == result.steps[-1]["loss"]
    assert result.peak_memory_device_bytes is None  # CPU: the host peak covers it


@pytest.mark.parametrize(
    ("warmup", "timed", "message"),
    [
        (0, 3, r"^warmup_steps 0 is not allowed; allowed: an integer >= 1"),
        (1, 0, r"^timed_steps 0 is not allowed; allowed: an integer >= 1"),
    ],
)
def test_window_sizes_are_checked(warmup, timed, message):
    with pytest.raises(NnperfError, match=message):
        time_training(_training(), warmup_steps=warmup, timed_steps=timed)
