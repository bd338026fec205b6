"""What a torch.profiler trace says about training steps: busy time, and everything together.

`analyse` turns one trace document into the operators and layers tables
(`nnperf.torchprof.breakdown`), the steps table and its summary (here), and, with the job's
inventory, the memory breakdown (`nnperf.torchprof.memory`); the trace itself is read and its
events placed by `nnperf.torchprof.events`. The output is tidy tables and plain numbers.
`top` and `time_column` are how the report reads the tables.

What it is not: it does not run the profiler (`nnperf.torchprof.profile`), write sentences
(`nnperf.report.sections.operators`) or draw (`nnperf.report.plots.operators`). It imports no torch.

Definitions (times are per profiled step: summed over the steps, divided by their number)
---------------------------------------------------------------------------------------
* **Busy time**. On an accelerator, **device busy** is the union of the device's kernel, copy
  and memset intervals within the step interval: the time the device computes. **Host
  operator time** is the union, over host threads, of the intervals of top-level operators
  and runtime calls (those not inside another one). **Host dispatch time** is the host
  operator time less the time spent blocked in synchronising runtime calls
  (`SYNC_CALLS`): the time the host spends inside PyTorch issuing work (dispatcher, autograd
  bookkeeping, kernel launches). On the CPU there are no kernels: the operators compute on
  the host, so busy means the host operator time (the cores are inside an operator, the rest
  is Python and framework work between operators) and device busy and host dispatch are not
  applicable (null).
* **Memory**: the peak and its split into parameters, gradients, optimizer state,
  activations and other come from the trace's allocation events and the job's inventory of
  the live tensors; `nnperf.torchprof.memory` has the method.

Why not HolisticTraceAnalysis
-----------------------------
HTA 0.5.0 was evaluated on a CPU trace of this job and on a synthetic GPU trace. On the CPU
trace (the default study) its temporal and idle-time breakdowns fail (IndexError,
ValueError) and its kernel tables are empty: it analyses GPU kernels only. On the GPU trace
its temporal breakdown measures idle time between the first and the last kernel, not over
the step's wall time, so a host-bound step's idle head and tail are not counted; it needs
`ProfilerStep` annotations and a rank per file, has no layer grouping and no memory split,
and installs jupyterlab, plotly, pydot, networkx and pytest at run time. What is needed here
is an interval union and group-bys over one trace, a few hundred lines with pandas and numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from nnperf.core.vocab import PHASES
from nnperf.torchprof import memory as step_memory
from nnperf.torchprof.breakdown import (
    LAYER_COLUMNS,
    OPERATOR_COLUMNS,
    OUTSIDE_OPERATORS_ROW,
    layers_table,
    operators_table,
)
from nnperf.torchprof.events import (
    INPUT_PHASES,
    OPERATOR_CATEGORIES,
    RUNTIME_CATEGORIES,
    US,
    Profile,
    parse_trace,
    place,
)

# Runtime calls in which the host blocks until the device has caught up (CUDA and HIP).
SYNC_CALLS = (
    "cudaDeviceSynchronize",
    "cudaStreamSynchronize",
    "cudaEventSynchronize",
    "cudaMemcpy",
    "hipDeviceSynchronize",
    "hipStreamSynchronize",
    "hipEventSynchronize",
    "hipMemcpy",
)


# How a profile ended (document `status`): profiled; out of memory; its warm-up and one
# profiled step cannot fit in `operator_profile.max_seconds`; the profiler could not run
# here (a build without Kineto, a CUPTI failure that raises).
PROFILE_STATUSES = ("ok", "oom", "over_budget", "unsupported")
STEP_COLUMNS = (
    "step",
    "step_time_s",
    *(f"{phase}_s" for phase in PHASES),
    "input_time_s",
    "host_operator_time_s",
    "host_operator_share",
    "host_dispatch_time_s",
    "launch_time_s",
    "sync_wait_time_s",
    "device_busy_time_s",
    "device_busy_share",
    "device_events",
    "busy_kind",
    "busy_share",
)

BUSY_DEVICE = "device kernels"
BUSY_HOST = "host operators"

# Reading the busy share. At or above DEVICE_BOUND_SHARE the device (on the CPU: the
# operators) is busy for all but a tenth of the step: only faster kernels, or less work,
# make the step faster. Below HOST_BOUND_SHARE it idles for a quarter of the step or more,
# waiting for the host: faster kernels shorten only the busy part, while removing the wait
# is worth 1.33x or more (the same quarter as the input-bound threshold of
# `nnperf.report.sections.breakdown`). In between, both matter.
DEVICE_BOUND_SHARE = 0.9
HOST_BOUND_SHARE = 0.75
DEVICE_BOUND, HOST_BOUND, MIXED = "device-bound", "host-bound", "mixed"
# The same readings on the CPU, where the operators run on the host: a busy step is bound by
# its operators' arithmetic, an idle one by the Python and framework work between them.
OPERATOR_BOUND, OVERHEAD_BOUND = "operator-bound", "overhead-bound"


# --------------------------------------------------------------------------------------
# Intervals.
# --------------------------------------------------------------------------------------
def merge_intervals(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of half-open intervals [start, end) as sorted, disjoint intervals.

    Empty or reversed intervals are dropped; touching ones are joined.
    """
    ordered = sorted((float(s), float(e)) for s, e in intervals if e > s)
    merged: list[tuple[float, float]] = []
    for start, end in ordered:
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def union_length(
    intervals: Iterable[tuple[float, float]], low: float = -math.inf, high: float = math.inf
) -> float:
    """Length of the union of `intervals` within [low, high)."""
    total = 0.0
    for start, end in merge_intervals(intervals):
        start, end = max(start, low), min(end, high)
        if end > start:
            total += end - start
    return total


