"""Datasheet peaks: what the vendor says a device can do, and a derived peak for CPUs.

Three jobs, all pure functions of text and data:

* `load_peaks(path)` reads `config/peaks.yaml`, checks every entry against the schema below
  and converts the datasheet units (TFLOP/s, GB/s) to SI (FLOP/s, bytes/s).
* `match_device(device, device_name, peaks)` finds the entry whose `match:` patterns fit
  the name the runtime reports (`torch.cuda.get_device_name()`, the CPU model name).
* `derived_cpu_peak(...)` computes cores x clock x FLOP/cycle for a CPU from its
  `/proc/cpuinfo` flags. It is an upper bound from the instruction set, clearly labelled
  as derived: it is not a vendor figure. A precision the flags give no hardware arithmetic
  for (bf16 without AMX, AVX512_BF16, AVX-NE-CONVERT or arm64 BF16) has no derived peak:
  null, with the reason's code in `flop_s_null_reasons`.

Not here: measuring anything (see `nnperf.roofline.ceilings`), parsing `/proc/cpuinfo`
(`nnperf.core.cpuinfo`) or reading files other than the YAML (the caller passes what it read
in, so this module is testable anywhere).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Mapping

import yaml

from nnperf.core.errors import NnperfError
from nnperf.core.vocab import DEVICES, PRECISIONS, SUPPORTED_PRECISIONS

TERA = 1e12
GIGA = 1e9
ENTRY_KEYS_REQUIRED = ("name", "device", "match", "dense_tflop_s", "memory_gb_s", "source")

# FLOPs per fused multiply-add: one multiply and one add.
FLOP_PER_FMA = 2
# Most current server and desktop cores issue two vector FMAs per cycle (Intel Skylake-SP
# Gold/Platinum and later, AMD Zen 2-5). Some parts have one (Xeon Bronze/Silver, many
# Atom cores); `fma_units` lets a user say so.
DEFAULT_FMA_UNITS = 2
# Intel AMX: one TMUL per core performs 1024 BF16 FLOP per cycle (Intel Architecture
# Instruction Set Extensions Programming Reference, AMX chapter; "Accelerate AI Workloads
# with Intel AMX" whitepaper: 2048 INT8 ops / 1024 BF16 ops per cycle per core).
AMX_BF16_FLOP_PER_CYCLE = 1024
# AVX512_BF16 VDPBF16PS does two BF16 products per FP32 lane per instruction, so the
# BF16 rate is twice the FP32 FMA rate (Intel SDM, VDPBF16PS).
AVX512_BF16_SPEEDUP = 2
# arm64 FEAT_BF16 (`bf16` in /proc/cpuinfo Features): BFDOT accumulates two BF16 products
# into each FP32 lane, twice the FP32 FMA rate (Arm ARM, BFDOT).
ARM_BF16_SPEEDUP = 2
# The flags that give a CPU bf16 arithmetic in hardware, per instruction-set family, in the
# order `cpu_flop_per_cycle` tries them. AVX-NE-CONVERT (Sierra Forest, Arrow Lake) only
# converts bf16 to fp32 in hardware; the multiply-adds then run at the fp32 rate, as in
# oneDNN's avx2_vnni_2 kernels. Without any of them bf16 is emulated in software
# (converted and computed element by element): 0.84-1.3 GFLOP/s against 49-69 fp32 on a
# 2-core AMD EPYC VM, 1.3 against 120-166 on a 2-core Xeon VM, so no rate derived from the
# flags bounds it.
BF16_FLAGS = {"x86": ("amx_bf16", "avx512_bf16", "avx_ne_convert"), "arm64": ("bf16",)}
# AMD Zen 4 (family 0x19 = 25) executes 512-bit AVX-512 instructions as two 256-bit halves
# (AMD Software Optimization Guide for Zen 4, section 2.11), so its FP datapath is 256 bits
# wide even though the avx512f flag is set.
HALF_WIDTH_AVX512 = {("AuthenticAMD", 25)}

# Vector extensions by /proc/cpuinfo flag, widest first: (flags that must all be present,
# register width in bits, has FMA). x86 flags from the Linux kernel's cpufeatures.h; `asimd`
# is the arm64 Advanced SIMD (NEON) feature, 128 bits with FMA.
VECTOR_ISAS = (
    (("avx512f",), "avx512f", 512, True),
    (("avx2", "fma"), "avx2+fma", 256, True),
    (("avx", "fma"), "avx+fma", 256, True),
    (("avx",), "avx", 256, False),
    (("asimd",), "asimd", 128, True),
    (("sse2",), "sse2", 128, False),
)
FP32_BITS = 32


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_entry(path, key: str, entry) -> dict:
    """Validate one `devices:` entry; return it in SI units."""
    where = f"{path}: devices.{key}"
    if not isinstance(entry, dict):
        raise NnperfError(f"{where} is {type(entry).__name__}; expected a mapping of keys")
    for required in ENTRY_KEYS_REQUIRED:
        if required not in entry:
            raise NnperfError(
                f"{where} lacks key {required!r}; required: {', '.join(ENTRY_KEYS_REQUIRED)}"
            )
    unknown = sorted(set(entry) - set(ENTRY_KEYS_REQUIRED))
    if unknown:
        raise NnperfError(
            f"{where} has unknown key {unknown[0]!r}; allowed: {', '.join(ENTRY_KEYS_REQUIRED)}"
        )
    if entry["device"] not in DEVICES:
        raise NnperfError(f"{where}.device is {entry['device']!r}; allowed: {', '.join(DEVICES)}")
    for text_key in ("name", "source"):
        if not isinstance(entry[text_key], str) or not entry[text_key].strip():
            raise NnperfError(
                f"{where}.{text_key} is {entry[text_key]!r}; expected a non-empty string"
            )
    patterns = entry["match"]
    if (
        not isinstance(patterns, list)
        or not patterns
        or not all(isinstance(p, str) and p for p in patterns)
    ):
        raise NnperfError(
            f"{where}.match is {patterns!r}; expected a non-empty list of regular expressions"
        )
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise NnperfError(
                f"{where}.match pattern {pattern!r} is not a valid regular expression ({exc})"
            ) from None
    flops = entry["dense_tflop_s"]
    if not isinstance(flops, dict) or not flops:
        raise NnperfError(
            f"{where}.dense_tflop_s is {flops!r}; expected a mapping precision -> TFLOP/s"
        )
    for precision, value in flops.items():
        if precision not in PRECISIONS:
            raise NnperfError(
                f"{where}.dense_tflop_s has key {precision!r}; allowed: {', '.join(PRECISIONS)}"
            )
        if value is not None and not (_is_number(value) and value > 0):
            raise NnperfError(
                f"{where}.dense_tflop_s.{precision} is {value!r}; expected a positive number or null"
            )
    bandwidth = entry["memory_gb_s"]
    if bandwidth is not None and not (_is_number(bandwidth) and bandwidth > 0):
        raise NnperfError(
            f"{where}.memory_gb_s is {bandwidth!r}; expected a positive number (GB/s) or null"
        )
    return {
        "key": key,
        "name": entry["name"],
        "device": entry["device"],
        "match": list(patterns),
        "flop_s": {p: (None if v is None else float(v) * TERA) for p, v in flops.items()},
        "memory_bandwidth_bytes_s": None if bandwidth is None else float(bandwidth) * GIGA,
        "source": entry["source"],
        "derived": False,
    }


def parse_peaks(document, path="peaks.yaml") -> dict[str, dict]:
    """Validate a parsed peaks document; return {key: entry in SI units}."""
    if not isinstance(document, dict) or not isinstance(document.get("devices"), dict):
        raise NnperfError(f"{path}: top-level key 'devices' is missing or not a mapping of entries")
    unknown = sorted(set(document) - {"devices"})
    if unknown:
        raise NnperfError(f"{path}: unknown top-level key {unknown[0]!r}; allowed: devices")
    return {
        str(key): _check_entry(path, str(key), entry) for key, entry in document["devices"].items()
    }


def load_peaks(path: str | Path) -> dict[str, dict]:
    """Read and schema-check `config/peaks.yaml`."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NnperfError(
            f"{path}: file not found (datasheet peaks, see config/peaks.yaml)"
        ) from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise NnperfError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    return parse_peaks(document, path)


