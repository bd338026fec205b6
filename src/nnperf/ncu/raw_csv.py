"""Reading an Nsight Compute export: the raw-page CSV into one row per kernel, in SI units.

`parse_raw_csv` turns the output of `ncu --import X.ncu-rep --csv --page raw` into one row per
kernel with every metric in SI base units (`parse_unit`, `parse_number`), and fails with one
`NnperfError` line naming file and line on anything malformed; `read_raw_csv` does the same
for a file, plain or gzipped. `check_values` refuses a missing or negative counter rather
than summing it as zero, and `remake_hint` says which commands write an export nnperf reads.

It does not know which metrics to collect or what they mean (`nnperf.ncu.metrics`), nor
classify kernels (`nnperf.ncu.kernels`). Nothing here needs a GPU or `ncu`.

Source (read for the format; nothing copied): the Nsight Compute CLI manual
(docs.nvidia.com/nsight-compute/NsightComputeCli), options `--import`, `--csv`, `--page raw`,
`--print-units`, and section "Metrics and Units".
"""

from __future__ import annotations

import csv
import gzip
import math
import re
from pathlib import Path
from typing import Iterable, Sequence

import pandas as pd

from nnperf.core.errors import NnperfError
from nnperf.ncu.metrics import TIME_METRIC
from nnperf.ncu.ranges import CALIBRATION_RANGE, STEP_RANGE

# --------------------------------------------------------------------------------------------
# Units. The raw page has a units row under the header; with `--print-units auto` (default)
# ncu scales values to a prefixed unit per column (Kbyte, Mbyte, usecond, msecond, Ghz,
# cycle/nsecond, ...), with `--print-units base` it prints base units. Byte prefixes are
# decimal (Nsight shows 65,536 bytes as 65.54 Kbyte). Newer releases abbreviate (ns, us, ms,
# KB, MB); both spellings are accepted.
# --------------------------------------------------------------------------------------------
_PREFIX = {"": 1.0, "K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_SMALL_PREFIX = {"m": 1e-3, "u": 1e-6, "n": 1e-9, "p": 1e-12}
# base word -> (SI name, kind). Time bases accept the small prefixes too.
_BASES = {
    "byte": ("byte", "count"),
    "B": ("byte", "count"),
    "second": ("second", "time"),
    "s": ("second", "time"),
    "hz": ("1/second", "count"),
    "Hz": ("1/second", "count"),
    "cycle": ("cycle", "count"),
    "inst": ("inst", "count"),
    "warp": ("warp", "count"),
    "thread": ("thread", "count"),
    "block": ("block", "count"),
    "sector": ("sector", "count"),
    "request": ("request", "count"),
    "register": ("register", "count"),
}


def _parse_unit_word(word: str) -> tuple[float, str, str] | None:
    if word in ("", "1"):
        return 1.0, "", "count"
    for base, (si_name, kind) in _BASES.items():
        if not word.endswith(base):
            continue
        prefix = word[: -len(base)]
        if prefix in _PREFIX:
            return _PREFIX[prefix], si_name, kind
        if kind == "time" and prefix in _SMALL_PREFIX:
            return _SMALL_PREFIX[prefix], si_name, kind
    return None


def parse_unit(unit: str) -> tuple[float, str]:
    """`(factor, si_unit)` such that value_in_si = value * factor.

    Accepts `%`, counts (`""`, `inst`, `Kinst`, `cycle`, `Mcycle`, ...), bytes (`byte`,
    `Kbyte`, `Mbyte`, `Gbyte`, `KB`, ...), times (`nsecond`, `usecond`, `msecond`, `second`,
    `ns`, `us`, `ms`, `s`), frequencies (`hz`, `Mhz`, `Ghz`) and ratios of these
    (`cycle/nsecond`, `Gbyte/second`, `byte/cycle`, `inst/cycle`).
    Raises ValueError for anything else (the parser turns it into an NnperfError).
    """
    text = unit.strip()
    if text == "%":
        return 1.0, "%"
    parts = text.split("/")
    if len(parts) > 2:
        raise ValueError(f"unit {unit!r} has more than one '/'")
    parsed = [_parse_unit_word(part.strip()) for part in parts]
    if any(p is None for p in parsed):
        raise ValueError(f"unit {unit!r} is not a known Nsight Compute unit")
    if len(parsed) == 1:
        factor, si_name, _ = parsed[0]
        return factor, si_name
    (num_factor, num_name, _), (den_factor, den_name, _) = parsed
    return num_factor / den_factor, f"{num_name or '1'}/{den_name or '1'}"


# Thousands separators: ncu formats numbers with "," between groups of three digits.
_NUMBER = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][+-]?\d+)?")
_MISSING = {"", "n/a", "N/A", "NaN", "nan"}