def intersect_intervals(
    a: Iterable[tuple[float, float]], b: Iterable[tuple[float, float]]
) -> list[tuple[float, float]]:
    """The union of `a` intersected with the union of `b` (sorted, disjoint)."""
    left, right = merge_intervals(a), merge_intervals(b)
    out: list[tuple[float, float]] = []
    i = j = 0
    while i < len(left) and j < len(right):
        start = max(left[i][0], right[j][0])
        end = min(left[i][1], right[j][1])
        if end > start:
            out.append((start, end))
        if left[i][1] < right[j][1]:
            i += 1
        else:
            j += 1
    return out


def busy_share(busy_s: float, wall_s: float) -> float | None:
    """Busy time over wall time (None without a wall time)."""
    if wall_s is None or not wall_s > 0 or busy_s is None or math.isnan(busy_s):
        return None
    return float(busy_s) / float(wall_s)


def bound(share: float | None, busy_kind: str = BUSY_DEVICE) -> str | None:
    """What bounds a step with this busy share: `device-bound`, `host-bound` or `mixed` for
    a device's busy share; `operator-bound`, `overhead-bound` or `mixed` for the CPU's host
    operator share (module constants)."""
    if share is None or math.isnan(share):
        return None
    host = busy_kind == BUSY_HOST
    if share >= DEVICE_BOUND_SHARE:
        return OPERATOR_BOUND if host else DEVICE_BOUND
    if share < HOST_BOUND_SHARE:
        return OVERHEAD_BOUND if host else HOST_BOUND
    return MIXED


