"""The peak memory's split, the complexity estimate beside it, and the batch-size headroom."""

from __future__ import annotations

import pandas as pd
import pytest

from nnperf.torchprof import analysis as operators
from nnperf.torchprof import memory as step_memory
from op_traces import annotation, cpu_trace, memory

# One 100 µs step: forward [10,40), backward [40,80), optimizer [80,95).
INTERVALS = [(0.0, 100.0)]
PHASES = [{"forward": [(10.0, 40.0)], "backward": [(40.0, 80.0)], "optimizer": [(80.0, 95.0)]}]
INVENTORY = {
    "device_type": 1,
    "start_allocated_bytes": 1000,  # parameters 400, optimizer state 400, buffers 50, 150 more
    "parameter_bytes": 400,
    "optimizer_state_bytes": 400,
    "buffer_bytes": 50,
    "allocator_peak_bytes": None,
    # Noted at the optimizer phase's start (80): address 9 held a backward temporary at the
    # peak, freed at 60 and reused for a gradient at 65.
    "gradients": [{"step": 0, "storages": {"5": 400, "9": 80}}],
    "batch_size": 10,
    "device_total_bytes": 10_000,
}


def events(*rows) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["time", "bytes", "addr", "device_type"])


EVENTS = events(
    (5.0, 100, 1, 1),  # the input batch (before forward): other
    (15.0, 300, 2, 1),  # activation
    (20.0, 200, 3, 1),  # activation
    (30.0, 50, 4, 1),  # forward temporary, freed before the peak
    (35.0, -50, 4, 1),
    (45.0, 400, 5, 1),  # a gradient
    (47.0, 80, 9, 1),  # backward temporary at an address a gradient takes later
    (48.0, 10_000, 77, 0),  # another device: not counted
    (50.0, 120, 6, 1),  # backward temporary; peak: 1000 + 100 + 300 + 200 + 400 + 80 + 120
    (55.0, -300, 2, 1),
    (60.0, -80, 9, 1),
    (60.0, -120, 6, 1),
    (65.0, 80, 9, 1),  # the second gradient
)


def test_split_at_the_peak_hand_computed():
    split = step_memory.memory_breakdown(EVENTS, INTERVALS, PHASES, INVENTORY)
    assert split["peak_allocated_bytes"] == split["event_peak_bytes"] == 2200
    assert split["peak_source"] == "allocation events"
    assert (split["peak_step"], split["peak_phase"]) == (0, "backward")
    assert split["peak_time_in_step_s"] == pytest.approx(50e-6)
    assert split["parameters_bytes"] == 400
    assert split["optimizer_state_bytes"] == 400
    assert split["gradients_bytes"] == 400  # not address 9: another tensor held it then
    assert split["activations_bytes"] == 500
    # 150 + buffers 50 before the window, the input batch 100, temporaries 80 + 120.
    assert split["other_bytes"] == 500
    parts = sum(split[f"{c}_bytes"] for c in step_memory.MEMORY_CATEGORIES)
    assert parts == split["peak_allocated_bytes"]
    assert split["gradients_total_bytes"] == 480
    assert split["allocation_events"] == 12


def test_the_allocators_own_peak_wins_and_the_rest_goes_to_other():
    split = step_memory.memory_breakdown(
        EVENTS, INTERVALS, PHASES, {**INVENTORY, "allocator_peak_bytes": 2300}
    )
    assert split["peak_allocated_bytes"] == 2300 and split["event_peak_bytes"] == 2200
    assert split["peak_source"] == "allocator"
    assert split["other_bytes"] == 600


def test_no_allocations_leave_the_persistent_tensors():
    split = step_memory.memory_breakdown(events(), INTERVALS, PHASES, INVENTORY)
    assert split["peak_allocated_bytes"] == 1000
    assert split["activations_bytes"] == split["gradients_bytes"] == 0
    assert split["other_bytes"] == 200


def test_memory_events_are_read_from_the_trace():
    trace = cpu_trace(steps=1)
    trace["traceEvents"] += [memory(1020, 64, 11), memory(1030, -64, 11), memory(1040, 8, 12)]
    trace["traceEvents"].append(annotation("not a step", 0, 1))
    analysis = operators.analyse(
        trace, "cpu", inventory={**INVENTORY, "device_type": 0, "gradients": []}
    )
    # Allocated at 20 µs into the step, during forward: an activation while alive.
    assert analysis.memory["event_peak_bytes"] == 1064
    assert analysis.memory["activations_bytes"] == 64
    assert analysis.memory["peak_phase"] == "forward"


@pytest.mark.parametrize(
    ("peak", "batch", "fixed", "total", "largest"),
    [
        # per image (10e9 - 2e9) / 100 = 8e7; room 0.9 * 80e9 - 2e9 = 70e9; 70e9 / 8e7 = 875
        (10e9, 100, 2e9, 80e9, 875),
        # per image 1,000; room 0.9 * 100,000 - 10,000 = 80,000
        (20_000, 10, 10_000, 100_000, 80),
        (200_000, 10, 95_000, 100_000, 0),  # the fixed part alone does not fit
        (10_000, 10, 10_000, 100_000, None),  # nothing grows with the batch
        (20_000, 10, 10_000, None, None),  # unknown total
    ],
)
def test_max_batch_size_hand_computed(peak, batch, fixed, total, largest):
    assert step_memory.max_batch_size(peak, batch, fixed, total) == largest


def test_headroom_of_a_breakdown():
    split = step_memory.memory_breakdown(EVENTS, INTERVALS, PHASES, INVENTORY)
    room = step_memory.headroom(split)
    # fixed = parameters 400 + gradients 400 + optimizer state 400 + buffers 50 = 1,250;
    # per image (2,200 - 1,250) / 10 = 95; (9,000 - 1,250) // 95 = 81.
    assert room["per_image_bytes"] == pytest.approx(95)
    assert room["max_batch_size"] == 81
    assert room["headroom_factor"] == pytest.approx(8.1)
    assert step_memory.headroom({**split, "device_total_bytes": None})["max_batch_size"] is None


def test_memory_table_puts_the_complexity_estimate_beside_each_category():
    split = step_memory.memory_breakdown(EVENTS, INTERVALS, PHASES, INVENTORY)
    complexity = {
        "weight_bytes": 400,
        "gradient_bytes": 400,
        "optimizer_state_bytes": 400,
        "saved_activation_bytes_per_image": 45,
        "saved_activation_fixed_bytes": 20,
    }
    table = step_memory.memory_table(split, complexity).set_index("category")
    assert list(table.index) == list(step_memory.MEMORY_CATEGORIES)
    assert table["bytes"].sum() == split["peak_allocated_bytes"]
    assert table.at["activations", "estimate_bytes"] == 20 + 10 * 45
    assert table.at["parameters", "estimate_bytes"] == table.at["parameters", "bytes"]
    assert table.at["activations", "share_of_peak"] == pytest.approx(500 / 2200)
    assert pd.isna(table.at["other", "estimate_bytes"])
    assert "complexity" in table.at["gradients", "estimate_source"]
    without = step_memory.memory_table(split).set_index("category")
    assert without["estimate_bytes"].isna().all()
    assert list(step_memory.memory_table(None).columns) == list(step_memory.MEMORY_COLUMNS)


def test_saved_activation_estimate():
    document = {
        "saved_activation_bytes_per_image": 4_700_160,
        "saved_activation_fixed_bytes": 38_400,
    }
    assert step_memory.saved_activation_estimate(document, 16) == 38_400 + 16 * 4_700_160
    assert step_memory.saved_activation_estimate(None, 16) is None