def match_device(device: str, device_name: str, peaks: dict[str, dict]) -> dict | None:
    """The one entry for `device` whose patterns match `device_name`, or None.

    Two matching entries are a mistake in the YAML (the roofs would depend on file order),
    so that raises with both keys named.
    """
    hits = [
        entry
        for entry in peaks.values()
        if entry["device"] == device
        and any(re.search(p, device_name, flags=re.IGNORECASE) for p in entry["match"])
    ]
    if len(hits) > 1:
        keys = ", ".join(e["key"] for e in hits)
        raise NnperfError(
            f"peaks.yaml: device name {device_name!r} matches several entries ({keys}); "
            "make their `match:` patterns exclusive"
        )
    return hits[0] if hits else None


def peak_origin(entry: Mapping | None) -> str:
    """What a ceilings JSON's `datasheet` entry is, as every table, sentence and figure names
    it: `derived` for a peak computed as cores x clock x FLOP/cycle (`derived_cpu_peak`),
    never called a datasheet figure; `datasheet` for a vendor's entry of peaks.yaml."""
    return "derived" if (entry or {}).get("derived") else "datasheet"


# ---------------------------------------------------------------------------------------
# CPU: a derived peak from /proc/cpuinfo


# Why a derived peak is null: the code `flop_s_null_reasons` stores, and its words (the job's
# log and the report's Ceilings and roofline figures word it when they show it).
NULL_PEAK_REASONS = {
    "no_vector_isa": "no known vector extension in the CPU flags",
    "no_native_bf16": "no native bf16 arithmetic (flags lack {flags}): bf16 runs emulated, "
    "no derived peak",
    "clock_unread": "the CPU clock could not be read ({clock_source})",
}