def steps_table(profile: Profile, device: str) -> pd.DataFrame:
    """One row per profiled step: wall time, phases (host), busy and dispatch times
    (module docstring). Device columns are null on the CPU, and on an accelerator whose
    trace holds no device work (the profiler did not see it: CUPTI missing, MPS)."""
    host, work = profile.host, profile.device
    accelerator = device != "cpu" and not work.empty
    operators = host[host["cat"].isin(OPERATOR_CATEGORIES + RUNTIME_CATEGORIES)]
    parents = host["op_parent"].to_numpy()
    top = operators[parents[operators.index] < 0]
    top_intervals = list(zip(top["start"], top["end"]))
    sync = host[host["cat"].isin(RUNTIME_CATEGORIES) & host["name"].isin(SYNC_CALLS)]
    sync_intervals = list(zip(sync["start"], sync["end"]))
    launch_rows = set(work.loc[work["launch"] >= 0, "launch"]) if not work.empty else set()
    launches = host.loc[sorted(launch_rows)] if launch_rows else host.iloc[0:0]
    work_intervals = list(zip(work["start"], work["end"]))
    rows = []
    for index, (low, high) in enumerate(profile.steps.intervals):
        wall = high - low
        row: dict[str, Any] = {"step": index, "step_time_s": wall * US}
        for phase in PHASES:
            ranges = profile.steps.phases[index].get(phase, [])
            row[f"{phase}_s"] = sum(end - start for start, end in ranges) * US
        row["input_time_s"] = sum(row[f"{phase}_s"] for phase in INPUT_PHASES)
        operator_us = union_length(top_intervals, low, high)
        row["host_operator_time_s"] = operator_us * US
        row["host_operator_share"] = busy_share(operator_us, wall)
        if accelerator:
            in_ops = intersect_intervals(top_intervals, sync_intervals)
            sync_us = union_length(in_ops, low, high)
            mine = launches[(launches["start"] >= low) & (launches["start"] < high)]
            busy_us = union_length(work_intervals, low, high)
            row["host_dispatch_time_s"] = (operator_us - sync_us) * US
            row["launch_time_s"] = float((mine["end"] - mine["start"]).sum()) * US
            row["sync_wait_time_s"] = union_length(sync_intervals, low, high) * US
            row["device_busy_time_s"] = busy_us * US
            row["device_busy_share"] = busy_share(busy_us, wall)
            row["device_events"] = int(((work["start"] >= low) & (work["start"] < high)).sum())
            row["busy_kind"], row["busy_share"] = BUSY_DEVICE, row["device_busy_share"]
        else:
            for column in (
                "host_dispatch_time_s",
                "launch_time_s",
                "sync_wait_time_s",
                "device_busy_time_s",
                "device_busy_share",
            ):
                row[column] = math.nan
            row["device_events"] = 0
            row["busy_kind"], row["busy_share"] = BUSY_HOST, row["host_operator_share"]
        rows.append(row)
    return pd.DataFrame(rows, columns=list(STEP_COLUMNS))


def steps_summary(steps: pd.DataFrame, timed_step_time_s: float | None = None) -> dict:
    """The profiled steps in a few numbers: the median step, means per step, the busy share
    over the whole window (busy time over wall time, summed over the steps) and its verdict.

    With the timed runs' step time, the device busy time per step is also put over that
    step (`busy_share_of_timed_step`), which the verdict then uses: kernels run as long
    under the profiler, while the host's side of a profiled step is slowed by recording it.
    """
    if steps.empty:
        return {}
    wall = float(steps["step_time_s"].sum())
    n = len(steps)

    def mean(column: str) -> float | None:
        values = pd.to_numeric(steps[column], errors="coerce")
        return None if values.isna().all() else float(values.mean())

    busy_kind = str(steps["busy_kind"].iloc[0])
    busy_column = "device_busy_time_s" if busy_kind == BUSY_DEVICE else "host_operator_time_s"
    busy_per_step = mean(busy_column)
    share = busy_share(float(steps[busy_column].sum()), wall)
    timed_share = None
    if timed_step_time_s and busy_per_step is not None:
        timed_share = min(1.0, busy_per_step / float(timed_step_time_s))
    profiled_median = float(steps["step_time_s"].median())
    # On a GPU the kernels run as long under the profiler as in the timed runs, so their time
    # over the timed step is the truer share. On a CPU the operators themselves are what the
    # profiler slows (it records each one), so the profiled steps' own share is read.
    verdict_share = timed_share if timed_share is not None and busy_kind == BUSY_DEVICE else share
    return {
        "steps": n,
        "step_time_s": profiled_median,
        "step_time_s_mean": wall / n,
        "timed_step_time_s": timed_step_time_s,
        "profiled_over_timed": (
            profiled_median / float(timed_step_time_s) if timed_step_time_s else None
        ),
        "busy_kind": busy_kind,
        "busy_time_s": busy_per_step,
        "busy_share": share,
        "busy_share_of_timed_step": timed_share,
        "bound": bound(verdict_share, busy_kind),
        "bound_share": verdict_share,
        "host_operator_time_s": mean("host_operator_time_s"),
        "host_operator_share": busy_share(float(steps["host_operator_time_s"].sum()), wall),
        "host_dispatch_time_s": mean("host_dispatch_time_s"),
        "launch_time_s": mean("launch_time_s"),
        "sync_wait_time_s": mean("sync_wait_time_s"),
        "device_busy_time_s": mean("device_busy_time_s"),
        "device_busy_share": (
            busy_share(float(steps["device_busy_time_s"].sum()), wall)
            if busy_kind == BUSY_DEVICE
            else None
        ),
        **{f"{phase}_s": mean(f"{phase}_s") for phase in PHASES},
        "input_time_s": mean("input_time_s"),
        "input_share": busy_share(float(steps["input_time_s"].sum()), wall),
    }


