"""What a torch.profiler trace says about training steps: operators, layers, busy time, memory.

The input is the Chrome-trace JSON that `torch.profiler.profile.export_chrome_trace` writes
(gzipped or not) with the ranges `nnperf.torchprof.profile` opens: one per profiled step
(`nnperf_step#<i>`), one per phase inside it (`nnperf_phase:<phase>`, the phases of
`nnperf.core.vocab.PHASES`) and one per module forward call (`nnperf_module:<path>`). The output is
tidy tables and plain numbers. It works from the file, not from a live profiler, so every
number can be recomputed from the trace a user keeps, and the tests need no profiler.

What it is not: it does not run the profiler (`nnperf.torchprof.profile`), write sentences
(`nnperf.report.operator_findings`) or draw (`nnperf.report.plots.operators`). It imports no torch.

Definitions (times are per profiled step: summed over the steps, divided by their number)
---------------------------------------------------------------------------------------
* **Step interval**: from the start of a step's range to the start of the next one; the last
  step's ends with its range, inside which the job waits for the device to finish. So the
  intervals tile the profiled window and device work that lags behind the host lands in the
  window, not outside it.
* **Host events**: complete events on host threads (`cpu_op`: aten operators and autograd
  nodes; `cuda_runtime`/`cuda_driver`: runtime calls; `user_annotation`: ranges;
  `python_function` with stacks). An event's **self time** is its duration minus that of the
  host events directly inside it on its thread.
* **Operators table**: one row per name of a `cpu_op`, runtime call or torch range
  (`Optimizer.step#SGD.step`, `enumerate(DataLoader)#...`, whose self time is the Python
  around their operators), plus `OUTSIDE_OPERATORS_ROW`: the self time of nnperf's own
  ranges and of Python frames, i.e. host time inside the step that no torch event covers
  (the interpreter, module hooks, autograd's engine between nodes). Where autograd's engine
  runs on another thread (a GPU), the backward phase range's own time is left out: its
  thread only waits. On the CPU the rows' host self times add up to the steps' wall time
  (one thread runs the step); on a GPU host threads overlap and wait, so they need not.
* **Device time** of an operator: the kernels, copies and memsets whose launch call (the
  runtime event with the same `correlation` id) it made itself, not through a child
  operator (self device time); `device_total_time_s` includes its children's.
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
* **Layers**: a forward-phase event belongs to the innermost module range around it
  (`ROOT_MODULE` for the model's own `forward`, `LOSS_MODULE` for the criterion). A backward
  event belongs to the layer of the forward operator that created its autograd node: an
  autograd `evaluate_function` event carries the `Sequence number` of that forward operator,
  and everything inside it inherits the layer. This needs no backward hooks (which would add
  autograd nodes to the step and break on in-place ReLUs). Gradient accumulation into
  `.grad`, data loading and copying, the optimizer and anything else have their own rows.

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

import gzip
import json
import math
import os
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from nnperf.core.vocab import PHASES
from nnperf.torchprof import memory as step_memory

# Ranges the job opens (the contract between `nnperf.torchprof.profile` and this module).
STEP_RANGE_PREFIX = "nnperf_step#"
PHASE_RANGE_PREFIX = "nnperf_phase:"
MODULE_RANGE_PREFIX = "nnperf_module:"
NNPERF_RANGE_PREFIX = "nnperf_"

# Rows of the layers table that are not module paths.
ROOT_MODULE = "(model)"
LOSS_MODULE = "(loss)"
INPUT_ROW = "(input)"
OPTIMIZER_ROW = "(optimizer)"
GRADIENT_ACCUMULATION_ROW = "(gradient accumulation)"
BACKWARD_OTHER_ROW = "(backward, unattributed)"
FORWARD_OTHER_ROW = "(forward, outside modules)"
OUTSIDE_PHASES_ROW = "(outside phases)"
OUTSIDE_OPERATORS_ROW = "(outside operators)"

INPUT_PHASES = ("data_wait", "h2d")

# Trace categories: host events, the device's work, and device events that are not work
# (a `cuda_sync` event is the device waiting; annotations are labels).
OPERATOR_CATEGORIES = ("cpu_op",)
RUNTIME_CATEGORIES = ("cuda_runtime", "cuda_driver")
RANGE_CATEGORIES = ("user_annotation",)
PYTHON_CATEGORIES = ("python_function",)
HOST_CATEGORIES = OPERATOR_CATEGORIES + RUNTIME_CATEGORIES + RANGE_CATEGORIES + PYTHON_CATEGORIES
DEVICE_WORK_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
AUTOGRAD_NODE_PREFIX = "autograd::engine::evaluate_function: "
ACCUMULATE_GRAD_SUFFIX = "AccumulateGrad"

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

OPERATOR_KINDS = {
    **{c: "operator" for c in OPERATOR_CATEGORIES},
    **{c: "runtime" for c in RUNTIME_CATEGORIES},
    **{c: "range" for c in RANGE_CATEGORIES},
}

OPERATOR_COLUMNS = (
    "operator",
    "kind",
    "calls_per_step",
    "host_self_time_s",
    "host_total_time_s",
    "device_self_time_s",
    "device_total_time_s",
    "host_self_share",
    "device_self_share",
    "input_shapes",
    "shape_variants",
)
LAYER_COLUMNS = (
    "layer",
    "module_type",
    "forward_calls_per_step",
    "host_time_s",
    "forward_host_time_s",
    "backward_host_time_s",
    "device_time_s",
    "forward_device_time_s",
    "backward_device_time_s",
    "host_share",
    "device_share",
)
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
# `nnperf.report.findings`). In between, both matter.
DEVICE_BOUND_SHARE = 0.9
HOST_BOUND_SHARE = 0.75
DEVICE_BOUND, HOST_BOUND, MIXED = "device-bound", "host-bound", "mixed"
# The same readings on the CPU, where the operators run on the host: a busy step is bound by
# its operators' arithmetic, an idle one by the Python and framework work between them.
OPERATOR_BOUND, OVERHEAD_BOUND = "operator-bound", "overhead-bound"


US = 1e-6  # trace timestamps and durations are microseconds


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


# --------------------------------------------------------------------------------------
# Reading a trace.
# --------------------------------------------------------------------------------------
def load_trace(path: str | os.PathLike) -> dict:
    """A Chrome-trace JSON document (gzipped or not), with one-line errors naming the file."""
    from nnperf.core.errors import NnperfError

    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        raise NnperfError(f"{path}: trace not found") from None
    try:
        text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        document = json.loads(text)
    except (OSError, EOFError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise NnperfError(f"{path}: not a Chrome trace ({type(exc).__name__}: {exc})") from None
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        raise NnperfError(f"{path}: not a Chrome trace (no traceEvents list)")
    return document


@dataclass
class Trace:
    """The events of one trace, as tables with times in microseconds from the trace's start.

    `host`: one row per host event, with what a pass over each thread's nesting finds
    (`self_us`, the enclosing module range, autograd node and torch event); `device`: the
    device's work; `memory`: allocation events.
    """

    host: pd.DataFrame
    device: pd.DataFrame
    memory: pd.DataFrame
    origin_us: float


def _args(event: Mapping) -> Mapping:
    args = event.get("args")
    return args if isinstance(args, Mapping) else {}


def _int_or_none(value) -> int | None:
    """An integer from a trace field or table cell; None for a missing one (None, NaN)."""
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def _shapes(dims) -> str:
    """`16x3x32x32, 64x3x3x3` for the tensor inputs of an operator (scalars left out)."""
    if not isinstance(dims, list):
        return ""
    tensors = [d for d in dims if isinstance(d, list) and d]
    return ", ".join("x".join(str(x) for x in d) for d in tensors)


def parse_trace(document: Mapping) -> Trace:
    """Tables of a trace's host events, device work and allocations (see `Trace`)."""
    events = document.get("traceEvents") or []
    complete = [e for e in events if isinstance(e, Mapping) and e.get("ph") == "X"]
    memory_events = [e for e in events if isinstance(e, Mapping) and e.get("name") == "[memory]"]
    starts = [float(e["ts"]) for e in complete + memory_events if "ts" in e]
    origin = min(starts) if starts else 0.0

    host_rows, device_rows = [], []
    for event in complete:
        category = event.get("cat")
        args = _args(event)
        start = float(event["ts"]) - origin
        end = start + float(event.get("dur", 0.0))
        if category in DEVICE_WORK_CATEGORIES:
            device_rows.append(
                {
                    "name": event.get("name", ""),
                    "cat": category,
                    "device": str(event.get("pid")),
                    "stream": str(event.get("tid")),
                    "start": start,
                    "end": end,
                    "correlation": _int_or_none(args.get("correlation")),
                }
            )
        elif category in HOST_CATEGORIES:
            host_rows.append(
                {
                    "name": str(event.get("name", "")),
                    "cat": category,
                    "thread": f"{event.get('pid')}/{event.get('tid')}",
                    "start": start,
                    "end": end,
                    "correlation": _int_or_none(args.get("correlation")),
                    "seq": _int_or_none(args.get("Sequence number")),
                    "shapes": _shapes(args.get("Input Dims")),
                }
            )
    host = pd.DataFrame(
        host_rows,
        columns=["name", "cat", "thread", "start", "end", "correlation", "seq", "shapes"],
    )
    host = _nest(host)
    device = pd.DataFrame(
        device_rows, columns=["name", "cat", "device", "stream", "start", "end", "correlation"]
    )
    memory = pd.DataFrame(
        [
            {
                "time": float(e["ts"]) - origin,
                "bytes": int(_args(e).get("Bytes", 0)),
                "addr": _int_or_none(_args(e).get("Addr")),
                "total_allocated": _int_or_none(_args(e).get("Total Allocated")),
                "device_type": _int_or_none(_args(e).get("Device Type")),
            }
            for e in memory_events
        ],
        columns=["time", "bytes", "addr", "total_allocated", "device_type"],
    )
    memory["addr"] = memory["addr"].fillna(-1).astype(np.int64)
    memory["device_type"] = memory["device_type"].fillna(-1).astype(np.int64)
    memory = memory.sort_values("time", kind="stable").reset_index(drop=True)
    return Trace(host=host, device=device, memory=memory, origin_us=origin)