def null_peak_reason(code: str, entry: Mapping) -> str:
    """Why a derived `entry` (a ceilings JSON's datasheet) gives a peak as null, in words."""
    reason = NULL_PEAK_REASONS.get(code)
    if reason is None:
        return code  # a JSON from before the codes held the sentence itself
    flags = ", ".join(entry.get("bf16_flags") or ())
    return reason.format(flags=flags, clock_source=entry.get("clock_source"))


def bf16_flags(flags) -> list[str]:
    """The flags that would give a CPU with these flags bf16 arithmetic (`BF16_FLAGS`)."""
    return list(BF16_FLAGS["arm64" if "asimd" in set(flags) else "x86"])


def _bf16_per_cycle(flag_set: set, fp32: int) -> tuple[int | None, str]:
    """bf16 FLOP per cycle per core and why; None where bf16 has no hardware arithmetic."""
    if "amx_bf16" in flag_set:
        return AMX_BF16_FLOP_PER_CYCLE, f"amx_bf16: {AMX_BF16_FLOP_PER_CYCLE} per core (AMX TMUL)"
    if "avx512_bf16" in flag_set:
        return fp32 * AVX512_BF16_SPEEDUP, f"avx512_bf16: {AVX512_BF16_SPEEDUP} x fp32 (VDPBF16PS)"
    if "avx_ne_convert" in flag_set:
        return fp32, "avx_ne_convert: converted in hardware, multiplied at the fp32 rate"
    if "asimd" in flag_set and "bf16" in flag_set:
        return fp32 * ARM_BF16_SPEEDUP, f"arm64 bf16: {ARM_BF16_SPEEDUP} x fp32 (BFDOT)"
    return None, "no_native_bf16"


