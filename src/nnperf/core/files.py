"""Atomic, versioned reads and writes of the pipeline's JSON and CSV files.

Every output is written to a temporary file in the same directory and renamed into place, so
an interrupted job never leaves a file that looks finished (Snakemake would otherwise trust
it on the next run). JSON documents carry `schema_version` so readers can refuse formats they
do not understand.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

SCHEMA_VERSION = 1


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to `path`; rename it onto `path` only on success."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        # mkstemp creates 0600 files; results must be readable like any other file the
        # user writes (shared cluster folders), so apply the umask as open() would.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _json_default(value: Any) -> Any:
    """Serialise numpy/torch scalars and paths that json does not know."""
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"cannot serialise {type(value).__name__} to JSON")


def _finite_or_none(value: Any) -> Any:
    """JSON has no NaN/Infinity; strict readers reject them, so they become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(v) for v in value]
    return value


def write_json(path: str | os.PathLike, document: dict) -> None:
    """Write `document` with `schema_version` first, atomically."""
    body = {"schema_version": SCHEMA_VERSION, **document}
    text = json.dumps(_finite_or_none(body), indent=2, sort_keys=False, default=_json_default)
    with atomic_path(path) as tmp:
        tmp.write_text(text + "\n", encoding="utf-8")


def load_json(path: str | os.PathLike, what: str = "file") -> Any:
    """Parse a JSON file, with one-line errors naming it (`what` says what was expected)."""
    from nnperf.core.errors import NnperfError

    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NnperfError(f"{path}: {what} not found") from None
    except json.JSONDecodeError as exc:
        raise NnperfError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None


def read_json(path: str | os.PathLike) -> dict:
    """Read a document written by `write_json`, refusing unknown schema versions."""
    from nnperf.core.errors import NnperfError

    document = load_json(path)
    version = document.get("schema_version")
    if version != SCHEMA_VERSION:
        raise NnperfError(
            f"{path}: schema_version {version!r} is not supported (expected {SCHEMA_VERSION})"
        )
    return document


def read_table(
    path: str | os.PathLike,
    columns: Iterable[str] = (),
    needed_by: str | None = None,
    hint: str | None = None,
    empty_ok: bool = False,
    **options,
):
    """A CSV table (a pandas DataFrame), or NnperfError naming the file when it cannot be
    parsed or lacks one of `columns` (those the caller reads): the line says which are
    missing, what needs them (`needed_by`) and, after it, `hint` (how to write the table
    again). `empty_ok`: an empty file is a table without rows or columns (a profile that
    recorded nothing), not an error. `options` go to `pandas.read_csv`.

    Every table the pipeline reads back goes through here, so a table edited by hand or
    written by an older nnperf is one line naming it, not a pandas KeyError or a blank cell
    far from the cause.
    """
    import pandas as pd

    from nnperf.core.errors import NnperfError

    try:
        frame = pd.read_csv(path, **options)
    except FileNotFoundError:
        raise NnperfError(f"{os.fspath(path)}: file not found") from None
    except pd.errors.EmptyDataError:
        if empty_ok:
            return pd.DataFrame()
        raise NnperfError(
            f"{os.fspath(path)}: not a readable CSV table (the file is empty)"
        ) from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise NnperfError(f"{os.fspath(path)}: not a readable CSV table ({first_line})") from None
    missing = [column for column in dict.fromkeys(columns) if column not in frame.columns]
    if missing:
        needed = f" (needed by {needed_by})" if needed_by else ""
        after = f"; {hint}" if hint else ""
        raise NnperfError(f"{os.fspath(path)}: lacks column(s) {', '.join(missing)}{needed}{after}")
    return frame


def write_csv(path: str | os.PathLike, frame) -> None:
    """Write a pandas DataFrame as CSV without its index, atomically."""
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)