# --------------------------------------------------------------------------------------
# All of it.
# --------------------------------------------------------------------------------------
@dataclass
class Analysis:
    """Everything a trace says: the tables and the summary numbers."""

    operators: pd.DataFrame
    layers: pd.DataFrame
    steps: pd.DataFrame
    summary: dict
    memory: dict | None


def analyse(
    trace_document: Mapping,
    device: str,
    *,
    inventory: Mapping | None = None,
    depth: int | None = None,
    module_types: Mapping[str, str] | None = None,
    timed_step_time_s: float | None = None,
) -> Analysis:
    """The operators, layers and steps tables, the steps' summary and (with the job's
    inventory) the memory breakdown and its headroom (`nnperf.torchprof.memory`), from one trace
    document."""
    profile = place(parse_trace(trace_document))
    steps = steps_table(profile, device)
    memory = None
    if inventory is not None:
        memory = step_memory.memory_breakdown(
            profile.trace.memory, profile.steps.intervals, profile.steps.phases, inventory
        )
        memory.update(step_memory.headroom(memory))
    return Analysis(
        operators=operators_table(profile),
        layers=layers_table(profile, depth, module_types),
        steps=steps,
        summary=steps_summary(steps, timed_step_time_s),
        memory=memory,
    )


def empty_tables() -> dict[str, pd.DataFrame]:
    """The four tables with their exact columns and no rows (a profile that did not run)."""
    return {
        "operators": pd.DataFrame(columns=list(OPERATOR_COLUMNS)),
        "layers": pd.DataFrame(columns=list(LAYER_COLUMNS)),
        "steps": pd.DataFrame(columns=list(STEP_COLUMNS)),
        "memory": pd.DataFrame(columns=list(step_memory.MEMORY_COLUMNS)),
    }


def top(table: pd.DataFrame, n: int, column: str | None = None) -> pd.DataFrame:
    """The first `n` rows by `column` (the table's own order when None), without the
    `OUTSIDE_OPERATORS_ROW` (not an operator)."""
    ranked = table
    name = "operator" if "operator" in table.columns else "layer"
    ranked = ranked[ranked[name] != OUTSIDE_OPERATORS_ROW]
    if column is not None:
        ranked = ranked.sort_values(column, ascending=False, kind="stable")
    return ranked.head(n).reset_index(drop=True)


def time_column(table: pd.DataFrame) -> str:
    """The column a table is ranked by: device time where the device was seen, else host."""
    device = "device_self_time_s" if "device_self_time_s" in table.columns else "device_time_s"
    host = "host_self_time_s" if "host_self_time_s" in table.columns else "host_time_s"
    values = pd.to_numeric(table.get(device), errors="coerce") if device in table else None
    if values is not None and values.notna().any() and float(values.sum()) > 0:
        return device
    return host


__all__: Sequence[str] = (
    "Analysis",
    "analyse",
    "bound",
    "busy_share",
    "empty_tables",
    "intersect_intervals",
    "merge_intervals",
    "steps_summary",
    "steps_table",
    "time_column",
    "top",
    "union_length",
)