def _is_torch_event(name: str, category: str) -> bool:
    """An operator, runtime call or torch's own range (not nnperf's, not a Python frame)."""
    if category in OPERATOR_CATEGORIES or category in RUNTIME_CATEGORIES:
        return True
    return category in RANGE_CATEGORIES and not name.startswith(NNPERF_RANGE_PREFIX)


def _nest(host: pd.DataFrame) -> pd.DataFrame:
    """Add, per host event: `self_us`; `module` (innermost nnperf module range, itself
    included); `node` and `node_seq` (innermost autograd node, itself included); `torch_parent`
    (row of the innermost enclosing operator, runtime call or torch range, or -1) and
    `op_parent` (the same for operators and runtime calls only)."""
    count = len(host)
    self_us = (host["end"] - host["start"]).to_numpy(dtype=float).copy()
    module = np.full(count, None, dtype=object)
    node = np.full(count, None, dtype=object)
    node_seq = np.full(count, None, dtype=object)
    torch_parent = np.full(count, -1, dtype=np.int64)
    op_parent = np.full(count, -1, dtype=np.int64)
    names = host["name"].to_numpy(dtype=object)
    categories = host["cat"].to_numpy(dtype=object)
    starts = host["start"].to_numpy(dtype=float)
    ends = host["end"].to_numpy(dtype=float)
    seqs = host["seq"].to_numpy(dtype=object)
    for _, rows in host.groupby("thread", sort=False).groups.items():
        # Parents before children: by start, then the longer first.
        order = sorted(rows, key=lambda r: (starts[r], -ends[r]))
        stack: list[int] = []
        for row in order:
            while stack and ends[stack[-1]] <= starts[row]:
                stack.pop()
            parent = stack[-1] if stack else None
            if parent is not None:
                self_us[parent] -= min(ends[row], ends[parent]) - starts[row]
                module[row] = module[parent]
                node[row], node_seq[row] = node[parent], node_seq[parent]
                torch_parent[row] = (
                    parent
                    if _is_torch_event(names[parent], categories[parent])
                    else torch_parent[parent]
                )
                op_parent[row] = (
                    parent
                    if categories[parent] in OPERATOR_CATEGORIES + RUNTIME_CATEGORIES
                    else op_parent[parent]
                )
            name = names[row]
            if name.startswith(MODULE_RANGE_PREFIX):
                module[row] = name[len(MODULE_RANGE_PREFIX) :]
            elif name.startswith(AUTOGRAD_NODE_PREFIX):
                node[row] = name[len(AUTOGRAD_NODE_PREFIX) :]
                node_seq[row] = _int_or_none(seqs[row])
            stack.append(row)
    # Object columns keep None as None (pandas' string dtype would turn it into NaN).
    return host.assign(
        self_us=np.maximum(self_us, 0.0),
        module=pd.Series(module, index=host.index, dtype=object),
        node=pd.Series(node, index=host.index, dtype=object),
        node_seq=pd.Series(node_seq, index=host.index, dtype=object),
        torch_parent=torch_parent,
        op_parent=op_parent,
    )


