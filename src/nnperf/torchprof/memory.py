"""What a training step's peak memory holds, and how much larger a batch would fit.

From the allocation events of a torch.profiler trace (`[memory]`: time, address, bytes,
device; `nnperf.torchprof.events.parse_trace` reads them) and an inventory the profiling job
(`nnperf.torchprof.profile`) records from the live tensors: parameter, buffer and optimizer-state
bytes (exact), the bytes allocated when the profiled window starts, and each step's gradient
storages (address and size, noted between backward and the optimizer step).

The split at the peak
---------------------
Walking the events from the window's start gives the allocated bytes over time; their
maximum is the peak. The allocations alive at the peak are split into **gradients** (a
gradient storage of that step, still alive when the gradients were noted: the address alone
could have been reused), **activations** (allocated during that step's forward phase and
not yet freed: the tensors autograd saved for backward, and outputs still referenced) and
the rest; **parameters** and **optimizer state** are the inventory's exact sizes (they live
across steps); **other** is the peak less those four: buffers, the input batch, backward's
temporaries and workspaces, a device-resident data set. The five add up to the peak exactly.

Which peak: on CUDA the caching allocator's own `torch.cuda.max_memory_allocated` over the
profiled steps (the events are walked from `torch.cuda.memory_allocated` at the window's
start, and `event_peak_bytes` is kept beside it as a check). On the CPU the allocator keeps
no statistics and the profiler reports only allocations made while it records, so the peak
is the known persistent tensors (parameters, buffers, optimizer state, a resident data set)
plus the largest rise the events show; the DataLoader's own copy of the data set and
anything else allocated outside the training is not counted.

This is the split torch's (deprecated) `export_memory_timeline` makes with its categories,
without its need for `with_stack=True`: on resnet18_cifar at batch 16 on a CPU both gave the
same parameters, optimizer state and gradients to the byte, and activations within 4 bytes.
Run to run the CPU peak can differ by a gradient's size or so: autograd reuses a gradient's
buffer for `.grad` only when nothing else still references it.

What it is not: it does not run the profiler or read the trace file (`nnperf.torchprof.analysis`),
and it says nothing about time.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd

# `Device Type` of the profiler's allocation events (c10::DeviceType).
DEVICE_TYPES = {"cpu": 0, "cuda": 1, "mps": 13}

MEMORY_CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations", "other")
# How sentences, tables and figures name them.
CATEGORY_LABELS = {
    "parameters": "parameters",
    "gradients": "gradients",
    "optimizer_state": "optimizer state",
    "activations": "activations",
    "other": "other",
}
MEMORY_COLUMNS = ("category", "bytes", "share_of_peak", "estimate_bytes", "estimate_source")

# Share of the device's memory a batch may plan to use: the rest is left to allocator
# fragmentation and reserve, the CUDA context and library workspaces.
USABLE_MEMORY_SHARE = 0.9

US = 1e-6  # event times are microseconds

Intervals = Sequence[tuple[float, float]]


def _gradient_storages(inventory: Mapping, step: int) -> dict[int, int]:
    for record in inventory.get("gradients") or []:
        if int(record["step"]) == step:
            return {int(addr): int(size) for addr, size in record["storages"].items()}
    return {}


def _gradient_time(phases: Mapping[str, Intervals], step_end: float) -> float:
    """When a step's gradients were noted: between backward and the optimizer phase."""
    if phases.get("optimizer"):
        return phases["optimizer"][0][0]
    if phases.get("backward"):
        return phases["backward"][-1][1]
    return step_end


def _step_of(time: float, intervals: Intervals) -> int:
    for index, (low, high) in enumerate(intervals):
        if low <= time < high or (index == len(intervals) - 1 and time == high):
            return index
    return -1


def _phase_of(time: float, phases: Mapping[str, Intervals]) -> str | None:
    for phase, ranges in phases.items():
        if any(start <= time < end for start, end in ranges):
            return phase
    return None


