"""Where a profiled step's time goes: one table per operator name and one per layer.

Both tables group the events `nnperf.torchprof.events.place` put in their step, phase and
layer; times are per profiled step (summed over the steps, divided by their number).

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
* **Layers table**: host and device time per layer (the layer of each event is defined in
  `nnperf.torchprof.events`), forward and backward apart, module paths optionally cut to a
  depth (`layer_name`).

Not here: the steps table, busy shares and `analyse`, which assembles everything
(`nnperf.torchprof.analysis`). It imports no torch.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import pandas as pd

from nnperf.torchprof.events import (
    MODULE_RANGE_PREFIX,
    NNPERF_RANGE_PREFIX,
    OPERATOR_CATEGORIES,
    PHASE_RANGE_PREFIX,
    PYTHON_CATEGORIES,
    RANGE_CATEGORIES,
    RUNTIME_CATEGORIES,
    US,
    Profile,
)

# The operators table's row for host time inside the step that no torch event covers.
OUTSIDE_OPERATORS_ROW = "(outside operators)"

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


__all__: Sequence[str] = (
    "layer_name",
    "layers_table",
    "operators_table",
)