def parse_number(text: str) -> float:
    """One CSV cell as a float: thousands separators removed, `n/a` and empty as NaN.

    Raises ValueError on anything else (a decimal comma from a non-English locale included:
    "1.234,5" is refused rather than misread)."""
    cell = text.strip()
    if cell in _MISSING:
        return math.nan
    if not _NUMBER.fullmatch(cell) or not any(ch.isdigit() for ch in cell):
        raise ValueError(f"{text!r} is not a number")
    return float(cell.replace(",", ""))


# --------------------------------------------------------------------------------------------
# The raw-page CSV.
# --------------------------------------------------------------------------------------------
# Metadata columns of the raw page and their tidy names. The two NVTX columns appear only when
# the profile ran with --nvtx; their headers spell out the fields of each entry.
_METADATA = {
    "ID": "id",
    "Process ID": "process_id",
    "Process Name": "process_name",
    "Host Name": "host_name",
    "Kernel Name": "kernel_name",
    "Kernel Time": "kernel_time",
    "Context": "context",
    "Stream": "stream",
    "Block Size": "block_size",
    "Grid Size": "grid_size",
    "Device": "device",
    "CC": "cc",
}
NVTX_PUSH_POP_PREFIX = "thread Domain:Push/Pop_Range"
NVTX_START_END_PREFIX = "Id:Domain:Start/Stop_Range"
_METRIC_NAME = re.compile(r"[A-Za-z0-9_]+__[A-Za-z0-9_.]+")
_TOOL_LINE = re.compile(r"^==(PROF|WARNING|ERROR|INFO)==")
# What `ncu` prints when its filters matched no kernel (Nsight Compute 2019.5 to 2025.3).
NO_KERNELS_WARNING = "No kernels were profiled"
# The columns of the *details* page (`ncu --csv` without `--page raw`, the default): one row
# per kernel and metric. nnperf reads only the raw page, where every metric is a column.
DETAILS_PAGE_COLUMNS = ("Metric Name", "Metric Value")


def _tidy_metadata_name(header: str) -> str | None:
    if header in _METADATA:
        return _METADATA[header]
    if header.startswith(NVTX_PUSH_POP_PREFIX):
        return "nvtx_push_pop"
    if header.startswith(NVTX_START_END_PREFIX):
        return "nvtx_start_end"
    return None


def _fail(source: str, line: int, message: str) -> NnperfError:
    return NnperfError(f"{source}:{line}: {message}")


def _split_line(line: str, source: str, number: int) -> list[str]:
    try:
        return next(csv.reader([line], strict=True))
    except csv.Error as exc:
        raise _fail(source, number, f"not valid CSV ({exc})") from None
    except StopIteration:
        return []


def report_of(source: str) -> str:
    """The `.ncu-rep` an export was presumably made from: `x.csv` -> `x.ncu-rep`."""
    stem = re.sub(r"(\.csv)?(\.gz)?( \(export\))?$", "", str(source))
    return stem if stem.endswith(".ncu-rep") else stem + ".ncu-rep"


def remake_hint(source: str) -> str:
    """The exact commands that write a raw-page export nnperf reads, for `source`."""
    report = report_of(source)
    target = re.sub(r"( \(export\))$", "", str(source))
    if not target.endswith(".csv"):
        target = re.sub(r"\.ncu-rep$", "", target) + ".csv"
    return (
        f"make one with `nnperf ncu-command export --report {report} --csv {target}` "
        f"(or `ncu --import {report} --csv --page raw > {target}`)"
    )


def _quoted(messages: Sequence[str]) -> str:
    """ncu's own lines, verbatim, joined into one line."""
    return " | ".join(message.strip() for message in messages)