def memory_breakdown(
    events: pd.DataFrame,
    step_intervals: Intervals,
    step_phases: Sequence[Mapping[str, Intervals]],
    inventory: Mapping,
) -> dict:
    """The peak allocated bytes of the profiled steps and their split (module docstring).

    `events`: allocation events (columns `time`, `bytes`, `addr`, `device_type`; times in
    µs); `step_intervals` and `step_phases`: each step's interval and its phases' ranges, in
    the same clock. `inventory` (plain data, recorded by the job): `device_type` (the events'
    `Device Type` to count), `start_allocated_bytes` (allocated when the window starts),
    `parameter_bytes`, `buffer_bytes`, `optimizer_state_bytes`, `allocator_peak_bytes` (CUDA's
    own peak, or None), `gradients` (per step: {address: bytes} of its gradient storages),
    `batch_size` and `device_total_bytes`.
    """
    low, high = step_intervals[0][0], step_intervals[-1][1]
    events = events[
        (events["device_type"] == inventory.get("device_type"))
        & (events["time"] >= low)
        & (events["time"] <= high)
    ].sort_values("time", kind="stable")
    start = int(inventory["start_allocated_bytes"])
    running = start + np.cumsum(events["bytes"].to_numpy(dtype=np.int64))
    if len(running) and running.max() > start:
        peak_at = int(np.argmax(running))
        event_peak = int(running[peak_at])
    else:
        peak_at, event_peak = -1, start
    # Replay the events up to the peak: the window's allocations alive there.
    live: dict[int, tuple[int, float]] = {}
    for position, row in enumerate(events.itertuples(index=False)):
        if position > peak_at:
            break
        if row.bytes > 0:
            live[int(row.addr)] = (int(row.bytes), float(row.time))
        else:
            live.pop(int(row.addr), None)
    peak_time = float(events["time"].iloc[peak_at]) if peak_at >= 0 else low
    peak_step = _step_of(peak_time, step_intervals)
    peak_phase = _phase_of(peak_time, step_phases[peak_step]) if peak_step >= 0 else None
    gradients = activations = 0
    if peak_step >= 0 and peak_at >= 0:
        storages = _gradient_storages(inventory, peak_step)
        noted_at = _gradient_time(step_phases[peak_step], step_intervals[peak_step][1])
        later = events.iloc[peak_at + 1 :]
        freed_before_noted = set(
            later.loc[(later["bytes"] < 0) & (later["time"] <= noted_at), "addr"].astype(int)
        )
        forward = step_phases[peak_step].get("forward", [])
        for addr, (size, allocated_at) in live.items():
            if addr in storages and addr not in freed_before_noted:
                gradients += size
            elif any(s <= allocated_at < e for s, e in forward):
                activations += size
    allocator_peak = inventory.get("allocator_peak_bytes")
    peak = int(allocator_peak) if allocator_peak is not None else event_peak
    parameters = int(inventory.get("parameter_bytes", 0))
    optimizer_state = int(inventory.get("optimizer_state_bytes", 0))
    gradients_total = max(
        (sum(_gradient_storages(inventory, s).values()) for s in range(len(step_intervals))),
        default=0,
    )
    return {
        "peak_allocated_bytes": peak,
        "peak_source": "allocator" if allocator_peak is not None else "allocation events",
        "event_peak_bytes": event_peak,
        "start_allocated_bytes": start,
        "peak_step": peak_step if peak_step >= 0 else None,
        "peak_phase": peak_phase,
        "peak_time_in_step_s": (
            (peak_time - step_intervals[peak_step][0]) * US if peak_step >= 0 else None
        ),
        "parameters_bytes": parameters,
        "gradients_bytes": gradients,
        "optimizer_state_bytes": optimizer_state,
        "activations_bytes": activations,
        "other_bytes": peak - parameters - gradients - optimizer_state - activations,
        "buffers_bytes": int(inventory.get("buffer_bytes", 0)),
        "resident_data_bytes": int(inventory.get("resident_data_bytes", 0)),
        "gradients_total_bytes": int(gradients_total),
        "allocation_events": int(len(events)),
        "batch_size": inventory.get("batch_size"),
        "device_total_bytes": inventory.get("device_total_bytes"),
    }


def saved_activation_estimate(complexity: Mapping | None, batch_size: int) -> int | None:
    """The complexity stage's saved-activation bytes at `batch_size` (fp32 storage):
    `saved_activation_fixed_bytes + batch_size * saved_activation_bytes_per_image`."""
    if not complexity or complexity.get("saved_activation_bytes_per_image") is None:
        return None
    per_image = int(complexity["saved_activation_bytes_per_image"])
    return int(complexity.get("saved_activation_fixed_bytes") or 0) + int(batch_size) * per_image


