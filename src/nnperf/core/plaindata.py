"""Settings and requests as plain JSON-able data, and back, strictly.

Snakemake's `params:` must be plain data for its change detection to see them (it records
only builtin values), and a process run under ncu cannot be handed Python objects, so every
request crosses into a job as `to_dict()` and is rebuilt there with `from_dict()`. Rebuilding
is strict: an unknown key or a value of the wrong type is one line naming the key and what is
allowed, never a silently ignored typo. It knows dataclasses and type hints, not the classes
of `nnperf.core.settings` and `nnperf.core.requests`.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any, Mapping, TypeVar

from nnperf.core.errors import NnperfError

T = TypeVar("T")


def to_dict(value: Any) -> Any:
    """A request or settings object as plain JSON-able data (tuples become lists)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_dict(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {key: to_dict(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_dict(item) for item in value]
    return value


def from_dict(cls: type[T], data: Mapping[str, Any] | None, where: str = "") -> T:
    """Build `cls` from plain data; missing keys take their defaults.

    Raises NnperfError naming the key for an unknown key or a value of the wrong type.
    """
    if data is None:
        data = {}
    if isinstance(data, cls):
        return data
    if not isinstance(data, Mapping):
        raise NnperfError(f"{where or cls.__name__} = {data!r} is not a mapping")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise NnperfError(
            f"{_join(where, unknown[0])} is not a setting of {cls.__name__}; "
            f"allowed: {', '.join(names)}"
        )
    values = {name: _convert(hints[name], data[name], _join(where, name)) for name in data}
    try:
        return cls(**values)
    except TypeError as exc:  # a required key is missing
        raise NnperfError(f"{where or cls.__name__}: {exc}") from None


def to_json(value: Any) -> str:
    return json.dumps(to_dict(value), indent=2, sort_keys=True) + "\n"


def write_request(path: str | Path, request: Any) -> None:
    """Write a request as JSON for a process that cannot be handed Python objects (ncu)."""
    from nnperf.core.files import atomic_path

    with atomic_path(path) as tmp:
        tmp.write_text(to_json(request), encoding="utf-8")


def read_request(cls: type[T], path: str | Path) -> T:
    """Read a request written by `write_request`, with one-line errors naming the file."""
    from nnperf.core.files import load_json

    data = load_json(path, what="request file")
    try:
        return from_dict(cls, data)
    except NnperfError as exc:
        raise NnperfError(f"{path}: {exc}") from None


def _join(where: str, key: Any) -> str:
    return f"{where}.{key}" if where else str(key)


def _type_name(hint: Any) -> str:
    names = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
    options = [a for a in typing.get_args(hint)] if _is_union(hint) else [hint]
    words = [
        "null" if a is type(None) else names.get(a, getattr(a, "__name__", str(a))) for a in options
    ]
    return " or ".join(words)


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


def _convert(hint: Any, value: Any, where: str) -> Any:
    """`value` as the type `hint` names, or NnperfError."""
    if _is_union(hint):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        # bool before int: `True` must not become 1, and `False` stays a compile mode.
        for option in sorted(options, key=lambda o: o is not bool):
            if option is type(None):
                continue
            try:
                return _convert(option, value, where)
            except NnperfError:
                continue
        raise NnperfError(f"{where} = {value!r} has the wrong type; expected {_type_name(hint)}")
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        return from_dict(hint, value, where)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise NnperfError(f"{where} = {value!r} has the wrong type; expected a list")
        item = typing.get_args(hint)[0]
        return tuple(_convert(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, Mapping):
            raise NnperfError(f"{where} = {value!r} has the wrong type; expected a mapping")
        _, item = typing.get_args(hint)
        return {str(k): _convert(item, v, _join(where, k)) for k, v in value.items()}
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
    elif hint is Any:
        return value
    raise NnperfError(f"{where} = {value!r} has the wrong type; expected {_type_name(hint)}")