# --------------------------------------------------------------------------------------
# Steps and phases.
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Steps:
    """The profiled steps' intervals (µs) and their phases' ranges."""

    intervals: list[tuple[float, float]]
    phases: list[dict[str, list[tuple[float, float]]]]

    @property
    def window(self) -> tuple[float, float]:
        return (self.intervals[0][0], self.intervals[-1][1])


def find_steps(trace: Trace) -> Steps:
    """The step intervals (module docstring) and each step's phase ranges, from the job's
    ranges; ValueError when the trace has none."""
    host = trace.host
    marks = host[host["name"].str.startswith(STEP_RANGE_PREFIX)].copy()
    if marks.empty:
        raise ValueError(f"the trace has no {STEP_RANGE_PREFIX}<i> ranges: not a profiled step")
    marks["index"] = marks["name"].str[len(STEP_RANGE_PREFIX) :].astype(int)
    marks = marks.sort_values("start")
    starts = marks["start"].to_list()
    intervals = [
        (start, starts[i + 1] if i + 1 < len(starts) else float(marks["end"].iloc[-1]))
        for i, start in enumerate(starts)
    ]
    phase_ranges = host[host["name"].str.startswith(PHASE_RANGE_PREFIX)]
    phases = []
    for low, high in intervals:
        inside = phase_ranges[(phase_ranges["start"] >= low) & (phase_ranges["start"] < high)]
        by_phase: dict[str, list[tuple[float, float]]] = {}
        for row in inside.itertuples(index=False):
            phase = row.name[len(PHASE_RANGE_PREFIX) :]
            by_phase.setdefault(phase, []).append((row.start, row.end))
        phases.append(by_phase)
    return Steps(intervals=intervals, phases=phases)


