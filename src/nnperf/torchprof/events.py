"""A torch.profiler trace read into tables, and every event placed in its step, phase and layer.

The input is the Chrome-trace JSON that `torch.profiler.profile.export_chrome_trace` writes
(gzipped or not) with the ranges `nnperf.torchprof.profile` opens: one per profiled step
(`nnperf_step#<i>`), one per phase inside it (`nnperf_phase:<phase>`, the phases of
`nnperf.core.vocab.PHASES`) and one per module forward call (`nnperf_module:<path>`); the
prefixes below are that contract. `load_trace` reads the file, `parse_trace` turns its events
into tables (`Trace`) and `place` puts each event in its step, phase and layer (`Profile`),
which is what the tables of `nnperf.torchprof.breakdown` and `nnperf.torchprof.analysis` group.
It works from the file, not from a live profiler, so every number can be recomputed from the
trace a user keeps, and the tests need no profiler. It imports no torch.

Definitions
-----------
* **Step interval**: from the start of a step's range to the start of the next one; the last
  step's ends with its range, inside which the job waits for the device to finish. So the
  intervals tile the profiled window and device work that lags behind the host lands in the
  window, not outside it.
* **Host events**: complete events on host threads (`cpu_op`: aten operators and autograd
  nodes; `cuda_runtime`/`cuda_driver`: runtime calls; `user_annotation`: ranges;
  `python_function` with stacks). An event's **self time** is its duration minus that of the
  host events directly inside it on its thread.
* **Layers**: a forward-phase event belongs to the innermost module range around it
  (`ROOT_MODULE` for the model's own `forward`, `LOSS_MODULE` for the criterion). A backward
  event belongs to the layer of the forward operator that created its autograd node: an
  autograd `evaluate_function` event carries the `Sequence number` of that forward operator,
  and everything inside it inherits the layer. This needs no backward hooks (which would add
  autograd nodes to the step and break on in-place ReLUs). Gradient accumulation into
  `.grad`, data loading and copying, the optimizer and anything else have their own rows.
  A device event belongs where the operator that launched it does (`_launcher`).
"""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

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

US = 1e-6  # trace timestamps and durations are microseconds


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


__all__: Sequence[str] = (
    "Profile",
    "Steps",
    "Trace",
    "find_steps",
    "load_trace",
    "parse_trace",
    "place",
)