def parse_raw_csv(
    text: str, source: str = "<ncu csv>", required: Iterable[str] = ()
) -> pd.DataFrame:
    """Parse `ncu --csv --page raw` output into one row per kernel, metrics in SI base units.

    Layout (Nsight Compute raw page): optional preamble (`==PROF==` lines, the profiled
    program's own output), a header row starting with "ID", a units row (empty under the
    metadata columns), then one row per profiled kernel. Every field is quoted; kernel names
    may contain commas; numbers may carry thousands separators; `n/a` marks a metric the
    kernel has no value for.

    Returns columns `source_line`, `id`, the tidy metadata names (`kernel_name`, `cc`,
    `nvtx_start_end`, ...) and one column per metric under its ncu name, converted to SI
    base units (bytes, seconds, counts, .../second; `%` stays percent).
    `frame.attrs["units"]` maps each metric to its SI unit; `frame.attrs["source"]` is
    `source`; `frame.attrs["ncu_messages"]` holds ncu's own `==WARNING==`/`==INFO==` lines,
    verbatim, for the caller to show.

    It refuses, with one NnperfError line naming the file and line, what it cannot read
    exactly instead of guessing: anything malformed; another page of the export (the
    details page); an export without its units row (the values' scale would be unknown);
    a kernel ID twice; and, for a metric in `required`, a missing column, an unknown unit,
    `n/a`, a negative value or a value that is not a number (`check_values`). Other metrics
    that are not numeric (device names, ...) are kept as text. An `==ERROR==` line of ncu is
    an error, quoted verbatim.

    Parsed line by line (not as one CSV stream) because ncu writes one record per line and
    never a newline inside a field; that keeps preamble junk away from the CSV reader and gives
    every error its exact line.
    """
    required = list(required)
    header: list[str] | None = None
    header_line = 0
    units: list[str] | None = None
    units_line = 0
    rows: list[tuple[int, list[str]]] = []
    messages: list[str] = []
    lines = text.split("\n")
    for number, raw_line in enumerate(lines, start=1):
        line = raw_line[:-1] if raw_line.endswith("\r") else raw_line
        stripped = line.strip()
        if not stripped:
            continue
        if _TOOL_LINE.match(stripped):
            if stripped.startswith("==ERROR=="):
                raise _fail(source, number, f"ncu reported an error: {stripped[:300]}")
            if not stripped.startswith("==PROF=="):
                messages.append(stripped)
            continue
        if header is None:
            if not (stripped.startswith('"ID"') or stripped.startswith("ID,")):
                continue  # preamble: the profiled program's output, banners
            cells = [cell.strip() for cell in _split_line(line, source, number)]
            if "Kernel Name" in cells:
                header, header_line = cells, number
                if all(name in cells for name in DETAILS_PAGE_COLUMNS):
                    raise _fail(
                        source,
                        number,
                        "this is the details page of an Nsight Compute export (one row per "
                        "kernel and metric, 'Metric Name'/'Metric Value' columns: `ncu --csv` "
                        "without `--page raw`); nnperf reads the raw page (one row per kernel, "
                        f"one column per metric, a units row): {remake_hint(source)}",
                    )
            continue
        row = _split_line(line, source, number)
        if len(row) != len(header):
            raise _fail(
                source, number, f"row has {len(row)} fields but the header has {len(header)}"
            )
        if units is None and not rows:
            if row[0].strip() != "":
                raise _fail(
                    source,
                    number,
                    f"no units row under the header (this line is kernel {row[0].strip()!r}): "
                    "without it the scale of every value is unknown (ncu prints Mbyte, us, "
                    f"Ghz, ... per column); {remake_hint(source)}",
                )
            units, units_line = [cell.strip() for cell in row], number
            continue
        rows.append((number, row))
    if header is None:
        where = max(len(lines), 1)
        if any(NO_KERNELS_WARNING in message for message in messages):
            raise _fail(
                source,
                where,
                f"ncu profiled no kernels (it said: {_quoted(messages)}): no kernel ran inside "
                f"the NVTX ranges {STEP_RANGE!r} / {CALIBRATION_RANGE!r}; check the profiled "
                "step's log (did it reach the marked step? does its nvtx record say active: true?)",
            )
        said = f"; ncu said: {_quoted(messages)}" if messages else ""
        raise _fail(
            source,
            where,
            f'no header row starting with "ID" and naming "Kernel Name"{said}; '
            f"{remake_hint(source)}",
        )
    if len(set(header)) != len(header):
        duplicates = sorted({name for name in header if header.count(name) > 1})
        raise _fail(source, header_line, f"duplicate columns in header: {', '.join(duplicates)}")
    if units is None:
        # A header and nothing else: no kernel (the units row comes with the first kernel).
        units, units_line = [""] * len(header), header_line

    index = {name: i for i, name in enumerate(header)}
    metric_columns = [name for name in header if _METRIC_NAME.fullmatch(name)]
    missing = [name for name in required if name not in index]
    if missing:
        raise _fail(
            source, header_line, f"required metrics missing from the export: {', '.join(missing)}"
        )

    data: dict[str, list] = {"source_line": [number for number, _ in rows]}
    ids: list[int] = []
    first_line_of: dict[int, int] = {}
    for number, row in rows:
        try:
            value = parse_number(row[index["ID"]])
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value != int(value):
            raise _fail(source, number, f"ID {row[index['ID']].strip()!r} is not an integer")
        if int(value) in first_line_of:
            raise _fail(
                source,
                number,
                f"kernel ID {int(value)} appears twice (first on line {first_line_of[int(value)]})"
                f": an export lists each profiled kernel once; were two exports joined? "
                f"{remake_hint(source)}",
            )
        first_line_of[int(value)] = number
        ids.append(int(value))
    data["id"] = ids
    for name in header:
        tidy = _tidy_metadata_name(name)
        if tidy is not None and tidy != "id":
            data[tidy] = [row[index[name]].strip() for _, row in rows]

    si_units: dict[str, str] = {}
    for name in metric_columns:
        col = index[name]
        cells = [row[col] for _, row in rows]
        try:
            factor, si_unit = parse_unit(units[col])
        except ValueError as exc:
            if name in required:
                raise _fail(source, units_line, f"column {name}: {exc}") from None
            data[name] = [cell.strip() for cell in cells]
            si_units[name] = units[col]
            continue
        values: list[float] | None = []
        for (number, _), cell in zip(rows, cells):
            try:
                values.append(parse_number(cell) * factor)
            except ValueError:
                if name in required:
                    raise _fail(
                        source, number, f"column {name}: {cell.strip()!r} is not a number or n/a"
                    ) from None
                values = None
                break
        data[name] = values if values is not None else [cell.strip() for cell in cells]
        si_units[name] = si_unit if values is not None else units[col]

    frame = pd.DataFrame(data)
    frame.attrs["units"] = si_units
    frame.attrs["source"] = source
    frame.attrs["ncu_messages"] = messages
    check_values(frame, required)
    return frame