def _locate(times: np.ndarray, steps: Steps) -> tuple[np.ndarray, np.ndarray]:
    """(step index or -1, phase name or None) of each time."""
    step_of = np.full(len(times), -1, dtype=np.int64)
    phase_of = np.full(len(times), None, dtype=object)
    for index, (low, high) in enumerate(steps.intervals):
        inside = (times >= low) & (times < high)
        step_of[inside] = index
        for phase, ranges in steps.phases[index].items():
            for start, end in ranges:
                phase_of[inside & (times >= start) & (times < end)] = phase
    return step_of, phase_of


def _layer(phase, module, node, node_seq, forward_layers: Mapping[int, str]) -> str:
    """The layers-table row of one host event (module docstring)."""
    if phase in INPUT_PHASES:
        return INPUT_ROW
    if phase == "optimizer":
        return OPTIMIZER_ROW
    if phase == "forward":
        return module or FORWARD_OTHER_ROW
    if phase == "backward":
        if node is not None and node.endswith(ACCUMULATE_GRAD_SUFFIX):
            return GRADIENT_ACCUMULATION_ROW
        if node_seq is not None and node_seq in forward_layers:
            return forward_layers[node_seq]
        return BACKWARD_OTHER_ROW
    return OUTSIDE_PHASES_ROW