def memory_table(memory: Mapping | None, complexity: Mapping | None = None) -> pd.DataFrame:
    """One row per category of the peak (`MEMORY_CATEGORIES`, bytes and share of the peak),
    beside the complexity stage's estimate of it: weights, all gradients (at the peak only
    those computed so far are alive), optimizer state and saved activations at the profiled
    batch size (fp32 storage; autocast keeps many activations in 16 bits)."""
    if not memory:
        return pd.DataFrame(columns=list(MEMORY_COLUMNS))
    peak = memory.get("peak_allocated_bytes")
    batch = memory.get("batch_size")
    known = complexity or {}
    estimates = {
        "parameters": (known.get("weight_bytes"), "weight_bytes"),
        "gradients": (known.get("gradient_bytes"), "gradient_bytes (all gradients)"),
        "optimizer_state": (known.get("optimizer_state_bytes"), "optimizer_state_bytes"),
        "activations": (
            saved_activation_estimate(complexity, batch) if batch else None,
            "saved activations (fp32)",
        ),
        "other": (None, ""),
    }
    rows = []
    for category in MEMORY_CATEGORIES:
        value = memory.get(f"{category}_bytes")
        estimate, source = estimates[category]
        rows.append(
            {
                "category": category,
                "bytes": value,
                "share_of_peak": value / peak if value is not None and peak else None,
                "estimate_bytes": estimate,
                "estimate_source": f"complexity: {source}" if estimate is not None else "",
            }
        )
    return pd.DataFrame(rows, columns=list(MEMORY_COLUMNS))


def batch_independent_bytes(memory: Mapping) -> int:
    """What the peak holds that does not grow with the batch: parameters, the gradients
    and optimizer state alive at the peak, the model's buffers and a resident data set."""
    return int(
        memory.get("parameters_bytes", 0)
        + memory.get("gradients_bytes", 0)
        + memory.get("optimizer_state_bytes", 0)
        + memory.get("buffers_bytes", 0)
        + memory.get("resident_data_bytes", 0)
    )


def max_batch_size(
    peak_bytes: int,
    batch_size: int,
    fixed_bytes: int,
    total_bytes: int,
    usable_share: float = USABLE_MEMORY_SHARE,
) -> int | None:
    """The largest batch whose peak fits in `usable_share` of `total_bytes`, by a linear model.

    The peak at batch B is taken as `fixed + B * per_image`, with `fixed_bytes` the part
    that does not grow with the batch (`batch_independent_bytes`) and `per_image =
    (peak_bytes - fixed_bytes) / batch_size` measured at the profiled batch. CNN activations
    are proportional to the batch, so the model holds to first order. Its limits: at another
    batch the peak can move to another point of the step; cuDNN and oneDNN may pick
    algorithms with larger workspaces; the caching allocator fragments (hence
    `usable_share`); the CUDA context and other processes' memory are not allocated
    tensors; on a CPU the total is the machine's memory, shared with everything else.
    An estimate to try, not a guarantee. Returns 0 when even the fixed part does not fit,
    and None when nothing grows with the batch or the total is unknown (no basis to
    extrapolate).
    """
    per_image = (peak_bytes - fixed_bytes) / batch_size
    if not per_image > 0 or not total_bytes:
        return None
    room = usable_share * total_bytes - fixed_bytes
    return max(0, int(room // per_image))


def headroom(memory: Mapping, usable_share: float = USABLE_MEMORY_SHARE) -> dict:
    """`max_batch_size` for a memory breakdown: the batch that fits, its ratio to the
    profiled batch and the bytes per image it assumed (None where unknown)."""
    peak, batch = memory.get("peak_allocated_bytes"), memory.get("batch_size")
    total = memory.get("device_total_bytes")
    if not peak or not batch or not total:
        return {
            "max_batch_size": None,
            "headroom_factor": None,
            "per_image_bytes": None,
            "usable_share": usable_share,
        }
    fixed = batch_independent_bytes(memory)
    largest = max_batch_size(peak, batch, fixed, total, usable_share)
    return {
        "max_batch_size": largest,
        "headroom_factor": largest / batch if largest is not None else None,
        "per_image_bytes": (peak - fixed) / batch,
        "usable_share": usable_share,
    }