def cpu_flop_per_cycle(
    flags, vendor: str | None = None, family: int | None = None, fma_units: int = DEFAULT_FMA_UNITS
) -> dict:
    """FLOP per cycle per core for fp32 and bf16, from ISA flags; with the reasoning.

    fp32 = lanes x FMA units x 2 with FMA (lanes = vector bits / 32); without FMA a core
    has one add and one multiply pipe, so lanes x 2. bf16: AMX tiles if present, else
    2 x fp32 with AVX512_BF16 (or arm64 BF16), the fp32 rate with AVX-NE-CONVERT, else
    None: without those flags bf16 is emulated, far below any rate the flags imply, and a
    roof at the fp32 rate would claim a bound the CPU does not have. `null_reasons` says
    why each None is None.
    """
    if not isinstance(fma_units, int) or isinstance(fma_units, bool) or fma_units < 1:
        raise NnperfError(f"cpu_fma_units is {fma_units!r}; expected an integer >= 1")
    flag_set = set(flags)
    for required, isa, bits, has_fma in VECTOR_ISAS:
        if all(f in flag_set for f in required):
            break
    else:
        return {
            "fp32": None,
            "bf16": None,
            "isa": None,
            "explanation": "no known vector extension in the CPU flags",
            "null_reasons": dict.fromkeys(("fp32", "bf16"), "no_vector_isa"),
        }
    if isa == "avx512f" and (vendor, family) in HALF_WIDTH_AVX512:
        bits, isa = 256, "avx512f (256-bit datapath)"
    lanes = bits // FP32_BITS
    if has_fma:
        fp32 = lanes * fma_units * FLOP_PER_FMA
        why = (
            f"{isa}: {lanes} fp32 lanes x {fma_units} FMA units x {FLOP_PER_FMA} FLOP/FMA = {fp32}"
        )
    else:
        fp32 = lanes * 2
        why = f"{isa}: {lanes} fp32 lanes x (1 add + 1 multiply pipe) = {fp32}"
    bf16, bf16_why = _bf16_per_cycle(flag_set, fp32)
    return {
        "fp32": fp32,
        "bf16": bf16,
        "isa": isa,
        "explanation": f"{why}; bf16: {bf16_why}",
        "null_reasons": {} if bf16 is not None else {"bf16": bf16_why},
    }


def derived_cpu_peak(
    cpuinfo: dict,
    cores: int,
    clock_hz: float | None,
    clock_source: str,
    fma_units: int = DEFAULT_FMA_UNITS,
) -> dict:
    """A datasheet-shaped entry computed as cores x clock x FLOP/cycle, labelled derived."""
    per_cycle = cpu_flop_per_cycle(
        cpuinfo.get("flags", []), cpuinfo.get("vendor"), cpuinfo.get("family"), fma_units
    )
    flop_s, null_reasons = {}, {}
    for precision in SUPPORTED_PRECISIONS["cpu"]:
        per = per_cycle[precision]
        flop_s[precision] = None if per is None or not clock_hz else cores * clock_hz * per
        if per is None:
            null_reasons[precision] = per_cycle["null_reasons"][precision]
        elif not clock_hz:
            null_reasons[precision] = "clock_unread"
    return {
        "key": "cpu_derived",
        "name": f"{cpuinfo.get('model_name') or 'unknown CPU'} (derived peak)",
        "device": "cpu",
        "flop_s": flop_s,
        # Why a precision's derived peak is null (`NULL_PEAK_CODES`; a precision absent here
        # has a number), and the flags bf16 arithmetic would need.
        "flop_s_null_reasons": null_reasons,
        "bf16_flags": bf16_flags(cpuinfo.get("flags", [])),
        "memory_bandwidth_bytes_s": None,
        # Not a datasheet: cores x clock_hz x flop_per_cycle_per_core (from the ISA flags,
        # `cpu_flop_per_cycle`); the numbers are the fields below.
        "source": "derived",
        "derived": True,
        "cores": cores,
        "clock_hz": clock_hz,
        "clock_source": clock_source,
        "flop_per_cycle_per_core": {"fp32": per_cycle["fp32"], "bf16": per_cycle["bf16"]},
        "fma_units": fma_units,
        "isa": per_cycle["isa"],
    }