@dataclass
class Profile:
    """A trace's events placed in the profiled steps: `host` and `device` gain `step`,
    `phase`, `layer` (and device rows the host row of their launch call, `launch`)."""

    trace: Trace
    steps: Steps
    host: pd.DataFrame
    device: pd.DataFrame

    @property
    def n_steps(self) -> int:
        return len(self.steps.intervals)

    @property
    def step_times_us(self) -> np.ndarray:
        return np.array([high - low for low, high in self.steps.intervals])


def _launcher(host: pd.DataFrame, launch: int) -> int:
    """The host row a device event is charged to: the innermost operator or torch range
    around its launch call (a runtime call nested in another, as a driver call inside a
    runtime call, passes it on), or the call itself when it was made outside any; -1 for
    an event whose launch is not in the trace."""
    if launch < 0:
        return -1
    row = launch
    parent = int(host.at[row, "torch_parent"])
    while parent >= 0 and host.at[parent, "cat"] in RUNTIME_CATEGORIES:
        parent = int(host.at[parent, "torch_parent"])
    return parent if parent >= 0 else row


def place(trace: Trace) -> Profile:
    """Put every event of `trace` in its step, phase and layer (module docstring)."""
    steps = find_steps(trace)
    host = trace.host.copy()
    step_of, phase_of = _locate(host["start"].to_numpy(dtype=float), steps)
    host["step"] = step_of
    # A step's own range starts where its first phase does, but is in no phase.
    phase_of[host["name"].str.startswith(STEP_RANGE_PREFIX).to_numpy()] = None
    host["phase"] = pd.Series(phase_of, index=host.index, dtype=object)
    forward = host[
        (host["phase"] == "forward") & host["seq"].notna() & (host["cat"] == "cpu_op")
    ].sort_values("start")
    forward_layers: dict[int, str] = {}
    for row in forward.itertuples(index=False):
        forward_layers.setdefault(int(row.seq), row.module or FORWARD_OTHER_ROW)
    host["layer"] = [
        _layer(phase, module, node, seq, forward_layers)
        for phase, module, node, seq in zip(
            host["phase"], host["module"], host["node"], host["node_seq"]
        )
    ]
    device = trace.device.copy()
    launches = host[host["cat"].isin(RUNTIME_CATEGORIES) & host["correlation"].notna()]
    launch_row = {int(c): i for i, c in zip(launches.index, launches["correlation"])}
    device["launch"] = np.array(
        [launch_row.get(_int_or_none(c), -1) for c in device["correlation"]], dtype=np.int64
    )
    device["owner"] = [_launcher(host, row) for row in device["launch"]]
    owner = device["owner"]
    for column in ("phase", "layer"):
        device[column] = [host.at[o, column] if o >= 0 else None for o in owner]
    device["step"] = np.array([host.at[o, "step"] if o >= 0 else -1 for o in owner], dtype=int)
    return Profile(trace=trace, steps=steps, host=host, device=device)


