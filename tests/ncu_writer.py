"""Writes text in the shape of `ncu --import X.ncu-rep --csv --page raw` (test helper).

Shape, as documented by the Nsight Compute CLI manual and seen in public exports: every field
double-quoted, a header row starting with "ID", a units row (empty under the metadata columns),
one row per kernel, metric columns in alphabetical order after the metadata, numbers with ","
thousands separators, "n/a" for missing values. Used to build the hand-made fixtures and the
round-trip property tests; it is NOT a substitute for real exports.
"""

from __future__ import annotations

import csv
import io
import math

# The configuration the H100 fixture export was profiled for.
H100_CONFIG = {
    "device": "cuda",
    "model": "resnet18",
    "precision": "bf16",
    "batch_size": 256,
    "variant": "baseline",
}

PUSH_POP = "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
START_END = "Id:Domain:Start/Stop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
META_HEADER = [
    "ID",
    "Process ID",
    "Process Name",
    "Host Name",
    PUSH_POP,
    START_END,
    "Kernel Name",
    "Context",
    "Stream",
    "Block Size",
    "Grid Size",
    "Device",
    "CC",
]


def format_value(value) -> str:
    """ncu style: thousands separators, two decimals unless integral, n/a for missing."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, str):
        return value
    if float(value).is_integer() and abs(value) < 1e18:
        return f"{int(value):,}"
    return f"{value:,.2f}" if abs(value) >= 0.01 else f"{value:.6g}"


def start_end_cell(ranges: list[tuple[int, str]]) -> str:
    """The Start/Stop NVTX cell: one quoted `id:domain:name:none...` entry per open range."""
    return " ".join(
        f'"{range_id}:<default domain>:{name}:none:none:none:none:none:none"'
        for range_id, name in ranges
    )


def export_text(kernels: list[dict], units: dict[str, str], preamble=(), epilogue=()) -> str:
    """`kernels`: dicts with "meta" (header name -> text) and "metrics" (name -> number in the
    column's unit, or None for n/a). `units`: metric name -> unit text of the units row."""
    metric_names = sorted(units)
    buffer = io.StringIO()
    for line in preamble:
        buffer.write(line + "\n")
    writer = csv.writer(buffer, quoting=csv.QUOTE_ALL, lineterminator="\n")
    writer.writerow(META_HEADER + metric_names)
    writer.writerow([""] * len(META_HEADER) + [units[m] for m in metric_names])
    for kernel in kernels:
        meta = [kernel["meta"].get(name, "") for name in META_HEADER]
        writer.writerow(meta + [format_value(kernel["metrics"].get(m)) for m in metric_names])
    for line in epilogue:
        buffer.write(line + "\n")
    return buffer.getvalue()
