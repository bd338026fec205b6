"""Phase timers and the timed window: formulas against hand-computed values, real CPU loop."""

from __future__ import annotations

import math

import pytest

from nnperf.core.contract import TrainingSettings
from nnperf.core.errors import NnperfError
from nnperf.core.variant import parse_variant_settings
from nnperf.engine.step import build_training
from nnperf.engine.stopping import check_steps, compile_time, step_time_stats
from nnperf.engine.timing import (
    PHASES,
    DeviceMemoryTracker,
    HostClock,
    marks_per_window,
    step_rows,
    time_window,
    warmup_step,
)
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


def test_step_time_stats_hand_computed():
    stats = step_time_stats([0.1, 0.2, 0.3, 0.4])
    assert stats["median"] == pytest.approx(0.25)
    assert stats["mean"] == pytest.approx(0.25)
    assert stats["std"] == pytest.approx(math.sqrt(0.05 / 3))  # sample std: sum sq dev / (n-1)
    assert stats["min"] == 0.1 and stats["max"] == 0.4
    assert stats["p10"] == pytest.approx(0.13)  # linear: 0.1 + 0.3*(0.2-0.1)
    assert stats["p90"] == pytest.approx(0.37)
    assert step_time_stats([0.5])["std"] is None


def test_compile_time_is_warmup_above_steady_state():
    # (1.0 + 0.3) - 2 x 0.2
    assert compile_time([1.0, 0.3], steady_step_s=0.2) == pytest.approx(0.9)
    assert compile_time([0.1, 0.1], steady_step_s=0.2) == 0.0  # never negative


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
    training = _training()
    memory = DeviceMemoryTracker(training.device)
    warmups = [warmup_step(training, memory) for _ in range(2)]
    assert all(seconds > 0 for seconds, _ in warmups)
    result = time_window(training, 4, memory)
    assert len(result.steps) == 4
    total = sum(row["step_time_s"] for row in result.steps)
    # Marks are shared, so the steps tile the window; only the loop's own bookkeeping between
    # the first mark and the window's wall clock is outside them.
    assert 0 < total <= result.window_s
    assert total > 0.9 * result.window_s
    for row in result.steps:
        assert sum(row[f"{p}_s"] for p in PHASES) == pytest.approx(row["step_time_s"])
        assert all(row[f"{p}_s"] >= 0 for p in PHASES)
    assert result.started_at_unix < result.ended_at_unix
    assert result.loss_end == result.steps[-1]["loss"]
    assert memory.peak_bytes() is None  # CPU: the host peak covers it


@pytest.mark.parametrize(
    ("warmup", "timed", "message"),
    [
        (0, 3, r"^warmup_steps 0 is not allowed; allowed: an integer >= 1"),
        (1, 0, r"^timed_steps 0 is not allowed; allowed: an integer >= 1"),
    ],
)
def test_window_sizes_are_checked(warmup, timed, message):
    with pytest.raises(NnperfError, match=message):
        check_steps(warmup, timed)