# --------------------------------------------------------------------------------------
# Tables.
# --------------------------------------------------------------------------------------
def _in_steps(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["step"] >= 0]


def _is_torch_time(host: pd.DataFrame) -> pd.Series:
    """Host events that are operators, runtime calls or torch's own ranges."""
    calls = host["cat"].isin(OPERATOR_CATEGORIES + RUNTIME_CATEGORIES)
    ranges = host["cat"].isin(RANGE_CATEGORIES) & ~host["name"].str.startswith(NNPERF_RANGE_PREFIX)
    return calls | ranges


def _is_outside_operators(host: pd.DataFrame) -> pd.Series:
    """Host events whose self time is outside any operator: nnperf's ranges and Python
    frames. A backward phase range counts only where autograd's engine ran on its thread
    (the CPU: its own time is the engine's bookkeeping); where the engine ran elsewhere (a
    GPU's device thread) the range's thread only waited."""
    nnperf = host["name"].str.startswith(NNPERF_RANGE_PREFIX) & host["cat"].isin(RANGE_CATEGORIES)
    engine_threads = set(host.loc[host["node"].notna(), "thread"])
    waiting = (host["name"] == f"{PHASE_RANGE_PREFIX}backward") & ~host["thread"].isin(
        engine_threads
    )
    return (nnperf & ~waiting) | host["cat"].isin(PYTHON_CATEGORIES)


def operators_table(profile: Profile) -> pd.DataFrame:
    """One row per operator name (module docstring), sorted by device self time when the
    trace has device work, else by host self time; times per step."""
    host = _in_steps(profile.host)
    steps = profile.n_steps
    step_us = float(profile.step_times_us.mean())
    torch_events = host[_is_torch_time(host)]
    device = _in_steps(profile.device)
    has_device = not device.empty
    duration = device["end"] - device["start"]
    self_device = duration.groupby(device["owner"]).sum()
    # Inclusive device time: every torch ancestor of a kernel's owner gets it too.
    total_device: dict[int, float] = {}
    parents = profile.host["torch_parent"].to_numpy()
    for owner, seconds in self_device.items():
        row = int(owner)
        while row >= 0:
            total_device[row] = total_device.get(row, 0.0) + float(seconds)
            row = int(parents[row])
    frame = torch_events.assign(
        host_total=torch_events["end"] - torch_events["start"],
        device_self=torch_events.index.map(lambda i: float(self_device.get(i, 0.0))),
        device_total=torch_events.index.map(lambda i: total_device.get(i, 0.0)),
        kind=torch_events["cat"].map(OPERATOR_KINDS),
    )
    rows = []
    for (name, kind), group in frame.groupby(["name", "kind"], sort=False):
        by_shape = group.groupby("shapes")[["self_us", "device_self"]].sum()
        key = "device_self" if has_device and by_shape["device_self"].sum() > 0 else "self_us"
        rows.append(
            {
                "operator": name,
                "kind": kind,
                "calls_per_step": len(group) / steps,
                "host_self_time_s": group["self_us"].sum() * US / steps,
                "host_total_time_s": group["host_total"].sum() * US / steps,
                "device_self_time_s": group["device_self"].sum() * US / steps,
                "device_total_time_s": group["device_total"].sum() * US / steps,
                "input_shapes": by_shape[key].idxmax() if len(by_shape) else "",
                "shape_variants": int((by_shape.index != "").sum()),
            }
        )
    python = host[_is_outside_operators(host)]
    rows.append(
        {
            "operator": OUTSIDE_OPERATORS_ROW,
            "kind": "outside",
            "calls_per_step": math.nan,
            "host_self_time_s": python["self_us"].sum() * US / steps,
            "host_total_time_s": math.nan,
            "device_self_time_s": 0.0,
            "device_total_time_s": 0.0,
            "input_shapes": "",
            "shape_variants": 0,
        }
    )
    table = pd.DataFrame(rows)
    if not has_device:
        for column in ("device_self_time_s", "device_total_time_s"):
            table[column] = math.nan
    table["host_self_share"] = table["host_self_time_s"] / (step_us * US)
    table["device_self_share"] = table["device_self_time_s"] / (step_us * US)
    order = "device_self_time_s" if has_device else "host_self_time_s"
    table = table.sort_values([order, "host_self_time_s"], ascending=False, kind="stable")
    return table[list(OPERATOR_COLUMNS)].reset_index(drop=True)