# What each kind of metric is needed for, so a refused value says what would have gone wrong.
def _purpose(metric: str) -> str:
    if metric == TIME_METRIC:
        return "every point's time (a step without it would keep its FLOPs and lose its time)"
    if metric.endswith(".peak_sustained"):
        return "the profile's own roofs"
    if metric.endswith(".per_second"):
        return "the clock the roofs are scaled to"
    if "bytes" in metric:
        return "the bytes of the roofline points"
    return "the FLOPs of the roofline points"


def check_values(frame: pd.DataFrame, metrics: Iterable[str]) -> None:
    """Refuse a kernel whose value of one of `metrics` is missing (`n/a`), not a number or
    negative, and a kernel time of zero: NnperfError naming the file, line, kernel and metric.

    A missing counter is not zero: summing it as zero under-counts FLOPs by orders of
    magnitude, and a step whose kernel lost its time keeps its FLOPs and lands far above every
    roof. Counters, times, clocks and peaks are never negative.
    """
    source = frame.attrs.get("source", "<ncu csv>")
    for metric in metrics:
        if metric not in frame.columns:
            raise NnperfError(f"{source}: required metric {metric} is not in the export")
        values = pd.to_numeric(frame[metric], errors="coerce")
        positive = metric == TIME_METRIC
        bad = values.isna() | (values <= 0 if positive else values < 0)
        if not bad.any():
            continue
        position = int(bad.to_numpy().nonzero()[0][0])
        row = frame.iloc[position]
        line = int(row["source_line"]) if "source_line" in frame.columns else position + 1
        name = str(row.get("kernel_name", "?"))
        name = name if len(name) <= 80 else name[:77] + "..."
        cell = frame[metric].iloc[position]
        unit = frame.attrs.get("units", {}).get(metric, "")
        if values.isna().iloc[position]:
            shown = "'n/a'" if not isinstance(cell, str) else repr(cell)
        else:
            shown = f"{cell:g} {unit}".strip()
        what = "must be positive" if positive else "must be a number >= 0"
        raise _fail(
            source,
            line,
            f"kernel {row.get('id', '?')} ({name}): {metric} is {shown}, which {what}; "
            f"nnperf needs it for {_purpose(metric)} and never guesses it. Profile again "
            "with `nnperf ncu-command profile` (it collects every metric of the GPU's set) "
            "and check ncu's warnings in the profile's log",
        )


def read_raw_csv(path: str | Path, required: Iterable[str] = ()) -> pd.DataFrame:
    """`parse_raw_csv` on a file (plain or gzip-compressed); a missing or undecodable file is
    an NnperfError too."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise NnperfError(f"{path}: file not found") from None
    except OSError as exc:
        raise NnperfError(f"{path}: cannot read ({exc.strerror})") from None
    if raw[:2] == b"\x1f\x8b":  # gzip magic: an export kept compressed
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise NnperfError(f"{path}: not a readable gzip file ({exc})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise NnperfError(f"{path}:{line}: not UTF-8 text") from None
    return parse_raw_csv(text, source=str(path), required=required)
