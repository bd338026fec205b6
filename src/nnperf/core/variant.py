"""Variant settings: the named set of optimisation toggles one timed run applies.

A variant (config `variants: {name: {...}}`) is a dict of toggles; this module turns it into
a validated, fully defaulted `VariantSettings` and back into a plain dict for the run JSON.
It says nothing about how a toggle is applied (that is `nnperf.engine.step`) and does not read the
config file (the workflow schema fills config defaults; this module fills the same defaults
for people who call `nnperf run` by hand).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from nnperf.core.contract import VariantSettings
from nnperf.core.errors import NnperfError
from nnperf.core.vocab import COMPILE_MODES, DATA_PATHS, OPTIMIZER_IMPLS, TF32_PRECISIONS

_FIELDS = {f.name: f for f in dataclasses.fields(VariantSettings)}


def _check_bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise NnperfError(f"variant setting {key}={value!r} is not allowed; allowed: true, false")
    return value


def _check_int(key: str, value: Any, minimum: int, nullable: bool) -> int | None:
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        allowed = f"an integer >= {minimum}" + (" or null" if nullable else "")
        raise NnperfError(f"variant setting {key}={value!r} is not allowed; allowed: {allowed}")
    return value


def _check_choice(key: str, value: Any, choices: tuple) -> Any:
    # `False in ("default",)` is False but `0 in (False, ...)` is True: compare strings only.
    if not (value is False and False in choices) and not (
        isinstance(value, str) and value in choices
    ):
        allowed = ", ".join("false" if c is False else str(c) for c in choices)
        raise NnperfError(f"variant setting {key}={value!r} is not allowed; allowed: {allowed}")
    return value


def parse_variant_settings(raw: dict[str, Any] | None) -> VariantSettings:
    """Validate a variant's toggles and fill defaults; unknown keys are an error."""
    raw = dict(raw or {})
    unknown = sorted(set(raw) - set(_FIELDS))
    if unknown:
        raise NnperfError(
            f"variant setting {unknown[0]!r} is unknown; allowed: {', '.join(_FIELDS)}"
        )
    values: dict[str, Any] = {}
    for key in ("channels_last", "cudnn_benchmark", "pin_memory"):
        if key in raw:
            values[key] = _check_bool(key, raw[key])
    if "compile" in raw:
        value = raw["compile"]
        # YAML users write `compile: null` or `compile: false` for "off"; both mean off.
        if value is None:
            value = False
        if value is True:
            value = "default"
        values["compile"] = _check_choice("compile", value, COMPILE_MODES)
    if "optimizer_impl" in raw:
        values["optimizer_impl"] = _check_choice(
            "optimizer_impl", raw["optimizer_impl"], OPTIMIZER_IMPLS
        )
    if "data_path" in raw:
        values["data_path"] = _check_choice("data_path", raw["data_path"], DATA_PATHS)
    if "num_workers" in raw:
        values["num_workers"] = _check_int("num_workers", raw["num_workers"], 0, False)
    if "prefetch_factor" in raw:
        values["prefetch_factor"] = _check_int("prefetch_factor", raw["prefetch_factor"], 1, True)
    if "cpu_threads" in raw:
        values["cpu_threads"] = _check_int("cpu_threads", raw["cpu_threads"], 1, True)
    return VariantSettings(**values)


def load_variant_settings(text_or_path: str | None) -> VariantSettings:
    """Parse `--variant-settings`: a JSON object given inline or as a path to a JSON file."""
    if text_or_path is None or text_or_path == "":
        return parse_variant_settings({})
    text = text_or_path
    source = "--variant-settings"
    if not text.lstrip().startswith("{"):
        path = Path(text)
        if not path.is_file():
            raise NnperfError(
                f"--variant-settings {text!r} is neither a JSON object nor an existing file"
            )
        text = path.read_text(encoding="utf-8")
        source = str(path)
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NnperfError(f"{source}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(raw, dict):
        raise NnperfError(f"{source}: must be a JSON object of variant settings, got {raw!r}")
    return parse_variant_settings(raw)


def sharing_key(device: str, precision: str, settings: VariantSettings) -> tuple | None:
    """What trainings must have alike to share one worker process, their windows taking
    turns (`nnperf.engine.sharing`), or None for one that cannot share any.

    Alike: the device and the process-global switches their builds set (the thread count,
    TF32 math, cudnn.benchmark), which would otherwise have to be set again before every
    window. Per model, optimizer or feeder, and so free to differ: channels_last, the
    optimizer implementation, the data path, the autocast precisions and the batch size. Never shared: a
    compiled training (dynamo's caches, recompilation limits and the inductor's threads are
    per process, and CUDA graphs share one memory pool) and one with DataLoader workers
    (they go on loading, on the same cores, through the other's windows).
    """
    if settings.compile or settings.num_workers > 0:
        return None
    return (device, precision in TF32_PRECISIONS, settings.cudnn_benchmark, settings.cpu_threads)