def layer_name(layer: str, depth: int | None) -> str:
    """A module path cut to its first `depth` components (special rows unchanged)."""
    if depth is None or layer.startswith("("):
        return layer
    return ".".join(layer.split(".")[:depth])


def layers_table(
    profile: Profile,
    depth: int | None = None,
    module_types: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """Host and device time per layer (module docstring), forward and backward apart; times
    per step; sorted by total device time when there is one, else host time."""
    host = _in_steps(profile.host)
    steps = profile.n_steps
    step_s = float(profile.step_times_us.mean()) * US
    counted = host[_is_torch_time(host) | _is_outside_operators(host)]
    counted = counted.assign(layer=counted["layer"].map(lambda x: layer_name(x, depth)))
    device = _in_steps(profile.device)
    device = device.assign(
        layer=device["layer"].map(lambda x: layer_name(str(x), depth)),
        seconds=(device["end"] - device["start"]) * US,
    )
    has_device = not device.empty
    calls = host[host["name"].str.startswith(MODULE_RANGE_PREFIX) & (host["phase"] == "forward")]
    call_counts = (
        calls["name"].str[len(MODULE_RANGE_PREFIX) :].map(lambda x: layer_name(x, depth))
    ).value_counts()
    # A module cut to a shallower depth counts the calls of its own range only.
    names = list(dict.fromkeys([*counted["layer"], *device["layer"]]))
    rows = []
    for name in names:
        mine = counted[counted["layer"] == name]
        kernels = device[device["layer"] == name]
        row = {
            "layer": name,
            "module_type": (module_types or {}).get(name, ""),
            "forward_calls_per_step": call_counts.get(name, 0) / steps,
            "host_time_s": mine["self_us"].sum() * US / steps,
            "forward_host_time_s": mine.loc[mine["phase"] == "forward", "self_us"].sum()
            * US
            / steps,
            "backward_host_time_s": mine.loc[mine["phase"] == "backward", "self_us"].sum()
            * US
            / steps,
            "device_time_s": kernels["seconds"].sum() / steps,
            "forward_device_time_s": kernels.loc[kernels["phase"] == "forward", "seconds"].sum()
            / steps,
            "backward_device_time_s": kernels.loc[kernels["phase"] == "backward", "seconds"].sum()
            / steps,
        }
        rows.append(row)
    table = pd.DataFrame(rows, columns=[c for c in LAYER_COLUMNS if not c.endswith("share")])
    if not has_device:
        for column in ("device_time_s", "forward_device_time_s", "backward_device_time_s"):
            table[column] = math.nan
    table["host_share"] = table["host_time_s"] / step_s
    table["device_share"] = table["device_time_s"] / step_s
    order = "device_time_s" if has_device else "host_time_s"
    table = table.sort_values([order, "host_time_s"], ascending=False, kind="stable")
    return table[list(LAYER_COLUMNS)].reset_index(drop=True)


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
    "Profile",
    "Trace",
    "analyse",
    "bound",
    "busy_share",
    "empty_tables",
    "find_steps",
    "intersect_intervals",
    "layer_name",
    "layers_table",
    "load_trace",
    "merge_intervals",
    "operators_table",
    "parse_trace",
    "place",
    "steps_summary",
    "steps_table",
    "time_column",
    "top",
    "union_length",
)
